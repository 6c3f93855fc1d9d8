#include "actors/learner/rft_filter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "actors/learner/episode_sample.hpp"

namespace cuda_agent::learner {
namespace {

bool has_policy_tokens(const trajectory& t) {
  for (const auto& turn : t.turns)
    for (const auto m : turn.loss_mask)
      if (m != 0) return true;
  return false;
}

bool is_truncated(termination reason) {
  return reason == termination::turn_budget || reason == termination::token_budget ||
         reason == termination::timeout;
}

bool has_invalid_call(const trajectory& t) {
  for (const auto& turn : t.turns)
    for (const auto& call : turn.tool_calls)
      if (!call.parse_error.empty()) return true;
  return false;
}

bool repeats_a_call(const trajectory& t, int32_t max_repeats) {
  const tool_call* previous = nullptr;
  int32_t run = 0;
  for (const auto& turn : t.turns) {
    for (const auto& call : turn.tool_calls) {
      const bool same = previous != nullptr && call.tool == previous->tool &&
                        call.arguments_json == previous->arguments_json;
      run = same ? run + 1 : 1;
      if (run >= max_repeats) return true;
      previous = &call;
    }
  }
  return false;
}

std::vector<int32_t> sampled_tokens(const trajectory_turn& turn) {
  std::vector<int32_t> out;
  const auto n = std::min(turn.token_ids.size(), turn.loss_mask.size());
  for (std::size_t i = 0; i < n; ++i)
    if (turn.loss_mask[i] != 0) out.push_back(turn.token_ids[i]);
  return out;
}

bool repeats_a_completion(const trajectory& t, int32_t max_repeats) {
  std::vector<int32_t> previous;
  int32_t run = 0;
  for (const auto& turn : t.turns) {
    auto completion = sampled_tokens(turn);
    // Turns without sampled tokens (a policy without token ids) are no evidence of a loop.
    run = completion.empty() ? 0 : completion == previous ? run + 1 : 1;
    if (run >= max_repeats) return true;
    previous = std::move(completion);
  }
  return false;
}

}  // namespace

std::string_view to_string(rft_verdict verdict) {
  switch (verdict) {
    case rft_verdict::kept: return "kept";
    case rft_verdict::low_reward: return "low_reward";
    case rft_verdict::invalid_tool_call: return "invalid_tool_call";
    case rft_verdict::loop: return "loop";
    case rft_verdict::truncated: return "truncated";
    case rft_verdict::no_tokens: return "no_tokens";
  }
  return "unknown";
}

rft_verdict judge(const trajectory& t, const rft_filter_options& options) {
  if (options.max_repeats < 2)
    throw learner_error{fmt::format(
        "rft_filter_options.max_repeats is {}; it must be at least 2 (a call made once is no loop)",
        options.max_repeats)};
  if (!has_policy_tokens(t)) return rft_verdict::no_tokens;
  if (t.reward < options.min_reward) return rft_verdict::low_reward;
  if (options.drop_truncated && is_truncated(t.reason)) return rft_verdict::truncated;
  if (has_invalid_call(t)) return rft_verdict::invalid_tool_call;
  if (repeats_a_call(t, options.max_repeats) || repeats_a_completion(t, options.max_repeats))
    return rft_verdict::loop;
  return rft_verdict::kept;
}

rft_selection select_for_rft(const std::vector<trajectory>& trajectories,
                             const rft_filter_options& options) {
  rft_selection selection;
  for (std::size_t i = 0; i < trajectories.size(); ++i) {
    const auto verdict = judge(trajectories[i], options);
    if (verdict == rft_verdict::kept)
      selection.kept.push_back(i);
    else
      ++selection.dropped[std::string{to_string(verdict)}];
  }
  return selection;
}

}  // namespace cuda_agent::learner
