// A scripted OpenAI-compatible chat-completions server for tests.
//
// It stands in for a model server (vLLM, SGLang, a hosted API), which cannot run on the machines
// the tests run on (no GPU, no model weights, no network). It is a real HTTP/1.1 server on a
// real socket (127.0.0.1, a port the kernel picks), so the client under test goes through libcurl,
// TCP, timeouts and dropped connections exactly as against the real thing. Each connection
// carries one request and is closed after the reply.
//
//   openai_test_server server;
//   server.push(reply_with(completion().content("hi").tool_call("c1", "Bash", R"({"command":"ls"})")));
//   server.push(scripted_reply::drop_mid_body(reply_with(...)));   // then a dropped connection
//   settings.base_url = server.base_url();                          // "http://127.0.0.1:PORT/v1"
//   ... server.requests()[0].json()["messages"] ...
//
// Replies are served from the pushed script in arrival order; when it is empty, the fallback
// handler answers (by default a 500 saying that the script ran out). Reusable by any test that
// needs a policy server, including whole episodes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace cuda_agent::testing {

struct received_request {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;

  nlohmann::json json() const { return nlohmann::json::parse(body); }
};

struct scripted_reply {
  enum class kind {
    respond,             // a complete HTTP response
    close_before_reply,  // read the request, then close the connection without a byte
    close_mid_body,      // send the headers and half of the body, then close
  };
  kind what = kind::respond;
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::chrono::milliseconds delay{0};  // wait this long before replying (a slow server)

  static scripted_reply error(int status, std::string message);
  static scripted_reply drop_before_reply();
  static scripted_reply drop_mid_body(scripted_reply reply);
  scripted_reply& after(std::chrono::milliseconds wait) {
    delay = wait;
    return *this;
  }
};

// Builds a chat-completions reply body the way vLLM writes one.
class completion {
 public:
  completion& content(std::string text);
  completion& tool_call(std::string id, std::string name, std::string arguments_text);
  completion& raw_tool_call(nlohmann::json call);  // anything, malformed included
  completion& finish_reason(std::string reason);
  completion& usage(int prompt_tokens, int completion_tokens);
  // Sampled tokens as vLLM returns them with return_tokens_as_token_ids: "token_id:<id>".
  completion& tokens(std::vector<std::pair<int32_t, float>> ids_and_logprobs);
  // A choice-level "token_ids" array (newer vLLM, other servers).
  completion& choice_token_ids(std::vector<int32_t> ids);

  nlohmann::json json() const;
  std::string body() const { return json().dump(); }

 private:
  nlohmann::json message_ = {{"role", "assistant"}, {"content", nullptr}};
  std::string finish_reason_ = "stop";
  nlohmann::json usage_;
  nlohmann::json logprobs_;
  nlohmann::json choice_token_ids_;
};

scripted_reply reply_with(const completion& reply);

class openai_test_server {
 public:
  using handler = std::function<scripted_reply(const received_request&)>;

  openai_test_server();  // listening when constructed
  ~openai_test_server();  // closes every connection and joins every thread
  openai_test_server(const openai_test_server&) = delete;
  openai_test_server& operator=(const openai_test_server&) = delete;

  uint16_t port() const { return port_; }
  std::string base_url() const;  // http://127.0.0.1:<port>/v1

  void push(scripted_reply reply);
  void set_fallback(handler fallback);

  std::vector<received_request> requests() const;  // fully read ones, in arrival order
  size_t request_count() const;
  int peak_in_flight() const;  // most requests read but not yet answered at one time

 private:
  void accept_loop();
  void serve(int fd);
  bool wait_or_stop(std::chrono::milliseconds delay);

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;

  mutable std::mutex mutex_;
  std::condition_variable stopping_;
  bool stop_ = false;
  std::deque<scripted_reply> script_;
  handler fallback_;
  std::vector<received_request> requests_;
  std::vector<std::thread> connections_;
  std::vector<int> open_fds_;
  int in_flight_ = 0;
  int peak_in_flight_ = 0;
};

}  // namespace cuda_agent::testing
