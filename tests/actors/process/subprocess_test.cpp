#include <gtest/gtest.h>

#include <signal.h>

#include "actors/process/subprocess.hpp"

namespace cuda_agent {
namespace {

using namespace std::chrono_literals;

TEST(subprocess, captures_output_and_exit_status) {
  const auto r = run_subprocess({"sh", "-c", "echo out; echo err >&2; exit 3"});
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  EXPECT_EQ(r.describe(), "exit status 3");
}

TEST(subprocess, feeds_standard_input) {
  subprocess_options options;
  options.stdin_data = std::string(200000, 'x');  // more than a pipe buffer holds
  const auto r = run_subprocess({"wc", "-c"}, options);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(std::stoi(r.out), 200000);
}

TEST(subprocess, kills_the_whole_group_at_the_time_limit) {
  subprocess_options options;
  options.timeout = 300ms;
  // The grandchild keeps the output pipe open; it must die with its parent.
  const auto r = run_subprocess({"sh", "-c", "sleep 30 & sleep 30"}, options);
  EXPECT_TRUE(r.timed_out);
  EXPECT_FALSE(r.ok());
  EXPECT_LT(r.elapsed, 5s);
}

TEST(subprocess, reports_a_crash_by_signal) {
  const auto r = run_subprocess({"sh", "-c", "kill -SEGV $$"});
  EXPECT_TRUE(r.signaled);
  EXPECT_EQ(r.term_signal, SIGSEGV);
  EXPECT_NE(r.describe().find("signal 11"), std::string::npos);
}

TEST(subprocess, caps_captured_output) {
  subprocess_options options;
  options.max_output_bytes = 1000;
  const auto r = run_subprocess({"sh", "-c", "head -c 100000 /dev/zero"}, options);
  ASSERT_TRUE(r.ok()) << r.describe();
  EXPECT_EQ(r.out.size(), 1000u);
  EXPECT_TRUE(r.output_truncated);
}

TEST(subprocess, passes_environment_and_working_directory) {
  subprocess_options options;
  options.extra_env["CUDA_AGENT_PROBE"] = "42";
  options.working_dir = "/tmp";
  const auto r = run_subprocess({"sh", "-c", "echo $CUDA_AGENT_PROBE $(pwd)"}, options);
  EXPECT_EQ(r.out, "42 /tmp\n");
}

TEST(subprocess, missing_program_throws) {
  EXPECT_THROW(run_subprocess({"/nonexistent/program"}), std::system_error);
}

}  // namespace
}  // namespace cuda_agent
