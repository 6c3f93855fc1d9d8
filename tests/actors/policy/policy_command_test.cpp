// `cuda-agent policy ask`: the real binary, as a child process, against the test server.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>

#include "actors/process/subprocess.hpp"
#include "tests/actors/policy/test_support.hpp"

namespace cuda_agent::policy {
namespace {

using namespace testing;

subprocess_result cuda_agent_cli(const openai_test_server& server, std::vector<std::string> args) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  if (!binary) throw std::runtime_error{"CUDA_AGENT_BINARY is not set (run through ctest)"};
  std::vector<std::string> argv = {binary,
                                   "--set", "policy.base_url=" + server.base_url(),
                                   "--set", std::string{"policy.tools_dir="} + CUDA_AGENT_SOURCE_DIR "/skills/tools",
                                   "--set", "policy.retries=0", "--set", "logging.level=warn"};
  argv.insert(argv.end(), args.begin(), args.end());
  subprocess_options options;
  options.timeout = std::chrono::seconds{60};
  return run_subprocess(argv, options);
}

TEST(policy_command, asks_the_server_and_prints_the_response) {
  openai_test_server server;
  server.push(reply_with(completion()
                             .content("Listing.")
                             .tool_call("c1", "Glob", R"({"pattern":"*"})")
                             .tokens({{7, -0.5f}, {8, -0.125f}})
                             .usage(50, 2)));
  const auto r = cuda_agent_cli(
      server, {"--set", "policy.model=served", "policy", "ask", "--prompt", "What is here?"});
  ASSERT_TRUE(r.ok()) << r.describe() << r.err;
  const auto printed = nlohmann::json::parse(r.out);
  EXPECT_EQ(printed["content"], "Listing.");
  EXPECT_EQ(printed["tool_calls"][0]["tool"], "Glob");
  EXPECT_EQ(printed["token_ids"], (nlohmann::json{7, 8}));
  EXPECT_EQ(printed["prompt_tokens"], 50);
  const auto sent = server.requests().at(0).json();
  EXPECT_EQ(sent["model"], "served");
  EXPECT_EQ(sent["messages"][1]["content"], "What is here?");
}

TEST(policy_command, a_failing_server_or_missing_model_is_a_one_line_error) {
  openai_test_server server;
  server.push(scripted_reply::error(401, "invalid API key"));
  auto r = cuda_agent_cli(server, {"--set", "policy.model=served", "policy", "ask"});
  EXPECT_EQ(r.exit_code, 1) << r.describe();
  EXPECT_EQ(r.err.rfind("cuda-agent: error: policy server ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("HTTP 401: invalid API key"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;

  r = cuda_agent_cli(server, {"policy", "ask"});  // no policy.model
  EXPECT_EQ(r.exit_code, 2) << r.describe();
  EXPECT_NE(r.err.find("policy.model is empty"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cuda_agent::policy
