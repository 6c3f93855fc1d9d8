#include "actors/policy/openai_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <thread>

#include <spdlog/spdlog.h>

#include "actors/policy/http_client.hpp"

namespace cuda_agent::policy {
namespace {

using nlohmann::json;

std::string cut(const std::string& text, size_t limit = 400) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

json to_openai(const chat_message& message) {
  json out = {{"role", message.role}};
  if (message.role == "assistant" && !message.tool_calls.empty()) {
    out["content"] = message.content.empty() ? json(nullptr) : json(message.content);
    json calls = json::array();
    for (const auto& call : message.tool_calls)
      calls.push_back({{"id", call.call_id},
                       {"type", "function"},
                       {"function", {{"name", call.tool}, {"arguments", call.arguments_json}}}});
    out["tool_calls"] = std::move(calls);
  } else {
    out["content"] = message.content;
  }
  if (message.role == "tool") out["tool_call_id"] = message.tool_call_id;
  return out;
}

// vLLM writes a sampled token as "token_id:123" when asked with return_tokens_as_token_ids.
bool token_id_of(const json& token, int32_t& id) {
  if (!token.is_string()) return false;
  const auto& text = token.get_ref<const std::string&>();
  constexpr std::string_view prefix = "token_id:";
  if (text.compare(0, prefix.size(), prefix) != 0) return false;
  const char* begin = text.c_str() + prefix.size();
  char* end = nullptr;
  const long value = std::strtol(begin, &end, 10);
  if (end == begin || *end != '\0' || value < 0 || value > INT32_MAX) return false;
  id = static_cast<int32_t>(value);
  return true;
}

bool read_token_ids(const json& holder, std::vector<int32_t>& out) {
  const auto it = holder.find("token_ids");
  if (it == holder.end() || !it->is_array()) return false;
  std::vector<int32_t> ids;
  for (const auto& id : *it) {
    if (!id.is_number_integer()) throw bad_reply{"token_ids holds a non-integer"};
    ids.push_back(id.get<int32_t>());
  }
  out = std::move(ids);
  return true;
}

std::string server_error_text(const std::string& body) {
  const auto doc = json::parse(body, nullptr, false);
  if (!doc.is_discarded() && doc.is_object()) {
    const auto it = doc.find("error");
    if (it != doc.end()) {
      if (it->is_object() && it->contains("message") && (*it)["message"].is_string())
        return (*it)["message"].get<std::string>();
      if (it->is_string()) return it->get<std::string>();
    }
    if (doc.contains("message") && doc["message"].is_string()) return doc["message"].get<std::string>();
  }
  return cut(body);
}

// vLLM: "This model's maximum context length is N tokens. However, you requested M tokens";
// SGLang: "... is longer than the model's context length ..."; OpenAI: code
// "context_length_exceeded".
bool is_context_overflow(const std::string& body) {
  for (const char* phrase : {"maximum context length", "context length", "context_length_exceeded"})
    if (body.find(phrase) != std::string::npos) return true;
  return false;
}

}  // namespace

json chat_completion_body(const policy_settings& settings, const tool_schemas& schemas,
                          const policy_request& request, const std::vector<chat_message>& messages) {
  json body = {{"model", settings.model}};
  json history = json::array();
  for (const auto& message : messages) history.push_back(to_openai(message));
  body["messages"] = std::move(history);

  json tools = json::array();
  for (const auto& name : offered_tools(schemas, request.tools)) {
    const auto schema = schemas.find(name);
    if (schema == schemas.end())
      throw policy_error{"the request offers the tool '" + name + "', which has no schema in " +
                         settings.tools_dir.string()};
    tools.push_back({{"type", "function"}, {"function", schema->second}});
  }
  if (!tools.empty()) {
    body["tools"] = std::move(tools);
    body["tool_choice"] = "auto";
  }
  body["max_tokens"] = request.max_tokens > 0 ? request.max_tokens : settings.max_tokens;
  body["temperature"] = std::isnan(request.temperature) ? settings.temperature : request.temperature;
  body["top_p"] = std::isnan(request.top_p) ? settings.top_p : request.top_p;
  if (settings.token_ids) {
    body["logprobs"] = true;
    body["top_logprobs"] = 0;
    body["return_tokens_as_token_ids"] = true;  // vLLM
    body["return_token_ids"] = true;            // newer vLLM: choice.token_ids
  }
  return body;
}

namespace {
policy_response parse_completion(const std::string& body, const tool_schemas& schemas,
                                 const policy_request& request);
}  // namespace

policy_response parse_chat_completion(const std::string& body, const tool_schemas& schemas,
                                      const policy_request& request) {
  try {
    return parse_completion(body, schemas, request);
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type (null usage, ...)
    throw bad_reply{std::string{"the reply is not a chat completion: "} + e.what()};
  }
}

namespace {
policy_response parse_completion(const std::string& body, const tool_schemas& schemas,
                                 const policy_request& request) {
  const auto doc = json::parse(body, nullptr, false);
  if (doc.is_discarded()) throw bad_reply{"the reply is not JSON: " + cut(body, 200)};
  if (!doc.is_object() || !doc.contains("choices") || !doc["choices"].is_array() ||
      doc["choices"].empty() || !doc["choices"][0].is_object())
    throw bad_reply{"the reply has no choices: " + cut(body, 200)};
  const auto& choice = doc["choices"][0];
  if (!choice.contains("message") || !choice["message"].is_object())
    throw bad_reply{"the reply's choice has no message"};
  const auto& message = choice["message"];

  policy_response out;
  out.episode_id = request.episode_id;
  out.turn = request.turn;
  if (message.contains("content") && message["content"].is_string())
    out.content = message["content"].get<std::string>();
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
    out.finish_reason = choice["finish_reason"].get<std::string>();

  if (message.contains("tool_calls") && message["tool_calls"].is_array()) {
    int index = 0;
    for (const auto& raw : message["tool_calls"]) {
      tool_call call;
      call.call_id = raw.is_object() && raw.contains("id") && raw["id"].is_string()
                         ? raw["id"].get<std::string>()
                         : "call_" + std::to_string(request.turn) + "_" + std::to_string(index);
      ++index;
      const json function = raw.is_object() ? raw.value("function", json(nullptr)) : json(nullptr);
      if (!function.is_object()) {
        call.arguments_json = raw.dump();
        call.parse_error = "the tool call has no function (name and arguments)";
        out.tool_calls.push_back(std::move(call));
        continue;
      }
      if (function.contains("name") && function["name"].is_string())
        call.tool = function["name"].get<std::string>();
      const json arguments = function.value("arguments", json(nullptr));
      if (arguments.is_string())
        call.arguments_json = arguments.get<std::string>();
      else if (!arguments.is_null())  // some servers send the object itself
        call.arguments_json = arguments.dump();
      call.parse_error = arguments.is_null()
                             ? "the tool call has no arguments"
                             : check_tool_call(schemas, request.tools, call.tool, call.arguments_json);
      out.tool_calls.push_back(std::move(call));
    }
  }

  if (const auto usage = doc.find("usage"); usage != doc.end() && usage->is_object()) {
    out.prompt_tokens = usage->value("prompt_tokens", 0);
    out.completion_tokens = usage->value("completion_tokens", 0);
  }

  // Sampled tokens: the ids inside vLLM's logprobs entries, or an explicit token_ids array.
  std::vector<int32_t> ids_from_logprobs;
  bool every_token_has_id = true;
  if (const auto lp = choice.find("logprobs"); lp != choice.end() && lp->is_object()) {
    if (const auto content = lp->find("content"); content != lp->end() && content->is_array()) {
      for (const auto& entry : *content) {
        if (!entry.is_object()) throw bad_reply{"logprobs.content holds a non-object"};
        const auto logprob = entry.value("logprob", json(nullptr));
        // JSON has no infinity: a null logprob is the server's -inf.
        out.logprobs.push_back(logprob.is_number() ? logprob.get<float>()
                                                   : -std::numeric_limits<float>::infinity());
        int32_t id = 0;
        if (token_id_of(entry.value("token", json(nullptr)), id))
          ids_from_logprobs.push_back(id);
        else
          every_token_has_id = false;
      }
    }
  }
  std::vector<int32_t> explicit_ids;
  if (read_token_ids(choice, explicit_ids) || read_token_ids(doc, explicit_ids)) {
    if (!ids_from_logprobs.empty() && every_token_has_id && ids_from_logprobs != explicit_ids)
      spdlog::warn("policy: episode {} turn {}: token_ids and the logprobs' tokens differ; "
                   "using token_ids", request.episode_id, request.turn);
    out.token_ids = std::move(explicit_ids);
  } else if (every_token_has_id) {
    out.token_ids = std::move(ids_from_logprobs);
  }
  if (!out.token_ids.empty() && !out.logprobs.empty() && out.token_ids.size() != out.logprobs.size())
    spdlog::warn("policy: episode {} turn {}: {} token ids but {} logprobs", request.episode_id,
                 request.turn, out.token_ids.size(), out.logprobs.size());
  return out;
}
}  // namespace

openai_backend::openai_backend(policy_settings settings)
    : settings_{std::move(settings)}, schemas_{load_tool_schemas(settings_.tools_dir)} {
  if (settings_.model.empty())
    throw config_error{"policy.model is empty: set it to the model name the server serves "
                       "(vLLM: --served-model-name, or the model path it was started with)"};
  if (settings_.base_url.rfind("http://", 0) != 0 && settings_.base_url.rfind("https://", 0) != 0)
    throw config_error{"policy.base_url '" + settings_.base_url +
                       "' must start with http:// or https:// (e.g. http://127.0.0.1:8000/v1)"};
  url_ = settings_.base_url;
  while (!url_.empty() && url_.back() == '/') url_.pop_back();
  url_ += "/chat/completions";
  if (!settings_.api_key_env.empty())
    if (const char* key = std::getenv(settings_.api_key_env.c_str())) api_key_ = key;
  for (const auto& [name, schema] : schemas_)
    schema_tokens_ += static_cast<int64_t>(schema.dump().size() / 4);
  spdlog::info("policy: openai backend, {} model {}, {} tools, API key {}", url_, settings_.model,
               schemas_.size(), api_key_.empty() ? "none" : "from $" + settings_.api_key_env);
}

usage_anchor openai_backend::anchor_for(const std::string& episode) {
  std::lock_guard<std::mutex> lock{anchors_mutex_};
  const auto it = anchors_.find(episode);
  return it == anchors_.end() ? usage_anchor{} : it->second;
}

void openai_backend::remember(const std::string& episode, const usage_anchor& anchor) {
  std::lock_guard<std::mutex> lock{anchors_mutex_};
  // Episodes do not say when they end; a bound keeps a long run from growing this without limit
  // (an evicted episode falls back to the chars/4 estimate).
  constexpr size_t max_episodes = 16384;
  if (anchors_.size() >= max_episodes && anchors_.count(episode) == 0) anchors_.erase(anchors_.begin());
  anchors_[episode] = anchor;
}

policy_response openai_backend::complete(const policy_request& request) {
  context_budget budget;
  budget.context_tokens = settings_.context_tokens;
  budget.reply_tokens = request.max_tokens > 0 ? request.max_tokens : settings_.max_tokens;
  budget.fixed_tokens = schema_tokens_;
  const auto fitted = fit_context(request.messages, anchor_for(request.episode_id), budget);
  if (fitted.newly_truncated > 0 || fitted.action != "none")
    spdlog::info("policy: episode {} turn {}: context {} (about {} tokens, {} tool outputs "
                 "truncated, {} of them now)", request.episode_id, request.turn, fitted.action,
                 fitted.estimated_tokens, fitted.truncated, fitted.newly_truncated);
  const std::string body =
      chat_completion_body(settings_, schemas_, request, fitted.messages).dump();

  http_client http;
  std::mt19937 jitter{std::random_device{}()};
  std::string problem;
  const int attempts = settings_.retries + 1;
  for (int attempt = 1; attempt <= attempts; ++attempt) {
    const auto reply =
        http.post_json(url_, body, api_key_, std::chrono::milliseconds{settings_.timeout_ms});
    double wait_s = -1;
    if (!reply.transport_error.empty()) {
      problem = reply.transport_error;
    } else if (reply.status == 200) {
      try {
        auto response = parse_chat_completion(reply.body, schemas_, request);
        response.context_action = fitted.action;
        // The reply's tokens cover every message sent plus the reply the episode appends next.
        usage_anchor next;
        if (response.prompt_tokens > 0)
          next = {request.messages.size() + 1,
                  int64_t{response.prompt_tokens} + response.completion_tokens, fitted.truncated};
        remember(request.episode_id, next);
        return response;
      } catch (const bad_reply& e) {
        problem = e.what();
      }
    } else if (reply.status == 429 || reply.status >= 500) {
      problem = "HTTP " + std::to_string(reply.status) + ": " + server_error_text(reply.body);
      wait_s = reply.retry_after_s;
    } else if (reply.status == 400 && is_context_overflow(reply.body)) {
      // The conversation no longer fits even after the context policy: the agent's budget is
      // spent. Not an infrastructure failure (retrying cannot help), so it is an answer.
      spdlog::warn("policy: episode {} turn {}: the server refused the prompt as too long: {}",
                   request.episode_id, request.turn, server_error_text(reply.body));
      policy_response response;
      response.episode_id = request.episode_id;
      response.turn = request.turn;
      response.finish_reason = "context_overflow";
      response.context_action =
          fitted.action.find("over_budget") != std::string::npos ? fitted.action
          : fitted.action == "none"                              ? "over_budget"
                                                                 : fitted.action + ",over_budget";
      return response;
    } else {
      throw policy_error{"policy server " + url_ + " answered HTTP " +
                         std::to_string(reply.status) + ": " + server_error_text(reply.body) +
                         " (not retried; check policy.model, policy.api_key_env and the request)"};
    }
    if (attempt == attempts) break;
    if (wait_s < 0) {
      // Exponential backoff with jitter, so that many episodes do not retry in lockstep.
      const double base = settings_.retry_backoff_ms / 1000.0 * std::pow(2.0, attempt - 1);
      wait_s = std::min(base, 30.0) * std::uniform_real_distribution<double>{0.75, 1.25}(jitter);
    }
    wait_s = std::min(wait_s, 60.0);
    spdlog::warn("policy: episode {} turn {}: attempt {}/{} failed ({}); retrying in {:.2f} s",
                 request.episode_id, request.turn, attempt, attempts, problem, wait_s);
    std::this_thread::sleep_for(std::chrono::duration<double>{wait_s});
  }
  throw policy_error{"policy server " + url_ + " failed " + std::to_string(attempts) +
                     " attempts, the last with: " + problem +
                     "; check that the server is up at policy.base_url, or raise policy.retries "
                     "or policy.timeout_s"};
}

}  // namespace cuda_agent::policy
