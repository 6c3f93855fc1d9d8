// The HTTP client on its own, against a real HTTP server on a loopback socket
// (tests/support/openai_test_server): what it sends, and how each kind of trouble comes back
// in the response instead of as an exception.
#include "actors/policy/http_client.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include <gtest/gtest.h>

#include "tests/support/openai_test_server.hpp"

namespace cuda_agent::policy {
namespace {

using namespace std::chrono_literals;
using testing::openai_test_server;
using testing::scripted_reply;

scripted_reply ok_reply(std::string body) {
  scripted_reply reply;
  reply.status = 200;
  reply.body = std::move(body);
  reply.headers = {{"Content-Type", "application/json"}};
  return reply;
}

// A loopback port that nothing listens on: bound by the kernel's choice, then closed.
uint16_t closed_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address), 0);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST(HttpClient, PostsTheBodyAsJsonWithTheBearerToken) {
  openai_test_server server;
  server.push(ok_reply(R"({"answer":42})"));
  http_client client;
  const auto response =
      client.post_json(server.base_url() + "/chat/completions", R"({"question":"?"})", "sk-test", 10s);
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"answer":42})");
  EXPECT_TRUE(response.transport_error.empty()) << response.transport_error;
  EXPECT_FALSE(response.timed_out);
  EXPECT_LT(response.retry_after_s, 0);
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].path, "/v1/chat/completions");
  EXPECT_EQ(requests[0].body, R"({"question":"?"})");
  EXPECT_EQ(requests[0].headers.at("authorization"), "Bearer sk-test");
  EXPECT_NE(requests[0].headers.at("content-type").find("application/json"), std::string::npos);
}

TEST(HttpClient, NoTokenSendsNoAuthorizationHeader) {
  openai_test_server server;
  server.push(ok_reply("{}"));
  http_client client;
  ASSERT_EQ(client.post_json(server.base_url() + "/x", "{}", "", 10s).status, 200);
  EXPECT_EQ(server.requests().at(0).headers.count("authorization"), 0u);
}

TEST(HttpClient, AnErrorStatusIsAResponseWithItsBodyAndRetryAfter) {
  openai_test_server server;
  auto busy = scripted_reply::error(429, "slow down");
  busy.headers.push_back({"Retry-After", "7"});
  server.push(busy);
  server.push(scripted_reply::error(500, "broken"));
  http_client client;
  const auto limited = client.post_json(server.base_url() + "/x", "{}", "", 10s);
  EXPECT_EQ(limited.status, 429);
  EXPECT_NE(limited.body.find("slow down"), std::string::npos) << limited.body;
  EXPECT_EQ(limited.retry_after_s, 7);
  EXPECT_TRUE(limited.transport_error.empty());
  const auto failed = client.post_json(server.base_url() + "/x", "{}", "", 10s);
  EXPECT_EQ(failed.status, 500);
  EXPECT_LT(failed.retry_after_s, 0) << "a Retry-After of an earlier response leaked";
}

TEST(HttpClient, AConnectionClosedBeforeTheReplyIsATransportError) {
  openai_test_server server;
  server.push(scripted_reply::drop_before_reply());
  http_client client;
  const auto response = client.post_json(server.base_url() + "/x", "{}", "", 10s);
  EXPECT_EQ(response.status, 0);
  EXPECT_FALSE(response.transport_error.empty());
  EXPECT_FALSE(response.timed_out);
}

TEST(HttpClient, ABodyCutShortIsNotAResponse) {
  openai_test_server server;
  server.push(scripted_reply::drop_mid_body(ok_reply(std::string(4000, 'x'))));
  http_client client;
  const auto response = client.post_json(server.base_url() + "/x", "{}", "", 10s);
  EXPECT_EQ(response.status, 0) << "half a body was taken for a reply";
  EXPECT_FALSE(response.transport_error.empty());
}

TEST(HttpClient, ASlowServerTimesOutWithinTheTimeout) {
  openai_test_server server;
  server.push(ok_reply("{}").after(5s));
  http_client client;
  const auto start = std::chrono::steady_clock::now();
  const auto response = client.post_json(server.base_url() + "/x", "{}", "", 300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_TRUE(response.timed_out);
  EXPECT_EQ(response.status, 0);
  EXPECT_FALSE(response.transport_error.empty());
  EXPECT_LT(took, 3s) << "the client waited for the server instead of its timeout";
}

TEST(HttpClient, ARefusedConnectionIsATransportError) {
  http_client client;
  const auto url = "http://127.0.0.1:" + std::to_string(closed_port()) + "/v1/x";
  const auto response = client.post_json(url, "{}", "", 5s);
  EXPECT_EQ(response.status, 0);
  EXPECT_FALSE(response.timed_out);
  EXPECT_FALSE(response.transport_error.empty());
}

TEST(HttpClient, ConnectErrorSaysWhetherSomethingListens) {
  openai_test_server server;
  http_client client;
  EXPECT_EQ(client.connect_error(server.base_url(), 5s), "");
  EXPECT_EQ(server.request_count(), 0u) << "connect_error sent a request";
  const auto refused =
      client.connect_error("http://127.0.0.1:" + std::to_string(closed_port()) + "/v1", 5s);
  EXPECT_NE(refused, "");
}

TEST(HttpClient, OneClientServesRequestsOneAfterAnother) {
  openai_test_server server;
  for (int i = 0; i < 3; ++i) server.push(ok_reply(std::to_string(i)));
  http_client client;
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(client.post_json(server.base_url() + "/x", "{}", "", 10s).body, std::to_string(i));
}

}  // namespace
}  // namespace cuda_agent::policy
