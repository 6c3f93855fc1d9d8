// Keeps a conversation inside the model's context window.
//
// The estimate of a prompt's size starts from what the server reported for the previous turn of
// the same episode (prompt plus completion tokens cover every message up to and including the
// model's last reply) and adds chars/4 for each message after it. Without such a report (first
// turn, a server that reports no usage) every message is estimated at chars/4, plus the tool
// schemas.
//
// When the estimate plus the room kept for the reply exceeds the window, tool outputs are
// replaced by a short marker, oldest first, until it fits. Never touched: the system prompt,
// the task (the first user message), and the latest turn (the model's last message and the tool
// outputs answering it). Outputs truncated on an earlier turn are truncated again, so the
// prompt the server sees only ever grows at its end (and prefix caches stay warm).
//
// The outcome's action is recorded in policy_response.context_action:
//   "none"                                nothing needed doing
//   "truncated_tool_outputs"              some tool outputs were replaced by the marker
//   "over_budget"                         nothing (more) could be truncated and it still does
//   "truncated_tool_outputs,over_budget"  not fit; the request is sent anyway and the server
//                                         decides (it answers with an error or a short reply)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace cuda_agent::policy {

// What the server reported about the previous turn of an episode.
struct usage_anchor {
  size_t messages = 0;     // the reported tokens cover messages [0, messages) of the next request
  int64_t tokens = 0;      // prompt + completion tokens reported
  size_t truncated = 0;    // truncatable tool outputs the policy had passed over in that prompt
};

struct context_budget {
  int64_t context_tokens = 131072;  // the model's window
  int64_t reply_tokens = 0;         // kept free for the reply (the request's max_tokens)
  int64_t fixed_tokens = 0;         // tool schemas and framing, counted when there is no anchor
};

struct context_outcome {
  std::vector<chat_message> messages;  // what to send
  std::string action = "none";
  int64_t estimated_tokens = 0;  // of the prompt that is sent
  size_t truncated = 0;          // tool outputs passed over, oldest first (for the next anchor)
  size_t newly_truncated = 0;    // of which truncated on this turn
};

// chars/4, plus a few tokens of chat-template framing per message.
int64_t estimate_tokens(const chat_message& message);

// The text that replaces a truncated tool output.
std::string truncation_marker(size_t removed_chars);

context_outcome fit_context(const std::vector<chat_message>& messages, const usage_anchor& anchor,
                            const context_budget& budget);

}  // namespace cuda_agent::policy
