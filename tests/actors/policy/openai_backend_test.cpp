// The openai backend against a real HTTP server on 127.0.0.1 (tests/support/openai_test_server):
// what it sends, how it reads replies, and how it survives servers that misbehave.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "actors/policy/openai_backend.hpp"
#include "tests/actors/policy/test_support.hpp"

namespace cuda_agent::policy {
namespace {

using namespace std::chrono_literals;
using namespace testing;
using nlohmann::json;

std::string policy_error_of(openai_backend& backend, const policy_request& request) {
  try {
    backend.complete(request);
  } catch (const policy_error& e) {
    return e.what();
  }
  return "(no policy_error)";
}

// --- What is sent ------------------------------------------------------------------------------

TEST(openai_backend, sends_the_conversation_tools_and_sampling_parameters) {
  openai_test_server server;
  server.push(reply_with(completion().content("ok").usage(10, 2)));
  auto settings = settings_for(server);
  settings.temperature = 0.6;
  settings.max_tokens = 1234;
  settings.api_key_env = "CUDA_AGENT_TEST_POLICY_KEY";
  ::setenv("CUDA_AGENT_TEST_POLICY_KEY", "sk-test-123", 1);
  openai_backend backend{settings};
  ::unsetenv("CUDA_AGENT_TEST_POLICY_KEY");

  auto request = first_turn();
  request.top_p = 0.9;  // the request's own value wins over the setting
  request.messages.push_back(
      {"assistant", "", "", {{"call-7", "Bash", R"({"command":"nvidia-smi"})", ""}}});
  request.messages.push_back({"tool", "no GPU", "call-7", {}});
  backend.complete(request);

  ASSERT_EQ(server.request_count(), 1u);
  const auto sent = server.requests()[0];
  EXPECT_EQ(sent.method, "POST");
  EXPECT_EQ(sent.path, "/v1/chat/completions");
  EXPECT_EQ(sent.headers.at("authorization"), "Bearer sk-test-123");
  const auto body = sent.json();
  EXPECT_EQ(body["model"], "test-model");
  EXPECT_EQ(body["temperature"], 0.6);
  EXPECT_EQ(body["top_p"], 0.9);
  EXPECT_EQ(body["max_tokens"], 1234);
  EXPECT_EQ(body["logprobs"], true);
  EXPECT_EQ(body["top_logprobs"], 0);
  EXPECT_EQ(body["return_tokens_as_token_ids"], true);
  ASSERT_EQ(body["messages"].size(), 4u);
  EXPECT_EQ(body["messages"][0], (json{{"role", "system"}, {"content", "You write CUDA kernels."}}));
  const auto& call = body["messages"][2];
  EXPECT_TRUE(call["content"].is_null());
  EXPECT_EQ(call["tool_calls"][0]["id"], "call-7");
  EXPECT_EQ(call["tool_calls"][0]["function"]["name"], "Bash");
  EXPECT_EQ(call["tool_calls"][0]["function"]["arguments"], R"({"command":"nvidia-smi"})");
  EXPECT_EQ(body["messages"][3]["tool_call_id"], "call-7");
  // Exactly the offered tools, with the schemas shipped in skills/tools.
  ASSERT_EQ(body["tools"].size(), 4u);
  EXPECT_EQ(body["tools"][2]["function"]["name"], "Write");
  EXPECT_EQ(body["tools"][2]["function"]["parameters"]["required"],
            (json{"file_path", "content"}));
}

TEST(openai_backend, sends_no_authorization_without_a_key_and_no_token_fields_when_off) {
  openai_test_server server;
  server.push(reply_with(completion().content("ok")));
  auto settings = settings_for(server);
  settings.api_key_env = "CUDA_AGENT_TEST_UNSET_VARIABLE";
  settings.token_ids = false;
  openai_backend backend{settings};
  backend.complete(first_turn());
  const auto sent = server.requests().at(0);
  EXPECT_EQ(sent.headers.count("authorization"), 0u);
  EXPECT_FALSE(sent.json().contains("logprobs"));
  EXPECT_FALSE(sent.json().contains("return_tokens_as_token_ids"));
}

TEST(openai_backend, refuses_settings_it_cannot_work_with) {
  openai_test_server server;
  auto settings = settings_for(server);
  settings.model = "";
  EXPECT_THROW(openai_backend{settings}, config_error);
  settings = settings_for(server);
  settings.tools_dir = "/nonexistent/tools";
  EXPECT_THROW(openai_backend{settings}, config_error);
  settings = settings_for(server);
  settings.base_url = "127.0.0.1:8000";
  EXPECT_THROW(openai_backend{settings}, config_error);
}

// --- Tool calls ----------------------------------------------------------------------------------

TEST(openai_backend, reads_well_formed_tool_calls) {
  openai_test_server server;
  server.push(reply_with(completion()
                             .content("Let me look.")
                             .tool_call("call-a", "Read", R"({"file_path":"model.py"})")
                             .tool_call("call-b", "Bash", R"({"command":"ls","timeout":1000})")
                             .usage(100, 20)));
  openai_backend backend{settings_for(server)};
  const auto response = backend.complete(first_turn());
  EXPECT_EQ(response.episode_id, "ep-1");
  EXPECT_EQ(response.turn, 1);
  EXPECT_EQ(response.content, "Let me look.");
  EXPECT_EQ(response.finish_reason, "tool_calls");
  EXPECT_EQ(response.prompt_tokens, 100);
  EXPECT_EQ(response.completion_tokens, 20);
  EXPECT_EQ(response.context_action, "none");
  ASSERT_EQ(response.tool_calls.size(), 2u);
  EXPECT_EQ(response.tool_calls[0], (tool_call{"call-a", "Read", R"({"file_path":"model.py"})", ""}));
  EXPECT_EQ(response.tool_calls[1].tool, "Bash");
  EXPECT_EQ(response.tool_calls[1].parse_error, "");
}

TEST(openai_backend, turns_malformed_tool_calls_into_marked_calls_not_failures) {
  openai_test_server server;
  server.push(reply_with(
      completion()
          .tool_call("c1", "Write", R"({"file_path": "k.cu", "content": "unterminated)")
          .tool_call("c2", "Fly", R"({"to":"moon"})")
          .tool_call("c3", "Write", R"({"file_path":"k.cu"})")
          .tool_call("c4", "Bash", R"({"command": 42})")
          .tool_call("c5", "Bash", R"(["ls"])")
          .tool_call("c6", "Grep", R"({"pattern":"x"})")  // not offered in this request
          .tool_call("c7", "Read", R"({"file_path":"a","colour":"red"})")
          .raw_tool_call({{"type", "function"}, {"function", {{"name", "Read"}}}})
          .raw_tool_call({{"id", "c9"}, {"type", "function"}})
          .raw_tool_call(
              {{"id", "c10"}, {"function", {{"name", "Read"}, {"arguments", {{"file_path", "x"}}}}}})));
  openai_backend backend{settings_for(server)};
  const auto calls = backend.complete(first_turn()).tool_calls;
  ASSERT_EQ(calls.size(), 10u);
  EXPECT_NE(calls[0].parse_error.find("not valid JSON"), std::string::npos) << calls[0].parse_error;
  EXPECT_EQ(calls[0].arguments_json, R"({"file_path": "k.cu", "content": "unterminated)");
  EXPECT_EQ(calls[1].parse_error, "unknown tool 'Fly'; the tools are: Bash, Read, Write, Edit");
  EXPECT_EQ(calls[2].parse_error, "Write needs the argument 'content'");
  EXPECT_EQ(calls[3].parse_error, "Bash: argument 'command' must be string");
  EXPECT_EQ(calls[4].parse_error, "the arguments of Bash must be a JSON object");
  EXPECT_EQ(calls[5].parse_error, "unknown tool 'Grep'; the tools are: Bash, Read, Write, Edit");
  EXPECT_EQ(calls[6].parse_error, "Read has no argument 'colour'");
  EXPECT_EQ(calls[7].parse_error, "the tool call has no arguments");
  EXPECT_EQ(calls[7].call_id, "call_1_7");  // no id from the server: one is made up
  EXPECT_EQ(calls[8].parse_error, "the tool call has no function (name and arguments)");
  EXPECT_EQ(calls[8].call_id, "c9");
  // Arguments sent as an object rather than a string are accepted as they are.
  EXPECT_EQ(calls[9].parse_error, "");
  EXPECT_EQ(json::parse(calls[9].arguments_json), (json{{"file_path", "x"}}));
}

// --- Tokens and log-probabilities ------------------------------------------------------------

TEST(openai_backend, captures_vllm_token_ids_and_logprobs) {
  openai_test_server server;
  server.push(reply_with(completion()
                             .content("Hi")
                             .tokens({{13347, -0.25f}, {0, -1.5f}, {151645, 0.0f}})
                             .usage(9, 3)));
  openai_backend backend{settings_for(server)};
  const auto response = backend.complete(first_turn());
  EXPECT_EQ(response.token_ids, (std::vector<int32_t>{13347, 0, 151645}));
  EXPECT_EQ(response.logprobs, (std::vector<float>{-0.25f, -1.5f, 0.0f}));
}

TEST(openai_backend, takes_a_choice_level_token_ids_array) {
  openai_test_server server;
  auto reply = completion().content("Hi").choice_token_ids({5, 6, 7}).json();
  reply["choices"][0]["logprobs"] = {
      {"content", json::array({{{"token", "H"}, {"logprob", -0.5}},
                               {{"token", "i"}, {"logprob", -0.75}},
                               {{"token", "!"}, {"logprob", nullptr}}})}};
  scripted_reply scripted;
  scripted.body = reply.dump();
  server.push(scripted);
  openai_backend backend{settings_for(server)};
  const auto response = backend.complete(first_turn());
  EXPECT_EQ(response.token_ids, (std::vector<int32_t>{5, 6, 7}));
  ASSERT_EQ(response.logprobs.size(), 3u);
  EXPECT_EQ(response.logprobs[0], -0.5f);
  EXPECT_TRUE(std::isinf(response.logprobs[2]));
}

TEST(openai_backend, keeps_no_token_ids_when_the_server_gives_only_text_tokens) {
  openai_test_server server;
  auto reply = completion().content("Hi").json();
  reply["choices"][0]["logprobs"] = {
      {"content", json::array({{{"token", "Hi"}, {"logprob", -0.5}}})}};
  scripted_reply scripted;
  scripted.body = reply.dump();
  server.push(scripted);
  openai_backend backend{settings_for(server)};
  const auto response = backend.complete(first_turn());
  EXPECT_TRUE(response.token_ids.empty());  // text is never re-tokenised into guessed ids
  EXPECT_EQ(response.logprobs, (std::vector<float>{-0.5f}));
}

// --- Failures, retries, timeouts -------------------------------------------------------------

TEST(openai_backend, retries_429_and_5xx_then_succeeds) {
  openai_test_server server;
  auto busy = scripted_reply::error(429, "rate limited");
  busy.headers.push_back({"Retry-After", "0"});
  server.push(busy);
  server.push(scripted_reply::error(503, "warming up"));
  server.push(scripted_reply::error(500, "oops"));
  server.push(reply_with(completion().content("third time lucky")));
  auto settings = settings_for(server);
  settings.retries = 3;
  openai_backend backend{settings};
  EXPECT_EQ(backend.complete(first_turn()).content, "third time lucky");
  EXPECT_EQ(server.request_count(), 4u);
}

TEST(openai_backend, gives_up_after_the_configured_retries_naming_the_last_problem) {
  openai_test_server server;
  for (int i = 0; i < 5; ++i) server.push(scripted_reply::error(502, "upstream down"));
  auto settings = settings_for(server);
  settings.retries = 2;
  openai_backend backend{settings};
  const auto error = policy_error_of(backend, first_turn());
  EXPECT_NE(error.find("failed 3 attempts"), std::string::npos) << error;
  EXPECT_NE(error.find("HTTP 502: upstream down"), std::string::npos) << error;
  EXPECT_EQ(server.request_count(), 3u);
}

TEST(openai_backend, does_not_retry_a_client_error) {
  openai_test_server server;
  server.push(scripted_reply::error(404, "The model `nope` does not exist."));
  server.push(reply_with(completion().content("never asked for")));
  openai_backend backend{settings_for(server)};
  const auto error = policy_error_of(backend, first_turn());
  EXPECT_NE(error.find("HTTP 404: The model `nope` does not exist."), std::string::npos) << error;
  EXPECT_EQ(server.request_count(), 1u);
}

TEST(openai_backend, answers_a_prompt_the_server_finds_too_long_with_context_overflow) {
  openai_test_server server;
  server.push(scripted_reply::error(
      400, "This model's maximum context length is 4096 tokens. However, you requested 5000 "
           "tokens (4000 in the messages, 1000 in the completion). Please reduce the length of "
           "the messages or completion."));
  openai_backend backend{settings_for(server)};
  const auto response = backend.complete(first_turn());
  EXPECT_EQ(response.finish_reason, "context_overflow");
  EXPECT_EQ(response.context_action, "over_budget");
  EXPECT_TRUE(response.content.empty());
  EXPECT_TRUE(response.tool_calls.empty());
  EXPECT_EQ(server.request_count(), 1u);  // not retried
}

TEST(openai_backend, retries_a_request_that_timed_out) {
  openai_test_server server;
  server.push(reply_with(completion().content("too late")).after(3000ms));
  server.push(reply_with(completion().content("in time")));
  auto settings = settings_for(server);
  settings.timeout_ms = 300;
  settings.retries = 1;
  openai_backend backend{settings};
  const auto started = std::chrono::steady_clock::now();
  EXPECT_EQ(backend.complete(first_turn()).content, "in time");
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2500ms);  // did not wait for the slow reply
  EXPECT_EQ(server.request_count(), 2u);
}

TEST(openai_backend, fails_with_a_timeout_when_every_attempt_is_too_slow) {
  openai_test_server server;
  server.set_fallback([](const auto&) { return reply_with(completion()).after(2000ms); });
  auto settings = settings_for(server);
  settings.timeout_ms = 200;
  settings.retries = 1;
  openai_backend backend{settings};
  const auto error = policy_error_of(backend, first_turn());
  EXPECT_NE(error.find("Timeout"), std::string::npos) << error;
  EXPECT_EQ(server.request_count(), 2u);
}

TEST(openai_backend, survives_a_server_that_disconnects_mid_response) {
  openai_test_server server;
  server.push(scripted_reply::drop_mid_body(reply_with(completion().content("cut off"))));
  server.push(scripted_reply::drop_before_reply());
  server.push(reply_with(completion().content("whole")));
  auto settings = settings_for(server);
  settings.retries = 2;
  openai_backend backend{settings};
  EXPECT_EQ(backend.complete(first_turn()).content, "whole");
  EXPECT_EQ(server.request_count(), 3u);
}

TEST(openai_backend, retries_a_garbled_reply) {
  openai_test_server server;
  scripted_reply garbled;
  garbled.body = R"({"choices": [{"message": )";  // complete HTTP, broken JSON
  server.push(garbled);
  scripted_reply no_choices;
  no_choices.body = R"({"object":"chat.completion","choices":[]})";
  server.push(no_choices);
  server.push(reply_with(completion().content("fine")));
  auto settings = settings_for(server);
  settings.retries = 2;
  openai_backend backend{settings};
  EXPECT_EQ(backend.complete(first_turn()).content, "fine");
  EXPECT_EQ(server.request_count(), 3u);
}

TEST(openai_backend, reports_a_server_that_is_not_there) {
  std::string url;
  {
    openai_test_server gone;  // a port that was just free and is closed again
    url = gone.base_url();
  }
  openai_test_server server;
  auto settings = settings_for(server);
  settings.base_url = url;
  settings.retries = 1;
  openai_backend backend{settings};
  const auto error = policy_error_of(backend, first_turn());
  EXPECT_NE(error.find("failed 2 attempts"), std::string::npos) << error;
  EXPECT_NE(error.find("policy.base_url"), std::string::npos) << error;
}

// --- Context management ------------------------------------------------------------------------

TEST(openai_backend, truncates_old_tool_outputs_when_the_context_fills_and_says_so) {
  openai_test_server server;
  server.set_fallback([](const auto&) { return reply_with(completion().content("ok").usage(4000, 10)); });
  auto settings = settings_for(server);
  settings.context_tokens = 6000;
  settings.max_tokens = 1000;
  openai_backend backend{settings};

  auto request = first_turn();
  for (int t = 0; t < 3; ++t) {
    request.messages.push_back({"assistant", "", "", {{"c" + std::to_string(t), "Bash", R"({"command":"cat log"})", ""}}});
    request.messages.push_back({"tool", std::string(8000, static_cast<char>('a' + t)), "c" + std::to_string(t), {}});
  }
  // 24000 characters of tool output (about 6000 tokens) in a 6000-token window with 1000 kept
  // for the reply: the two older outputs go, the latest turn stays.
  const auto response = backend.complete(request);
  EXPECT_EQ(response.context_action, "truncated_tool_outputs");
  const auto sent = server.requests().at(0).json()["messages"];
  ASSERT_EQ(sent.size(), 8u);
  EXPECT_EQ(sent[3]["content"], truncation_marker(8000));
  EXPECT_EQ(sent[5]["content"], truncation_marker(8000));
  EXPECT_EQ(sent[7]["content"], std::string(8000, 'c'));
  EXPECT_EQ(sent[1]["content"], "Make relu faster than torch.compile.");

  // The next turn starts from the server's count (4010 tokens for the 9 messages up to the
  // reply); with a short new output it fits after the same two truncations, so the prompt's
  // beginning is what the server saw before.
  request.messages.push_back({"assistant", "ok", "", {{"c3", "Bash", R"({"command":"ls"})", ""}}});
  request.messages.push_back({"tool", "k.cu", "c3", {}});
  request.turn = 2;
  const auto second = backend.complete(request);
  EXPECT_EQ(second.context_action, "truncated_tool_outputs");
  const auto sent2 = server.requests().at(1).json()["messages"];
  EXPECT_EQ(sent2[3]["content"], truncation_marker(8000));
  EXPECT_EQ(sent2[5]["content"], truncation_marker(8000));
  EXPECT_EQ(sent2[7]["content"], std::string(8000, 'c'));
}

}  // namespace
}  // namespace cuda_agent::policy
