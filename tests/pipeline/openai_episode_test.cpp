// An episode driven by the openai backend, end to end on CPU. A real HTTP server on 127.0.0.1
// (tests/support/openai_test_server, standing in for vLLM, which cannot run here) answers each
// turn with the next step of a shipped demonstration, as a model would: content, one tool call,
// sampled token ids and log-probabilities. `cuda-agent rollout --policy openai` runs in a child
// process and carries the calls through the sandboxed tools, the compiler pool's build and the
// locked harness; the episode must earn a positive reward and replay identically from its log.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/policy/demo_backend.hpp"
#include "actors/process/subprocess.hpp"
#include "tests/actors/message_log/test_support.hpp"
#include "tests/support/openai_test_server.hpp"

namespace fs = std::filesystem;
using cuda_agent::run_subprocess;
using cuda_agent::subprocess_options;
using cuda_agent::testing::completion;
using cuda_agent::testing::openai_test_server;
using cuda_agent::testing::received_request;
using cuda_agent::testing::reply_with;
using cuda_agent::testing::scripted_reply;
using cuda_agent::message_log::testing::scratch_dir;

namespace {

const fs::path kSource = CUDA_AGENT_SOURCE_DIR;

size_t assistant_turns(const nlohmann::json& request) {
  size_t turns = 0;
  for (const auto& message : request.at("messages"))
    if (message.value("role", "") == "assistant") ++turns;
  return turns;
}

}  // namespace

TEST(openai_episode, a_served_model_drives_an_episode_through_real_tools_build_and_harness) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  ASSERT_NE(binary, nullptr) << "CUDA_AGENT_BINARY names the cuda-agent under test";
  const auto demo = cuda_agent::policy::load_demonstration(
      kSource / "corpus/demos/smoke/smoke_01_relu/demo.json");
  ASSERT_FALSE(demo.steps.empty());

  openai_test_server server;
  server.set_fallback([&demo](const received_request& request) {
    const auto turn = assistant_turns(request.json());
    const auto token = static_cast<int32_t>(1000 + turn);
    if (turn < demo.steps.size()) {
      const auto& step = demo.steps[turn];
      return reply_with(completion()
                            .content(step.thought)
                            .tool_call("call-" + std::to_string(turn), step.tool, step.arguments.dump())
                            .finish_reason("tool_calls")
                            .usage(500, 40)
                            .tokens({{token, -0.25f}, {token + 1, -0.5f}}));
    }
    if (turn == demo.steps.size())
      return reply_with(completion().content(demo.final).finish_reason("stop").usage(500, 20).tokens(
          {{token, -0.125f}}));
    return scripted_reply::error(400, "the episode asked past its final answer");
  });

  scratch_dir scratch;
  // Sandboxed commands may run as another user and must reach the workdir.
  fs::permissions(scratch.path(), fs::perms::group_read | fs::perms::group_exec | fs::perms::others_read |
                                      fs::perms::others_exec,
                  fs::perm_options::add);
  const fs::path log = scratch.path() / "log";
  subprocess_options options;
  options.timeout = std::chrono::minutes{15};
  const auto rollout = run_subprocess(
      {binary, "--set", "policy.base_url=" + server.base_url(), "--set", "policy.model=test-model",
       "--set", "policy.tools_dir=" + (kSource / "skills/tools").string(), "--set",
       "rollout.runs_dir=" + (scratch.path() / "runs").string(), "--set", "harness.timed_runs=5",
       "--set", "harness.warmup_runs=2", "rollout", "--corpus", "smoke", "--policy", "openai",
       "--episodes", "1", "--log", log.string(), "--run-id", "oa"},
      options);
  ASSERT_TRUE(rollout.exited && rollout.exit_code == 0) << rollout.out << rollout.err;
  std::cout << rollout.out;
  EXPECT_TRUE(std::regex_search(rollout.out,
                                std::regex{R"(oa-0000 +smoke_01_relu +agent_done +reward +[123] )"}))
      << "the served demonstration did not earn a positive reward:\n"
      << rollout.out << rollout.err.substr(rollout.err.size() > 4000 ? rollout.err.size() - 4000 : 0);

  // One request per turn; from the second on, each carries the previous tool call's result,
  // and every one offers the nine tools.
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), demo.steps.size() + 1);
  for (size_t turn = 0; turn < requests.size(); ++turn) {
    const auto body = requests[turn].json();
    EXPECT_EQ(body.at("model"), "test-model");
    EXPECT_EQ(body.at("tools").size(), 9u);
    EXPECT_EQ(assistant_turns(body), turn);
    if (turn == 0) continue;
    const auto& last = body.at("messages").back();
    EXPECT_EQ(last.value("role", ""), "tool") << "turn " << turn;
    EXPECT_EQ(last.value("tool_call_id", ""), "call-" + std::to_string(turn - 1));
  }

  const auto replay = run_subprocess({binary, "replay", log.string()}, options);
  EXPECT_TRUE(replay.exited && replay.exit_code == 0) << replay.out << replay.err;
}
