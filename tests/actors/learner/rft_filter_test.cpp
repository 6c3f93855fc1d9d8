#include "actors/learner/rft_filter.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "actors/learner/episode_sample.hpp"
#include "tests/actors/learner/trajectory_builders.hpp"

namespace cuda_agent::learner {
namespace {

using testing::call;
using testing::episode;
using testing::good_episode;
using testing::turn;

const rft_filter_options defaults;

// Turns that each call `calls[i]`, with distinct sampled tokens, so that only the calls repeat.
trajectory calling(const std::vector<tool_call>& calls, int32_t reward = 2) {
  std::vector<trajectory_turn> turns;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    const auto n = static_cast<int32_t>(i);
    turns.push_back(turn(n + 1, {100 + n}, {200 + n}, {-0.5f}, 1, {calls[i]}));
  }
  return episode("ep-calls", std::move(turns), reward);
}

// Turns that each sample `completions[i]` after a distinct prompt, with distinct calls.
trajectory sampling(const std::vector<std::vector<int32_t>>& completions) {
  std::vector<trajectory_turn> turns;
  for (std::size_t i = 0; i < completions.size(); ++i) {
    const auto n = static_cast<int32_t>(i);
    const std::vector<float> logprobs(completions[i].size(), -0.5f);
    turns.push_back(turn(n + 1, {100 + n}, completions[i], logprobs, 1,
                         {call("Read", R"({"file_path":"f)" + std::to_string(n) + R"("})")}));
  }
  return episode("ep-sampling", std::move(turns), 2);
}

const tool_call check = call("Bash", R"({"command":"cuda-agent check"})");
const tool_call read_kernel = call("Read", R"({"file_path":"kernel.cu"})");

TEST(rft_filter, a_rewarded_clean_episode_is_kept) {
  EXPECT_EQ(judge(good_episode("ep-1", 1), defaults), rft_verdict::kept);  // reward == min_reward
  EXPECT_EQ(judge(good_episode("ep-1", 3), defaults), rft_verdict::kept);
  // An error of the agent's own (not a budget) is judged by its reward.
  EXPECT_EQ(judge(episode("ep-1", good_episode("x").turns, 2, termination::error), defaults),
            rft_verdict::kept);
}

TEST(rft_filter, low_reward) {
  EXPECT_EQ(judge(good_episode("ep-1", 0), defaults), rft_verdict::low_reward);
  EXPECT_EQ(judge(good_episode("ep-1", -1), defaults), rft_verdict::low_reward);
  rft_filter_options strict;
  strict.min_reward = 3;
  EXPECT_EQ(judge(good_episode("ep-1", 2), strict), rft_verdict::low_reward);
  EXPECT_EQ(judge(good_episode("ep-1", 3), strict), rft_verdict::kept);
}

TEST(rft_filter, truncated_by_a_budget) {
  for (const auto reason : {termination::turn_budget, termination::token_budget,
                            termination::timeout}) {
    const auto t = episode("ep-1", good_episode("x").turns, 2, reason);
    EXPECT_EQ(judge(t, defaults), rft_verdict::truncated) << to_string(reason);
    rft_filter_options keep_truncated;
    keep_truncated.drop_truncated = false;
    EXPECT_EQ(judge(t, keep_truncated), rft_verdict::kept) << to_string(reason);
  }
}

TEST(rft_filter, invalid_tool_call_in_any_turn) {
  auto t = good_episode("ep-1");
  t.turns[1].tool_calls.push_back(call("Edit", "not json", "arguments are not a JSON object"));
  EXPECT_EQ(judge(t, defaults), rft_verdict::invalid_tool_call);
  t.turns[1].tool_calls.back().parse_error.clear();
  EXPECT_EQ(judge(t, defaults), rft_verdict::kept);
}

TEST(rft_filter, the_same_call_max_repeats_times_in_a_row_is_a_loop) {
  EXPECT_EQ(judge(calling({read_kernel, check, check, check}), defaults), rft_verdict::loop);
  EXPECT_EQ(judge(calling({check, check, read_kernel, check}), defaults), rft_verdict::kept);
  // The same tool with other arguments is another call.
  const auto other = call("Bash", R"({"command":"nvcc --version"})");
  EXPECT_EQ(judge(calling({check, other, check}), defaults), rft_verdict::kept);
  // Repeats inside one turn count too.
  auto one_turn = good_episode("ep-1");
  one_turn.turns[0].tool_calls = {read_kernel, read_kernel, read_kernel};
  EXPECT_EQ(judge(one_turn, defaults), rft_verdict::loop);
  rft_filter_options tight;
  tight.max_repeats = 2;
  EXPECT_EQ(judge(calling({check, check, read_kernel}), tight), rft_verdict::loop);
}

TEST(rft_filter, the_same_completion_in_max_repeats_consecutive_turns_is_a_loop) {
  EXPECT_EQ(judge(sampling({{1, 2}, {7, 8, 9}, {7, 8, 9}, {7, 8, 9}}), defaults),
            rft_verdict::loop);
  EXPECT_EQ(judge(sampling({{7, 8, 9}, {7, 8, 9}, {1}, {7, 8, 9}}), defaults), rft_verdict::kept);
  // Prompt tokens are not the completion: only the sampled ones are compared.
  EXPECT_EQ(judge(sampling({{7, 8}, {7, 8, 9}, {7, 8}}), defaults), rft_verdict::kept);
}

TEST(rft_filter, no_tokens_to_train_on) {
  trajectory_turn empty;
  empty.tool_calls = {check};
  EXPECT_EQ(judge(episode("ep-1", {empty, empty}, 3), defaults), rft_verdict::no_tokens);
  EXPECT_EQ(judge(episode("ep-1", {}, 3), defaults), rft_verdict::no_tokens);
  // Prompt tokens only: nothing the policy sampled.
  EXPECT_EQ(judge(episode("ep-1", {turn(1, {1, 2, 3}, {}, {}, 1)}, 3), defaults),
            rft_verdict::no_tokens);
}

TEST(rft_filter, the_first_verdict_that_applies_wins) {
  // Everything wrong at once, then one defect fixed at a time, in the documented order.
  trajectory_turn empty;
  empty.tool_calls = {check, check, check, call("Edit", "{", "not a JSON object")};
  auto t = episode("ep-1", {empty}, 0, termination::timeout);
  EXPECT_EQ(judge(t, defaults), rft_verdict::no_tokens);
  t.turns.push_back(turn(2, {1}, {2}, {-0.5f}, 1));
  EXPECT_EQ(judge(t, defaults), rft_verdict::low_reward);
  t.reward = 2;
  EXPECT_EQ(judge(t, defaults), rft_verdict::truncated);
  t.reason = termination::agent_done;
  EXPECT_EQ(judge(t, defaults), rft_verdict::invalid_tool_call);
  t.turns[0].tool_calls.pop_back();
  EXPECT_EQ(judge(t, defaults), rft_verdict::loop);
  t.turns[0].tool_calls.pop_back();
  EXPECT_EQ(judge(t, defaults), rft_verdict::kept);
}

TEST(rft_filter, max_repeats_below_two_is_refused) {
  rft_filter_options bad;
  bad.max_repeats = 1;
  EXPECT_THROW(judge(good_episode("ep-1"), bad), learner_error);
}

TEST(rft_filter, verdict_names_are_distinct) {
  std::set<std::string_view> names;
  for (const auto v : {rft_verdict::kept, rft_verdict::low_reward, rft_verdict::invalid_tool_call,
                       rft_verdict::loop, rft_verdict::truncated, rft_verdict::no_tokens})
    names.insert(to_string(v));
  EXPECT_EQ(names.size(), 6u);
  EXPECT_EQ(to_string(rft_verdict::invalid_tool_call), "invalid_tool_call");
}

TEST(select_for_rft, keeps_indices_in_order_and_counts_drops_by_reason) {
  auto invalid = good_episode("ep-invalid");
  invalid.turns[0].tool_calls[0].parse_error = "unknown tool";
  const std::vector<trajectory> ts = {
      good_episode("ep-0", 0),
      good_episode("ep-1", 2),
      calling({check, check, check}),
      good_episode("ep-3", -1),
      episode("ep-4", good_episode("x").turns, 3, termination::token_budget),
      invalid,
      good_episode("ep-6", 1),
      episode("ep-7", {}, 3),
  };
  const auto selection = select_for_rft(ts, defaults);
  EXPECT_EQ(selection.kept, (std::vector<std::size_t>{1, 6}));
  EXPECT_EQ(selection.dropped, (std::map<std::string, int64_t>{{"low_reward", 2},
                                                               {"loop", 1},
                                                               {"truncated", 1},
                                                               {"invalid_tool_call", 1},
                                                               {"no_tokens", 1}}));
  EXPECT_TRUE(select_for_rft({}, defaults).kept.empty());
}

}  // namespace
}  // namespace cuda_agent::learner
