// One episode as the learner trains on it: the exact token sequence the policy saw and wrote,
// with what the loss needs per token. Built from a `trajectory` message (live from a rollout, or
// read back from a message log) by trajectory_source.hpp; packed into padded micro-batches by
// packing.hpp; no LibTorch here, so the data side is testable on its own.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace cuda_agent::learner {

// Bad learner input or state (a trajectory without tokens, a torn checkpoint, a bad setting):
// the message names the problem and the fix.
struct learner_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct episode_sample {
  std::string episode_id;
  std::string task_id;
  // x_1..x_T in the policy's tokenizer: every turn's prompt tokens, then its sampled tokens.
  std::vector<int64_t> tokens;
  // 1 where x_t was sampled by the policy (assistant completions, their end-of-turn token
  // included); 0 on prompts, tool observations and the chat format's own markup.
  std::vector<uint8_t> loss_mask;
  // log p(x_t) under the weights that sampled it, as the sampler computed it; 0 where mask is 0.
  std::vector<float> rollout_logprobs;
  // The weight version that sampled each turn, in turn order (one per policy turn).
  std::vector<int64_t> turn_versions;
  int32_t reward = -1;  // the harness's milestone reward of the final candidate
  termination reason = termination::agent_done;
  int32_t turns = 0;

  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t policy_tokens() const;  // tokens with loss_mask 1
  // The oldest weight version among the turns (0 when there are none).
  int64_t min_version() const;
};

inline int64_t episode_sample::policy_tokens() const {
  int64_t n = 0;
  for (const auto m : loss_mask) n += m != 0;
  return n;
}

inline int64_t episode_sample::min_version() const {
  int64_t v = turn_versions.empty() ? 0 : turn_versions.front();
  for (const auto t : turn_versions) v = t < v ? t : v;
  return v;
}

}  // namespace cuda_agent::learner
