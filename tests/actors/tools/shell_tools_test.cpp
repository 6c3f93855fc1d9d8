// Bash, BashOutput and KillBash through run_tool: real commands in the real sandbox.
#include <thread>

#include "tests/actors/tools/tool_test_support.hpp"

namespace cuda_agent::tools::testing {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;

class shell_tools : public tool_fixture {};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(shell_tools, bash_runs_in_the_workdir_and_reports_the_exit_code) {
  const auto ok = call("Bash", {{"command", "pwd && echo to-stderr >&2"},
                               {"description", "where am I"}});
  EXPECT_FALSE(ok.is_error) << ok.output;
  EXPECT_EQ(ok.exit_code, 0);
  EXPECT_EQ(ok.output, "/workdir\nto-stderr");
  const auto failed = call("Bash", {{"command", "echo partial; exit 3"}});
  EXPECT_EQ(failed.exit_code, 3);
  EXPECT_EQ(failed.output, "partial\n[exit code 3]");
  EXPECT_EQ(call("Bash", {{"command", "true"}}).output, "(no output)");
}

TEST_F(shell_tools, files_written_by_the_tools_can_be_changed_by_commands_and_back) {
  ASSERT_FALSE(call("Write", {{"file_path", "src/a.txt"}, {"content", "one\n"}}).is_error);
  const auto r = call("Bash", {{"command", "echo two >> src/a.txt && mkdir -p out && "
                                           "echo three > out/b.txt && cat src/a.txt"}});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "one\ntwo");
  // The command changed the file after it was read: an edit must see it first.
  EXPECT_TRUE(call("Edit", {{"file_path", "src/a.txt"}, {"old_string", "one"},
                            {"new_string", "1"}})
                  .is_error);
  call("Read", {{"file_path", "src/a.txt"}});
  EXPECT_FALSE(call("Edit", {{"file_path", "src/a.txt"}, {"old_string", "one"},
                             {"new_string", "1"}})
                   .is_error);
  EXPECT_EQ(call("Read", {{"file_path", "out/b.txt"}}).output, "     1\tthree\n");
}

TEST_F(shell_tools, bash_is_killed_at_its_timeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = call("Bash", {{"command", "echo started; sleep 1000"}, {"timeout", 400}});
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_TRUE(contains(r.output, "started\n[timed out after 400 ms")) << r.output;
  EXPECT_TRUE(contains(call("Bash", {{"command", "true"}, {"timeout", 10000000}}).output,
                       "argument 'timeout' must be between 1 and 600000"));
}

TEST_F(shell_tools, long_output_is_cut_with_a_marker) {
  auto s = test_sandbox_settings();
  s.output_limit_bytes = 2000;
  make_session(s);
  const auto r = call("Bash", {{"command", "seq 1 100000"}});
  EXPECT_TRUE(r.truncated);
  EXPECT_LT(r.output.size(), 2300u);
  EXPECT_TRUE(contains(r.output, "[output truncated"));
  EXPECT_EQ(r.output.substr(0, 8), "1\n2\n3\n4\n");
}

TEST_F(shell_tools, routed_commands_do_not_run_in_the_shell) {
  const auto r = call("Bash", {{"command", " build "}});
  EXPECT_TRUE(r.is_error);
  EXPECT_TRUE(contains(r.output, "`build` is carried out by the episode")) << r.output;
}

TEST_F(shell_tools, background_output_is_polled_incrementally_and_the_shell_killed) {
  const auto started = call("Bash", {{"command", "for i in 1 2 3; do echo tick $i; sleep 0.2; "
                                                 "done; echo done-ticking; sleep 1000"},
                                     {"run_in_background", true}});
  ASSERT_FALSE(started.is_error) << started.output;
  EXPECT_TRUE(contains(started.output, "bash_1"));
  // Poll until the ticks are all there; each poll must bring only what is new.
  std::string seen;
  int polls_with_output = 0;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!contains(seen, "tick 3") && std::chrono::steady_clock::now() < deadline) {
    const auto r = call("BashOutput", {{"bash_id", "bash_1"}, {"filter", "^tick"}});
    ASSERT_TRUE(contains(r.output, "[bash_1: running]")) << r.output;
    if (!contains(r.output, "(no new output)")) {
      ++polls_with_output;
      seen += r.output.substr(0, r.output.rfind("[bash_1"));
    }
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_EQ(seen, "tick 1\ntick 2\ntick 3\n");  // no repeats; done-ticking filtered out
  EXPECT_GE(polls_with_output, 2);
  // The unfiltered rest arrives too, once; the command is still sleeping.
  std::string rest;
  while (!contains(rest, "done-ticking") && std::chrono::steady_clock::now() < deadline) {
    const auto r = call("BashOutput", {{"bash_id", "bash_1"}});
    ASSERT_TRUE(contains(r.output, "[bash_1: running]")) << r.output;
    rest += r.output.substr(0, r.output.rfind("[bash_1"));
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(rest == "done-ticking\n" || rest.find("(no new output)\n") == 0) << rest;
  EXPECT_NE(rest.find("done-ticking\n"), std::string::npos);
  EXPECT_EQ(call("KillBash", {{"bash_id", "bash_1"}}).output,
            "Killed bash_1 and every process it started");
  EXPECT_EQ(call("BashOutput", {{"bash_id", "bash_1"}}).output,
            "(no new output)\n[bash_1: killed]");
  EXPECT_TRUE(contains(call("KillBash", {{"bash_id", "bash_1"}}).output, "had already ended"));
  const auto unknown = call("BashOutput", {{"bash_id", "bash_9"}});
  EXPECT_TRUE(unknown.is_error);
  EXPECT_TRUE(contains(unknown.output, "the ones started are: bash_1")) << unknown.output;
}

TEST_F(shell_tools, a_finished_background_command_reports_its_exit_status) {
  call("Bash", {{"command", "echo bye; exit 4"}, {"run_in_background", true}});
  session->background("bash_1")->wait_for(10s);
  const auto r = call("BashOutput", {{"bash_id", "bash_1"}});
  EXPECT_EQ(r.output, "bye\n[bash_1: exit status 4]");
  EXPECT_EQ(r.exit_code, 4);
}

TEST_F(shell_tools, background_commands_are_bounded_per_episode) {
  auto s = test_sandbox_settings();
  s.max_background = 1;
  make_session(s);
  EXPECT_FALSE(call("Bash", {{"command", "sleep 1000"}, {"run_in_background", true}}).is_error);
  const auto second = call("Bash", {{"command", "sleep 1000"}, {"run_in_background", true}});
  EXPECT_TRUE(second.is_error);
  EXPECT_TRUE(contains(second.output, "sandbox.max_background")) << second.output;
}

}  // namespace
}  // namespace cuda_agent::tools::testing
