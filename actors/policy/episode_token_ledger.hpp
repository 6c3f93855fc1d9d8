// Each episode's exact token sequence so far, for a policy that answers in a checkpoint's tokens
// (the torch backend, and the demo backend with policy.model_dir set).
//
// An episode's sequence is its first prompt as the chat format renders and the tokenizer encodes
// it, then for each turn the answer's tokens as the backend produced them, then the chat format's
// text for what came back (the tool results and the next generation prompt) encoded on its own:
// never the whole conversation re-tokenised from text, so the trajectory is the sequence the
// model saw. A request that is not the continuation of what the ledger last recorded for its
// episode (its messages were changed, or the episode was forgotten) is rendered and encoded in
// full, and its prompt says so (rerendered).
//
//   auto prompt = ledger.prompt_for(request);
//   ... answer with `completion` tokens after prompt.tokens ...
//   if (auto gone = ledger.remember(request, std::move(prompt.tokens), completion)) release(*gone);
//
// Thread-safe: turns of different episodes may be prompted and remembered at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/model/chat_format.hpp"
#include "actors/model/tokenizer.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::policy {

class episode_token_ledger {
 public:
  // Episodes whose tokens are kept by default; an older one's next turn is rendered in full.
  static constexpr std::size_t default_capacity = 4096;

  episode_token_ledger(model::tokenizer tokenizer, model::chat_format format,
                       model::chat_tools tools, std::size_t capacity = default_capacity);

  // The ledger of a checkpoint: model_dir/tokenizer.json, the chat format named by `chat_format`
  // (policy.chat_format; "auto" detects it from the checkpoint) and the tool schemas in
  // tools_dir. Throws model::model_error for a tokenizer or format that cannot be used,
  // config_error for tools that cannot be read or a format whose end-of-turn string is not one
  // token of the tokenizer.
  static std::unique_ptr<episode_token_ledger> load(const std::filesystem::path& model_dir,
                                                    const std::string& chat_format,
                                                    const std::filesystem::path& tools_dir);

  struct prompt {
    std::vector<int64_t> tokens;  // the whole sequence the answer follows
    std::size_t new_from = 0;     // tokens[new_from..] are new to the episode
    bool rerendered = false;      // the episode's earlier tokens could not be continued
  };

  // The prompt for `request` (with its generation prompt). Throws model_error where the chat
  // format cannot render the conversation.
  prompt prompt_for(const policy_request& request) const;

  // Records that `request` was answered with `completion` after `prompt` (prompt_for's tokens).
  // Returns the episode forgotten to stay within the capacity, if one was.
  std::optional<std::string> remember(const policy_request& request, std::vector<int64_t> prompt,
                                      const std::vector<int64_t>& completion);

  const model::tokenizer& tokenizer() const { return tokenizer_; }
  const model::chat_format& format() const { return format_; }
  const model::chat_tools& tools() const { return tools_; }
  // The format's first stop string: ends every turn, and closes one cut at max_tokens.
  const std::string& end_of_turn() const { return end_of_turn_; }

 private:
  // What was last answered for an episode: the whole token sequence so far, and which message of
  // the next request must be the assistant turn it produced.
  struct episode_tokens {
    std::vector<int64_t> tokens;
    std::size_t assistant_index = 0;
    bool ended_with_stop = true;  // the answer ended with the end-of-turn token
  };

  model::tokenizer tokenizer_;
  model::chat_format format_;
  model::chat_tools tools_;
  std::string end_of_turn_;
  std::size_t capacity_;

  mutable std::mutex mutex_;
  std::unordered_map<std::string, episode_tokens> episodes_;
  std::deque<std::string> order_;  // oldest first, for the bound on what is remembered
};

}  // namespace cuda_agent::policy
