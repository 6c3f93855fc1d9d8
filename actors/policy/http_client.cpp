#include "actors/policy/http_client.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string_view>

#include <curl/curl.h>

namespace cuda_agent::policy {
namespace {

// curl_global_init is not thread-safe and must run before any other curl call.
void init_curl_once() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
      throw std::runtime_error{"libcurl: curl_global_init failed"};
  });
}

size_t append_body(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

bool iequals_prefix(std::string_view line, std::string_view prefix) {
  if (line.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != prefix[i]) return false;
  return true;
}

size_t read_header(char* data, size_t size, size_t count, void* out) {
  const std::string_view line{data, size * count};
  constexpr std::string_view retry_after = "retry-after:";
  if (iequals_prefix(line, retry_after)) {
    // Only the delay-seconds form; an HTTP date falls back to our own backoff.
    const std::string value{line.substr(retry_after.size())};
    char* end = nullptr;
    const double seconds = std::strtod(value.c_str(), &end);
    if (end != value.c_str() && seconds >= 0) *static_cast<double*>(out) = seconds;
  }
  return size * count;
}

}  // namespace

struct http_client::impl {
  CURL* handle = nullptr;
};

http_client::http_client() : impl_{std::make_unique<impl>()} {
  init_curl_once();
  impl_->handle = curl_easy_init();
  if (impl_->handle == nullptr) throw std::runtime_error{"libcurl: curl_easy_init failed"};
}

http_client::~http_client() { curl_easy_cleanup(impl_->handle); }

http_response http_client::post_json(const std::string& url, const std::string& body,
                                     const std::string& bearer_token,
                                     std::chrono::milliseconds timeout) {
  CURL* curl = impl_->handle;
  curl_easy_reset(curl);
  http_response response;
  char error[CURL_ERROR_SIZE] = {};

  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  headers = curl_slist_append(headers, "Accept: application/json");
  const std::string authorization = "Authorization: Bearer " + bearer_token;
  if (!bearer_token.empty()) headers = curl_slist_append(headers, authorization.c_str());
  headers = curl_slist_append(headers, "Expect:");  // no 100-continue round trip for long prompts

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min<int64_t>(timeout.count(), 30000)));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // many threads; timeouts without SIGALRM
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &response.body);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, read_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response.retry_after_s);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);

  const CURLcode rc = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  if (rc != CURLE_OK) {
    response.transport_error =
        std::string{curl_easy_strerror(rc)} + (error[0] ? std::string{": "} + error : "");
    response.timed_out = rc == CURLE_OPERATION_TIMEDOUT;
    response.body.clear();
    return response;
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

std::string http_client::connect_error(const std::string& url, std::chrono::milliseconds timeout) {
  CURL* curl = impl_->handle;
  curl_easy_reset(curl);
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_CONNECT_ONLY, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(timeout.count()));
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(curl);
  curl_easy_reset(curl);  // the connection is not kept for a request
  if (rc == CURLE_OK) return {};
  return std::string{curl_easy_strerror(rc)} + (error[0] ? std::string{": "} + error : "");
}

}  // namespace cuda_agent::policy
