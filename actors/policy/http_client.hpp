// A blocking HTTP POST over libcurl, for the openai backend. One client per request thread:
// a client is not thread-safe, but any number may run at once.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

namespace cuda_agent::policy {

struct http_response {
  // 0 when no complete response arrived: refused or dropped connection, timeout, a body cut
  // short. `transport_error` then says what happened.
  long status = 0;
  std::string body;
  std::string transport_error;
  bool timed_out = false;
  // Seconds from a Retry-After header (429, 503); negative when absent.
  double retry_after_s = -1;
};

class http_client {
 public:
  http_client();
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  // POSTs `body` as application/json. `bearer_token` adds an Authorization header when not
  // empty. Never throws for network trouble: that is reported in the response.
  http_response post_json(const std::string& url, const std::string& body,
                          const std::string& bearer_token, std::chrono::milliseconds timeout);

  // Empty when a connection to url's host and port opens within `timeout` (nothing is sent),
  // else why not ("Couldn't connect to server: ..."). Never throws for network trouble.
  std::string connect_error(const std::string& url, std::chrono::milliseconds timeout);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cuda_agent::policy
