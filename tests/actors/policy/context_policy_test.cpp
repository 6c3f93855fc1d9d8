// The context policy on its own: what is truncated, in which order, and what never is.
#include <gtest/gtest.h>

#include "actors/policy/context_policy.hpp"

namespace cuda_agent::policy {
namespace {

chat_message message(std::string role, size_t chars, char fill = 'x') {
  chat_message m;
  m.role = std::move(role);
  m.content = std::string(chars, fill);
  return m;
}

// system, task, then `turns` rounds of (assistant call, tool output of `output_chars`).
std::vector<chat_message> conversation(int turns, size_t output_chars) {
  std::vector<chat_message> messages = {message("system", 400), message("user", 800)};
  for (int t = 0; t < turns; ++t) {
    auto call = message("assistant", 40);
    call.tool_calls.push_back({"c" + std::to_string(t), "Bash", R"({"command":"ls"})", ""});
    messages.push_back(call);
    auto output = message("tool", output_chars, static_cast<char>('a' + t));
    output.tool_call_id = "c" + std::to_string(t);
    messages.push_back(output);
  }
  return messages;
}

bool is_marker(const chat_message& m) {
  return m.content.rfind("[output truncated to fit the context window:", 0) == 0;
}

TEST(context_policy, leaves_a_conversation_that_fits_alone) {
  const auto messages = conversation(3, 1000);
  const auto out = fit_context(messages, {}, {100000, 1000, 0});
  EXPECT_EQ(out.action, "none");
  EXPECT_EQ(out.truncated, 0u);
  EXPECT_EQ(out.messages, messages);
  int64_t expected = 0;
  for (const auto& m : messages) expected += estimate_tokens(m);
  EXPECT_EQ(out.estimated_tokens, expected);
}

TEST(context_policy, truncates_old_tool_outputs_oldest_first_and_only_as_many_as_needed) {
  const auto messages = conversation(4, 8000);  // about 2000 tokens per output
  int64_t total = 0;
  for (const auto& m : messages) total += estimate_tokens(m);
  // Room for everything but about 3000 tokens: two outputs must go.
  const auto out = fit_context(messages, {}, {total - 3000 + 500, 500, 0});
  EXPECT_EQ(out.action, "truncated_tool_outputs");
  EXPECT_EQ(out.truncated, 2u);
  EXPECT_EQ(out.newly_truncated, 2u);
  EXPECT_TRUE(is_marker(out.messages[3]));
  EXPECT_TRUE(is_marker(out.messages[5]));
  EXPECT_EQ(out.messages[3].content, truncation_marker(8000));
  EXPECT_EQ(out.messages[7], messages[7]);  // the third output was not needed
  EXPECT_EQ(out.messages[3].tool_call_id, "c0");  // the call it answers stays paired
  EXPECT_LE(out.estimated_tokens, total - 3000);
}

TEST(context_policy, never_touches_the_system_prompt_the_task_or_the_latest_turn) {
  auto messages = conversation(3, 8000);
  messages[0] = message("system", 40000);
  messages[1] = message("user", 40000);
  const auto out = fit_context(messages, {}, {2000, 500, 0});
  EXPECT_EQ(out.action, "truncated_tool_outputs,over_budget");
  EXPECT_EQ(out.messages[0], messages[0]);
  EXPECT_EQ(out.messages[1], messages[1]);
  EXPECT_TRUE(is_marker(out.messages[3]));
  EXPECT_TRUE(is_marker(out.messages[5]));
  // The latest turn: the model's last call and the output answering it.
  EXPECT_EQ(out.messages[6], messages[6]);
  EXPECT_EQ(out.messages[7], messages[7]);
  for (size_t i : {2, 4, 6}) EXPECT_EQ(out.messages[i], messages[i]);  // assistant turns stay
}

TEST(context_policy, over_budget_when_there_is_nothing_to_truncate) {
  std::vector<chat_message> messages = {message("system", 100), message("user", 40000)};
  const auto out = fit_context(messages, {}, {2000, 500, 0});
  EXPECT_EQ(out.action, "over_budget");
  EXPECT_EQ(out.messages, messages);
}

TEST(context_policy, starts_from_the_servers_usage_of_the_previous_turn) {
  const auto messages = conversation(3, 400);  // 8 messages
  // The server counted 5000 tokens for the first 7 messages (prompt + the reply); only the last
  // tool output is estimated.
  const usage_anchor anchor{7, 5000, 0};
  const auto out = fit_context(messages, anchor, {100000, 1000, 999999});
  EXPECT_EQ(out.estimated_tokens, 5000 + estimate_tokens(messages[7]));
  // An anchor that covers more messages than the request has is not this conversation's.
  const auto fresh = fit_context(messages, {9, 5000, 0}, {100000, 1000, 7});
  int64_t expected = 7;
  for (const auto& m : messages) expected += estimate_tokens(m);
  EXPECT_EQ(fresh.estimated_tokens, expected);
  // The reported usage alone can push the conversation over: the oldest output goes.
  const auto tight = fit_context(messages, {7, 9000, 0}, {10000, 1000, 0});
  EXPECT_EQ(tight.action, "truncated_tool_outputs");
  EXPECT_TRUE(is_marker(tight.messages[3]));
}

TEST(context_policy, keeps_truncating_what_it_truncated_before) {
  const auto messages = conversation(4, 400);
  // Last turn the policy had truncated the first two outputs; this prompt fits without
  // truncating anything new, but those two stay truncated so the prompt's prefix is unchanged.
  const auto out = fit_context(messages, {7, 1000, 2}, {100000, 1000, 0});
  EXPECT_EQ(out.action, "truncated_tool_outputs");
  EXPECT_EQ(out.truncated, 2u);
  EXPECT_EQ(out.newly_truncated, 0u);
  EXPECT_TRUE(is_marker(out.messages[3]));
  EXPECT_TRUE(is_marker(out.messages[5]));
  EXPECT_FALSE(is_marker(out.messages[7]));
  EXPECT_EQ(out.estimated_tokens, 1000 + estimate_tokens(messages[7]) + estimate_tokens(messages[8]) +
                                      estimate_tokens(messages[9]));
}

}  // namespace
}  // namespace cuda_agent::policy
