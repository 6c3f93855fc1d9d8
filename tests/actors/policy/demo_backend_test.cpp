// The demonstration player, on the fixture in tests/actors/policy/demos and on broken demonstrations
// written by the tests.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "actors/policy/demo_backend.hpp"
#include "tests/actors/message_log/test_support.hpp"
#include "tests/actors/policy/test_support.hpp"

namespace cuda_agent::policy {
namespace {

namespace fs = std::filesystem;
using message_log::testing::read_bytes;
using message_log::testing::scratch_dir;
using nlohmann::json;

const fs::path demos = CUDA_AGENT_SOURCE_DIR "/tests/actors/policy/demos";

std::string policy_error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const policy_error& e) {
    return e.what();
  }
  return "(no policy_error)";
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream{path} << text;
}

TEST(demo_backend, plays_each_step_then_the_final_answer) {
  demo_backend backend{demos};  // finds toy/relu by searching the sets
  auto request = testing::first_turn("ep-demo");
  request.task_id = "relu";
  const std::vector<std::string> tools = {"Read", "Write", "Write", "Bash", "Bash"};
  std::set<std::string> call_ids;
  for (size_t step = 0; step < tools.size(); ++step) {
    request.turn = static_cast<int32_t>(step + 1);
    const auto response = backend.complete(request);
    EXPECT_EQ(response.episode_id, "ep-demo");
    EXPECT_EQ(response.turn, request.turn);
    EXPECT_EQ(response.finish_reason, "tool_calls");
    ASSERT_EQ(response.tool_calls.size(), 1u);
    const auto& call = response.tool_calls[0];
    EXPECT_EQ(call.tool, tools[step]);
    EXPECT_EQ(call.parse_error, "");
    EXPECT_TRUE(call_ids.insert(call.call_id).second) << "call id reused: " << call.call_id;
    const auto arguments = json::parse(call.arguments_json);
    if (step == 0) {
      EXPECT_EQ(response.content, "Read the reference program first.");
    }
    if (step == 1) {
      EXPECT_EQ(arguments["file_path"], "kernels/relu.cpp");
      EXPECT_EQ(arguments["content"], read_bytes(demos / "toy/relu/solution/kernels/relu.cpp"));
    }
    if (step == 3) {
      EXPECT_EQ(arguments["command"], "build");
    }
    // The episode appends the turn and the tool's answer.
    request.messages.push_back({"assistant", response.content, "", response.tool_calls});
    request.messages.push_back({"tool", "ok", call.call_id, {}});
  }
  const auto last = backend.complete(request);
  EXPECT_EQ(last.content, "ModelNew runs a fused element-wise ReLU kernel and passes verification.");
  EXPECT_TRUE(last.tool_calls.empty());
  EXPECT_EQ(last.finish_reason, "stop");

  request.messages.push_back({"assistant", last.content, "", {}});
  request.messages.push_back({"user", "go on", "", {}});
  EXPECT_NE(policy_error_of([&] { backend.complete(request); }).find("has 5 steps and a final answer"),
            std::string::npos);
}

TEST(demo_backend, is_made_from_the_settings) {
  settings config;
  config.apply_override("policy.backend=demo");
  config.apply_override("policy.demo_dir=" + (demos / "toy").string());  // one set's folder
  const auto backend = make_policy_backend(policy_settings::from(config));
  EXPECT_EQ(backend->name(), "demo");
  auto request = testing::first_turn();
  EXPECT_EQ(backend->complete(request).tool_calls.at(0).tool, "Read");
}

TEST(demo_backend, names_the_problem_of_a_broken_demonstration) {
  scratch_dir dir;
  const auto demo = [&](const std::string& task, const std::string& text) {
    write_text(dir.path() / "set" / task / "demo.json", text);
    return dir.path() / "set" / task / "demo.json";
  };
  const auto error_for = [&](const std::string& task, const std::string& text) {
    const auto file = demo(task, text);
    const auto error = policy_error_of([&] { load_demonstration(file); });
    EXPECT_NE(error.find(file.string()), std::string::npos) << error;
    return error;
  };
  const std::string head = R"({"task_id": "t", "device": "cpu", "final": "done", "steps": )";
  EXPECT_NE(error_for("a", head + R"([{"thought": "", "tool": "Fly", "arguments": {}}]})")
                .find("steps[0]: unknown tool \"Fly\""),
            std::string::npos);
  EXPECT_NE(error_for("b", head + R"([{"thought": "", "tool": "Write", "arguments": {"content": {"$file": "../../secret"}}}]})")
                .find("must be a path inside the demo folder"),
            std::string::npos);
  EXPECT_NE(error_for("c", head + R"([{"thought": "", "tool": "Write", "arguments": {"content": {"$file": "absent.cu"}}}]})")
                .find("cannot be read"),
            std::string::npos);
  EXPECT_NE(error_for("d", head + R"([{"tool": "Bash", "arguments": {"command": "ls"}}]})")
                .find("steps[0]: \"thought\" must be a string"),
            std::string::npos);
  EXPECT_NE(error_for("e", R"({"task_id": "t", "device": "tpu", "final": "", "steps": []})")
                .find("\"device\" must be \"cpu\" or \"cuda\""),
            std::string::npos);
  EXPECT_NE(error_for("f", "{not json").find("is not a JSON object"), std::string::npos);

  // A demonstration filed under another task's folder, a task without one, a task in two sets.
  demo("g", R"({"task_id": "other", "device": "cpu", "final": "", "steps": []})");
  demo_backend backend{dir.path()};
  auto request = testing::first_turn();
  request.task_id = "g";
  EXPECT_NE(policy_error_of([&] { backend.complete(request); }).find("\"task_id\" is \"other\""),
            std::string::npos);
  request.task_id = "nothing";
  EXPECT_NE(policy_error_of([&] { backend.complete(request); }).find("no demonstration for task 'nothing'"),
            std::string::npos);
  write_text(dir.path() / "set2" / "g" / "demo.json", "{}");
  request.task_id = "g";
  EXPECT_NE(policy_error_of([&] { demo_backend{dir.path()}.complete(request); }).find("several sets"),
            std::string::npos);
}

}  // namespace
}  // namespace cuda_agent::policy
