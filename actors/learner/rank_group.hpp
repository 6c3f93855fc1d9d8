// The data-parallel learner: rank 0 is the train process's own learner, ranks 1 .. world - 1
// are `cuda-agent learner-rank` child processes, each with its own copy of the actor and critic
// (on CUDA, a GPU each). Rank 0 is the truth: it hands every rank its whole state at the start,
// sends each step's batch to all, and the ranks train together (learner.hpp's set_collective).
//
//   rank_group group{options, local};          // starts the ranks, shares local's state
//   step_report r = group.step("ppo", samples); // every rank trains on its share
//
// After each step the ranks compare weight digests; a rank that differs is an error, never a
// silently forked model. A rank that dies, stops or is cut off during a step (rank_failure)
// is reported on stderr; every rank is then restarted from rank 0's state before the step
// (a snapshot, when PPO takes several optimiser steps) and the step is retried, up to
// options.retries times. The ranks end with the group, or when rank 0's process dies (their
// connection closes).
//
// One rank over NCCL (world 1, collective "nccl") runs the NCCL code path on one GPU; one rank
// over tcp is the plain learner.
#pragma once

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/learner/collective.hpp"
#include "actors/learner/learner.hpp"
#include "actors/process/background_process.hpp"

namespace cuda_agent::learner {

struct rank_group_options {
  int world = 1;
  std::string collective = "tcp";  // "tcp" or "nccl"
  std::chrono::milliseconds timeout{600'000};
  int retries = 2;
  std::filesystem::path binary;     // cuda-agent, run as `learner-rank` for ranks 1 ..
  std::filesystem::path model_dir;  // the checkpoint every rank builds its models from
  bool critic = true;
  learner_options learner;
};

// Where rank `rank` runs when rank 0 runs on `rank0`: the same CPU, or the CUDA device `rank`
// places after rank 0's ("cuda" counts as cuda:0).
torch::Device rank_device(const torch::Device& rank0, int rank);

class rank_group {
 public:
  // Starts the ranks and hands them `local`'s state (rank 0's). Throws learner_error for bad
  // options, rank_failure when the ranks cannot be started.
  rank_group(rank_group_options options, learner& local);
  ~rank_group();  // tells the ranks to stop; kills what does not
  rank_group(const rank_group&) = delete;
  rank_group& operator=(const rank_group&) = delete;

  // One step of `stage` ("rft", "value_pretrain" or "ppo") over the batch, on every rank.
  step_report step(const std::string& stage, const std::vector<episode_sample>& samples);

  int world() const { return options_.world; }
  int restarts() const { return restarts_; }

 private:
  void start();
  void stop(bool graceful);

  rank_group_options options_;
  learner& local_;
  std::string secret_;
  std::shared_ptr<tcp_collective> control_;
  std::vector<std::unique_ptr<background_process>> ranks_;  // rank r at r - 1
  int restarts_ = 0;
};

// The body of `cuda-agent learner-rank`: joins rank 0 at host:port as `rank` of `world` with
// the secret of the environment variable CUDA_AGENT_LEARNER_SECRET, then trains as rank 0
// says until it says stop (0) or goes away (1).
int serve_rank(const std::string& host, int port, int rank, int world);

// The one step function every rank runs.
step_report run_stage(learner& l, const std::string& stage, const std::vector<episode_sample>& samples);

}  // namespace cuda_agent::learner
