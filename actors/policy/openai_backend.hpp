// The policy as an OpenAI-compatible chat-completions server: vLLM, SGLang or a hosted API.
//
// Each turn is one POST to <base_url>/chat/completions with the conversation, the tools' JSON
// schemas (skills/tools/<Tool>.json) and the sampling parameters. What the reply holds becomes a
// policy_response:
//   - tool calls, each checked against its schema; a malformed one (arguments that are not a
//     JSON object, an unknown tool, a missing or mistyped argument) is kept with parse_error set,
//     for the episode to answer with an error tool_result instead of running it;
//   - the sampled token ids and their log-probabilities where the server returns them: vLLM
//     with logprobs=true, top_logprobs=0 and return_tokens_as_token_ids=true writes each token
//     as "token_id:123"; a choice-level or top-level `token_ids` array is taken as well. These
//     are the exact tokens for training: text is never re-tokenised;
//   - usage (prompt and completion tokens), which also anchors the next turn's context estimate
//     (context_policy.hpp).
// A 429, a 5xx, a timeout, a refused or dropped connection and a garbled body are retried with
// exponential backoff (a Retry-After header wins); any other HTTP error fails at once, except a
// 400 that refuses the prompt as longer than the model's context: that is the agent's budget
// running out, answered with finish_reason "context_overflow", no content and context_action
// ending in "over_budget" (the episode ends with termination::token_budget).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "actors/policy/context_policy.hpp"
#include "actors/policy/policy_backend.hpp"
#include "actors/policy/tool_schemas.hpp"

namespace cuda_agent::policy {

// The JSON body of a chat-completions request for the (already context-fitted) messages.
nlohmann::json chat_completion_body(const policy_settings& settings, const tool_schemas& schemas,
                                    const policy_request& request,
                                    const std::vector<chat_message>& messages);

// A reply body that is not a chat completion (no choices, wrong types): the server's fault,
// retried like a 5xx.
struct bad_reply : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The policy_response for a chat-completions reply body; throws bad_reply.
policy_response parse_chat_completion(const std::string& body, const tool_schemas& schemas,
                                      const policy_request& request);

class openai_backend final : public policy_backend {
 public:
  // Throws config_error when policy.model is empty or the tool schemas cannot be read.
  explicit openai_backend(policy_settings settings);

  policy_response complete(const policy_request& request) override;
  std::string name() const override { return "openai"; }

 private:
  usage_anchor anchor_for(const std::string& episode);
  void remember(const std::string& episode, const usage_anchor& anchor);

  policy_settings settings_;
  tool_schemas schemas_;
  std::string api_key_;
  std::string url_;
  int64_t schema_tokens_ = 0;

  std::mutex anchors_mutex_;
  std::unordered_map<std::string, usage_anchor> anchors_;  // by episode id
};

}  // namespace cuda_agent::policy
