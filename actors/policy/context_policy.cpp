#include "actors/policy/context_policy.hpp"

namespace cuda_agent::policy {
namespace {

constexpr int64_t framing_tokens = 4;

// Indices of the tool outputs the policy may truncate, oldest first.
std::vector<size_t> truncatable(const std::vector<chat_message>& messages) {
  size_t latest_turn = messages.size();  // the model's last message starts the latest turn
  for (size_t i = messages.size(); i-- > 0;)
    if (messages[i].role == "assistant") {
      latest_turn = i;
      break;
    }
  std::vector<size_t> found;
  for (size_t i = 0; i < latest_turn; ++i)
    if (messages[i].role == "tool") found.push_back(i);
  // The system prompt and the task are never tool messages, so they are never in the list.
  return found;
}

}  // namespace

int64_t estimate_tokens(const chat_message& message) {
  size_t chars = message.role.size() + message.content.size() + message.tool_call_id.size();
  for (const auto& call : message.tool_calls)
    chars += call.call_id.size() + call.tool.size() + call.arguments_json.size();
  return static_cast<int64_t>(chars / 4) + framing_tokens;
}

std::string truncation_marker(size_t removed_chars) {
  return "[output truncated to fit the context window: " + std::to_string(removed_chars) +
         " characters removed]";
}

context_outcome fit_context(const std::vector<chat_message>& messages, const usage_anchor& anchor,
                            const context_budget& budget) {
  context_outcome out;
  out.messages = messages;
  const bool anchored = anchor.messages > 0 && anchor.messages <= messages.size();

  int64_t estimate = anchored ? anchor.tokens : budget.fixed_tokens;
  for (size_t i = anchored ? anchor.messages : 0; i < messages.size(); ++i)
    estimate += estimate_tokens(messages[i]);

  const auto candidates = truncatable(messages);
  const auto truncate = [&](size_t index) {
    auto& message = out.messages[index];
    const auto marker = truncation_marker(message.content.size());
    if (marker.size() >= message.content.size()) return int64_t{0};  // nothing to gain
    const int64_t before = estimate_tokens(message);
    message.content = marker;
    return before - estimate_tokens(message);
  };

  // What was truncated before stays truncated; the anchor's count already reflects it.
  size_t next = 0;
  if (anchored)
    for (; next < std::min(anchor.truncated, candidates.size()); ++next) truncate(candidates[next]);

  const int64_t limit = budget.context_tokens - budget.reply_tokens;
  for (; estimate > limit && next < candidates.size(); ++next) {
    estimate -= truncate(candidates[next]);
    ++out.newly_truncated;
  }
  out.truncated = next;
  out.estimated_tokens = estimate;

  std::vector<std::string> actions;
  if (next > 0) actions.push_back("truncated_tool_outputs");
  if (estimate > limit) actions.push_back("over_budget");
  if (!actions.empty()) {
    out.action = actions[0];
    for (size_t i = 1; i < actions.size(); ++i) out.action += "," + actions[i];
  }
  return out;
}

}  // namespace cuda_agent::policy
