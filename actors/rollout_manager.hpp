// The rollout manager: runs N episodes over a list of tasks, at most K at a time. It prepares
// each episode's directory, gives it its own sandboxed tools, and retries an episode whose
// infrastructure failed (a dead policy server, a lost worker, an episode actor that crashed) up
// to a budget, but never one whose candidate failed: that result is the agent's and it stands.
//
// `(run_atom)` starts the run and is answered with the number of episodes once all have ended;
// `(status_atom)` answers a rollout_status (messages.hpp) at any time.
//
// With a learner (rollout_services::learner, actors/learner/learner_actor.hpp) every settled
// episode's trajectory goes to it, and admission is bounded by staleness: the k-th episode (in
// first-attempt order) belongs to batch floor(k / batch_episodes) and starts only once the
// learner has consumed batch floor(k / batch_episodes) - staleness - 1 (its learner_update says
// how many batches it has consumed). Staleness 0 is synchronous: a batch is sampled wholly by the
// weights trained on every batch before it; staleness s lets sampling run s batches ahead of
// training. Retries are not held back: they stand in for an episode already admitted. A learner
// that stops ends the run with an error that says so. Per-episode results are appended to a
// rollout_results shared with the caller (read after the run's answer), and every message of
// every episode goes to the recorder.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>


#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include "actors/episode.hpp"
#include "actors/episode_workdir.hpp"

namespace cuda_agent {


struct episode_summary {
  std::string episode_id;
  int32_t index = -1;  // the episode's number in its run (ids are <run>-<index>...)
  task_spec task;
  int32_t attempts = 1;
  episode_ended ended;
  reward_record verdict;
};

struct rollout_results {
  std::mutex mutex;
  std::vector<episode_summary> episodes;
};

struct rollout_plan {
  std::string run_id;
  std::vector<task_spec> tasks;  // episode i works on tasks[i % tasks.size()]
  int32_t episodes = 1;
  // A resumed run (cuda-agent rollout --resume): the episodes its log already settled count in
  // the results as they were; the rest run again with ids marked "-resumeN", so no id repeats.
  std::vector<episode_summary> settled;
  int32_t resume = 0;
  int32_t concurrency = 1;
  int32_t retries = 2;
  std::filesystem::path episodes_dir;
  workdir_sources sources;
  episode_config base;  // policy name, device, budgets, prompt; ids and paths are filled per episode
  // With a learner only: episodes per learner batch and the admission bound (above).
  int32_t batch_episodes = 1;
  int32_t staleness = 0;
};

struct rollout_services {
  policy_actor policy;  // used when there is no policy_supervisor
  compiler_pool_actor compiler;
  gpu_pool_actor gpu;
  recorder_actor recorder;
  // This episode's tools, started before the episode and stopped after it.
  std::function<tools_actor(const episode_config&)> make_tools;
  // When set, every episode asks it for its current child "policy" before it starts, so that an
  // episode retried after the policy actor crashed talks to the restarted one.
  supervisor_actor policy_supervisor;
  // When set, every settled episode's trajectory goes to it and admission waits for its
  // learner_update messages (above).
  learner_actor learner;
};

rollout_actor spawn_rollout_manager(caf::actor_system& system, rollout_plan plan,
                                 rollout_services services,
                                 std::shared_ptr<rollout_results> results);

}  // namespace cuda_agent
