// Hand-built trajectories for the learner's data tests, shaped as the episode actor builds them:
// each turn's new prompt tokens (mask 0, log-prob 0), then its sampled tokens (mask 1).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "messages/messages.hpp"

namespace cuda_agent::learner::testing {

inline tool_call call(std::string tool, std::string arguments_json, std::string parse_error = {}) {
  auto id = "call-" + tool;
  return {std::move(id), std::move(tool), std::move(arguments_json), std::move(parse_error)};
}

inline trajectory_turn turn(int32_t number, const std::vector<int32_t>& prompt,
                            const std::vector<int32_t>& sampled, const std::vector<float>& logprobs,
                            int64_t weight_version, std::vector<tool_call> calls = {}) {
  trajectory_turn t;
  t.turn = number;
  t.prompt_token_count = static_cast<int32_t>(prompt.size());
  t.token_ids = prompt;
  t.token_ids.insert(t.token_ids.end(), sampled.begin(), sampled.end());
  t.logprobs.assign(prompt.size(), 0.0f);
  t.logprobs.insert(t.logprobs.end(), logprobs.begin(), logprobs.end());
  t.loss_mask.assign(prompt.size(), 0);
  t.loss_mask.resize(t.token_ids.size(), 1);
  t.weight_version = weight_version;
  t.tool_calls = std::move(calls);
  return t;
}

inline trajectory episode(std::string id, std::vector<trajectory_turn> turns, int32_t reward,
                          termination reason = termination::agent_done) {
  return {std::move(id), "L1-19", "torch", std::move(turns), reward, reason};
}

// A rewarded episode worth imitating: distinct calls and completions, agent_done.
inline trajectory good_episode(std::string id, int32_t reward = 2) {
  return episode(std::move(id),
                 {turn(1, {100, 101, 102}, {200, 201}, {-0.5f, -0.25f}, 7,
                       {call("Write", R"({"file_path":"kernel.cu","content":"//"})")}),
                  turn(2, {103}, {202, 203}, {-1.0f, -0.125f}, 8,
                       {call("Bash", R"({"command":"cuda-agent check"})")}),
                  turn(3, {104}, {204}, {-0.0625f}, 8)},
                 reward);
}

}  // namespace cuda_agent::learner::testing
