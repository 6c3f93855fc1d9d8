// Which trajectories rejection fine-tuning trains on: the ones that earned the reward, and got
// there in a way worth imitating. A trajectory is dropped for the first of these that applies,
// in this order:
//
//   no_tokens          no token with loss mask 1: nothing to train on (a policy that returns no
//                      token ids). First, so that the count says how many lack tokens at all.
//   low_reward         reward below min_reward. Before the behavioural checks, so that their
//                      counts are rewarded trajectories the filter turned down.
//   truncated          (drop_truncated) ended by turn_budget, token_budget or timeout: a
//                      runaway that was cut off, whatever its last candidate earned.
//   invalid_tool_call  a tool call with a non-empty parse_error in any turn: imitating it
//                      teaches malformed calls.
//   loop               the same call (tool and arguments_json) max_repeats times in a row,
//                      across turns, or the same non-empty sampled tokens in max_repeats
//                      consecutive turns.
//
// Everything else is kept.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "messages/messages.hpp"

namespace cuda_agent::learner {

struct rft_filter_options {
  int32_t min_reward = 1;
  int32_t max_repeats = 3;  // at least 2: a call made once is no loop
  bool drop_truncated = true;
};

enum class rft_verdict { kept, low_reward, invalid_tool_call, loop, truncated, no_tokens };

std::string_view to_string(rft_verdict verdict);  // "kept", "low_reward", ...

// The verdict on one trajectory. Throws learner_error when options.max_repeats is below 2.
rft_verdict judge(const trajectory& t, const rft_filter_options& options);

struct rft_selection {
  std::vector<std::size_t> kept;          // indices into the trajectories, in order
  std::map<std::string, int64_t> dropped;  // to_string(verdict) -> count, for the verdicts seen
};

rft_selection select_for_rft(const std::vector<trajectory>& trajectories,
                             const rft_filter_options& options);

}  // namespace cuda_agent::learner
