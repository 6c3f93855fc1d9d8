#include "actors/policy/episode_token_ledger.hpp"

#include <algorithm>
#include <utility>

#include "actors/policy/policy_backend.hpp"

namespace cuda_agent::policy {

episode_token_ledger::episode_token_ledger(model::tokenizer tokenizer, model::chat_format format,
                                           model::chat_tools tools, std::size_t capacity)
    : tokenizer_(std::move(tokenizer)),
      format_(std::move(format)),
      tools_(std::move(tools)),
      end_of_turn_(format_.stop_strings().front()),
      capacity_(capacity) {}

std::unique_ptr<episode_token_ledger> episode_token_ledger::load(
    const std::filesystem::path& model_dir, const std::string& chat_format,
    const std::filesystem::path& tools_dir) {
  const auto file = model_dir / "tokenizer.json";
  auto tokenizer = model::tokenizer::load(file);
  auto format = chat_format == "auto" ? model::chat_format::detect(model_dir)
                                      : model::chat_format::named(chat_format);
  const auto end_of_turn = format.stop_strings().front();
  if (!tokenizer.token_to_id(end_of_turn))
    throw config_error{"the " + format.name() + " chat format ends turns with '" + end_of_turn +
                       "', which " + file.string() +
                       " has no token for; set policy.chat_format to the checkpoint's family"};
  return std::make_unique<episode_token_ledger>(std::move(tokenizer), std::move(format),
                                                model::chat_tools::load(tools_dir));
}

episode_token_ledger::prompt episode_token_ledger::prompt_for(const policy_request& request) const {
  std::optional<episode_tokens> known;
  {
    std::lock_guard<std::mutex> lock{mutex_};
    const auto it = episodes_.find(request.episode_id);
    if (it != episodes_.end()) known = it->second;
  }
  const auto rendered = model::render(format_, request.messages, tools_, request.tools, true);
  const bool continues = known && request.messages.size() > known->assistant_index &&
                         request.messages[known->assistant_index].role == "assistant";
  prompt out;
  if (!continues) {
    out.rerendered = known.has_value();
    out.tokens = tokenizer_.encode(rendered.text, /*add_special_tokens=*/false);
    return out;
  }
  // The tokens so far end with the answered turn, up to its end-of-turn token: what the rendering
  // holds after the turn's generated text (the newline after that token, the tool results, the
  // next generation prompt) is encoded on its own and appended.
  std::size_t after = 0;
  for (const auto& span : rendered.spans)
    if (span.message == static_cast<int32_t>(known->assistant_index) && span.generated)
      after = std::max(after, span.end);
  std::string text = rendered.text.substr(after);
  if (!known->ended_with_stop) text = end_of_turn_ + text;  // a turn cut at max_tokens is closed
  out.tokens = std::move(known->tokens);
  out.new_from = out.tokens.size();
  const auto suffix = tokenizer_.encode(text, /*add_special_tokens=*/false);
  out.tokens.insert(out.tokens.end(), suffix.begin(), suffix.end());
  return out;
}

std::optional<std::string> episode_token_ledger::remember(const policy_request& request,
                                                          std::vector<int64_t> prompt,
                                                          const std::vector<int64_t>& completion) {
  episode_tokens next;
  next.tokens = std::move(prompt);
  next.tokens.insert(next.tokens.end(), completion.begin(), completion.end());
  next.assistant_index = request.messages.size();
  next.ended_with_stop =
      !completion.empty() && tokenizer_.id_to_token(completion.back()) == end_of_turn_;

  std::optional<std::string> forgotten;
  std::lock_guard<std::mutex> lock{mutex_};
  if (episodes_.find(request.episode_id) == episodes_.end()) {
    order_.push_back(request.episode_id);
    if (order_.size() > capacity_) {
      forgotten = std::move(order_.front());
      episodes_.erase(*forgotten);
      order_.pop_front();
    }
  }
  episodes_[request.episode_id] = std::move(next);
  return forgotten;
}

}  // namespace cuda_agent::policy
