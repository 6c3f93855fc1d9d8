#include "tests/support/openai_test_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace cuda_agent::testing {
namespace {

using nlohmann::json;

bool send_all(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// Reads one request (headers, then a Content-Length body); false on EOF, error or timeout.
bool read_request(int fd, received_request& out) {
  std::string data;
  char buffer[16384];
  size_t header_end = std::string::npos;
  while ((header_end = data.find("\r\n\r\n")) == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    data.append(buffer, static_cast<size_t>(n));
  }
  const std::string head = data.substr(0, header_end);
  size_t line_end = head.find("\r\n");
  const std::string request_line = head.substr(0, line_end);
  const auto space1 = request_line.find(' ');
  const auto space2 = request_line.find(' ', space1 + 1);
  out.method = request_line.substr(0, space1);
  out.path = request_line.substr(space1 + 1, space2 - space1 - 1);
  while (line_end != std::string::npos && line_end < head.size()) {
    const size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos
                                                                              : line_end - start);
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    out.headers[name] = value;
  }
  const auto length_it = out.headers.find("content-length");
  const size_t length = length_it == out.headers.end() ? 0 : std::stoul(length_it->second);
  out.body = data.substr(header_end + 4);
  while (out.body.size() < length) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return false;
    out.body.append(buffer, static_cast<size_t>(n));
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    default: return "Status";
  }
}

}  // namespace

scripted_reply scripted_reply::error(int status, std::string message) {
  scripted_reply reply;
  reply.status = status;
  reply.body = json{{"object", "error"}, {"message", message}, {"code", status},
                    {"error", {{"message", message}, {"code", status}}}}
                   .dump();
  return reply;
}

scripted_reply scripted_reply::drop_before_reply() {
  scripted_reply reply;
  reply.what = kind::close_before_reply;
  return reply;
}

scripted_reply scripted_reply::drop_mid_body(scripted_reply reply) {
  reply.what = kind::close_mid_body;
  return reply;
}

completion& completion::content(std::string text) {
  message_["content"] = std::move(text);
  return *this;
}

completion& completion::tool_call(std::string id, std::string name, std::string arguments_text) {
  return raw_tool_call({{"id", std::move(id)},
                        {"type", "function"},
                        {"function", {{"name", std::move(name)}, {"arguments", std::move(arguments_text)}}}});
}

completion& completion::raw_tool_call(nlohmann::json call) {
  message_["tool_calls"].push_back(std::move(call));
  finish_reason_ = "tool_calls";
  return *this;
}

completion& completion::finish_reason(std::string reason) {
  finish_reason_ = std::move(reason);
  return *this;
}

completion& completion::usage(int prompt_tokens, int completion_tokens) {
  usage_ = {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  return *this;
}

completion& completion::tokens(std::vector<std::pair<int32_t, float>> ids_and_logprobs) {
  nlohmann::json content = nlohmann::json::array();
  for (const auto& [id, logprob] : ids_and_logprobs)
    content.push_back({{"token", "token_id:" + std::to_string(id)},
                       {"logprob", logprob},
                       {"bytes", nlohmann::json::array()},
                       {"top_logprobs", nlohmann::json::array()}});
  logprobs_ = {{"content", std::move(content)}};
  return *this;
}

completion& completion::choice_token_ids(std::vector<int32_t> ids) {
  choice_token_ids_ = std::move(ids);
  return *this;
}

nlohmann::json completion::json() const {
  nlohmann::json choice = {{"index", 0},
                           {"message", message_},
                           {"finish_reason", finish_reason_},
                           {"logprobs", logprobs_}};
  if (!choice_token_ids_.is_null()) choice["token_ids"] = choice_token_ids_;
  nlohmann::json out = {{"id", "chatcmpl-test"},
                        {"object", "chat.completion"},
                        {"created", 1764547200},
                        {"model", "test-model"},
                        {"choices", nlohmann::json::array({choice})}};
  if (!usage_.is_null()) out["usage"] = usage_;
  return out;
}

scripted_reply reply_with(const completion& reply) {
  scripted_reply out;
  out.body = reply.body();
  return out;
}

openai_test_server::openai_test_server() {
  fallback_ = [](const received_request&) {
    return scripted_reply::error(500, "openai_test_server: the test's script ran out of replies");
  };
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) throw std::runtime_error{"openai_test_server: socket failed"};
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t size = sizeof address;
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(listen_fd_, 128) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    ::close(listen_fd_);
    throw std::runtime_error{"openai_test_server: cannot listen on 127.0.0.1"};
  }
  port_ = ntohs(address.sin_port);
  acceptor_ = std::thread{[this] { accept_loop(); }};
}

openai_test_server::~openai_test_server() {
  {
    std::lock_guard<std::mutex> lock{mutex_};
    stop_ = true;
    for (int fd : open_fds_) ::shutdown(fd, SHUT_RDWR);  // wakes connections blocked in recv
  }
  stopping_.notify_all();
  acceptor_.join();
  for (auto& connection : connections_) connection.join();
  ::close(listen_fd_);
}

std::string openai_test_server::base_url() const {
  return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
}

void openai_test_server::push(scripted_reply reply) {
  std::lock_guard<std::mutex> lock{mutex_};
  script_.push_back(std::move(reply));
}

void openai_test_server::set_fallback(handler fallback) {
  std::lock_guard<std::mutex> lock{mutex_};
  fallback_ = std::move(fallback);
}

std::vector<received_request> openai_test_server::requests() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return requests_;
}

size_t openai_test_server::request_count() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return requests_.size();
}

int openai_test_server::peak_in_flight() const {
  std::lock_guard<std::mutex> lock{mutex_};
  return peak_in_flight_;
}

void openai_test_server::accept_loop() {
  for (;;) {
    pollfd waiting{listen_fd_, POLLIN, 0};
    const int ready = ::poll(&waiting, 1, 50);
    std::lock_guard<std::mutex> lock{mutex_};
    if (stop_) return;
    if (ready <= 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval timeout{30, 0};  // a client that never sends cannot hold a thread forever
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    open_fds_.push_back(fd);
    connections_.emplace_back([this, fd] { serve(fd); });
  }
}

bool openai_test_server::wait_or_stop(std::chrono::milliseconds delay) {
  std::unique_lock<std::mutex> lock{mutex_};
  return !stopping_.wait_for(lock, delay, [this] { return stop_; });
}

void openai_test_server::serve(int fd) {
  received_request request;
  if (read_request(fd, request)) {
    handler fallback;
    scripted_reply reply;
    bool scripted = false;
    {
      std::lock_guard<std::mutex> lock{mutex_};
      requests_.push_back(request);
      peak_in_flight_ = std::max(peak_in_flight_, ++in_flight_);
      if (!script_.empty()) {
        reply = std::move(script_.front());
        script_.pop_front();
        scripted = true;
      } else {
        fallback = fallback_;
      }
    }
    if (!scripted) reply = fallback(request);
    const bool go_on = wait_or_stop(reply.delay);
    {
      // Counted out before the reply is sent: the client may start its next request as soon
      // as it has the reply, and must not find this one still counted.
      std::lock_guard<std::mutex> lock{mutex_};
      --in_flight_;
    }
    if (go_on && reply.what != scripted_reply::kind::close_before_reply) {
      std::string head = "HTTP/1.1 " + std::to_string(reply.status) + " " +
                         reason_phrase(reply.status) +
                         "\r\nContent-Type: application/json\r\nContent-Length: " +
                         std::to_string(reply.body.size()) + "\r\nConnection: close\r\n";
      for (const auto& [name, value] : reply.headers) head += name + ": " + value + "\r\n";
      head += "\r\n";
      if (reply.what == scripted_reply::kind::close_mid_body)
        send_all(fd, head + reply.body.substr(0, reply.body.size() / 2));
      else
        send_all(fd, head + reply.body);
    }
  }
  std::lock_guard<std::mutex> lock{mutex_};
  open_fds_.erase(std::remove(open_fds_.begin(), open_fds_.end(), fd), open_fds_.end());
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

}  // namespace cuda_agent::testing
