// Runs the real `cuda-agent` binary as a child process and checks what a user sees: help, exit
// statuses and one-line errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include <stdlib.h>
#include <unistd.h>

#include "tests/tools/cli/cli_runner.hpp"

namespace cuda_agent {
namespace {

using testing::cli;

int line_count(const std::string& text) {
  int lines = 0;
  for (char c : text) lines += c == '\n';
  return lines;
}

TEST(cli, help_lists_the_subcommands) {
  const auto r = cli({"--help"});
  ASSERT_TRUE(r.ok()) << r.describe() << r.err;
  for (const char* sub : {"rollout", "train", "config", "doctor", "log", "bench"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub;
}

TEST(cli, every_subcommand_has_help) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"rollout"}, {"train"}, {"config", "show"}, {"config", "schema"}, {"doctor"},
        {"log", "show"}, {"log", "stats"}, {"log", "export"}, {"bench", "log"},
        {"policy", "ask"}}) {
    args.push_back("--help");
    const auto r = cli(args);
    EXPECT_TRUE(r.ok()) << args[0] << ": " << r.describe() << r.err;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << args[0] << r.out;
  }
}

TEST(cli, unknown_flag_is_a_one_line_error) {
  const auto r = cli({"config", "show", "--frobnicate"});
  EXPECT_TRUE(r.exited);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_EQ(r.err.rfind("cuda-agent: error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("--frobnicate"), std::string::npos) << r.err;
}

TEST(cli, missing_subcommand_is_an_error) {
  const auto r = cli({});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
}

TEST(cli, bad_setting_is_a_one_line_error_naming_the_key) {
  const auto r = cli({"--set", "log.segment_bytes=huge", "config", "show"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("log.segment_bytes"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(cli, missing_config_file_is_an_error) {
  const auto r = cli({"--config", "/nonexistent/cuda-agent.toml", "config", "show"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
}

TEST(cli, config_show_reports_overrides_and_their_origin) {
  const auto r = cli({"--set", "log.fsync=always", "config", "show"});
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_NE(r.out.find("fsync = 'always'  # --set"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[log]"), std::string::npos) << r.out;
}

TEST(cli, doctor_passes_on_a_set_up_machine) {
  const auto r = cli({"doctor"});
  EXPECT_TRUE(r.ok()) << r.describe() << "\n" << r.out << r.err;
  EXPECT_NE(r.out.find("all checks passed"), std::string::npos) << r.out;
}

TEST(cli, doctor_fails_with_a_python_that_has_no_torch) {
  const auto r = cli({"--set", "harness.python=/bin/false", "doctor"});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL  harness.python '/bin/false'"), std::string::npos) << r.out;
}

TEST(cli, rollout_tasks_that_match_nothing_are_a_one_line_error) {
  const auto r = cli({"rollout", "--corpus", "smoke", "--policy", "demo", "--tasks", "nothing*,nor_this"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("no task of set smoke matches --tasks nothing*,nor_this"), std::string::npos) << r.err;
}

// The README's main command from an empty directory outside the source tree: the shipped inputs
// (sets, demonstrations, tool schemas, harness) are found in the source tree, the outputs land
// under the working directory.
TEST(cli, the_main_command_works_from_an_empty_directory_elsewhere) {
  const auto dir = std::filesystem::temp_directory_path() / ("cuda-agent-cwd-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto r = cli({"--set", "harness.timed_runs=3", "--set", "harness.warmup_runs=1", "rollout", "--policy",
                      "demo", "--episodes", "1", "--device", "cpu", "--tasks", "smoke_01_relu"},
                     std::chrono::minutes{8}, dir);
  EXPECT_TRUE(r.ok()) << r.describe() << "\n" << r.err;
  EXPECT_NE(r.out.find("agent_done"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::is_directory(dir / "runs")) << "outputs belong under the working directory";
  std::filesystem::remove_all(dir);
}

TEST(cli, rollout_without_a_set_takes_the_devices_own) {
  // smoke on cpu (bench on cuda): the set named in the error is the one the rollout chose.
  auto r = cli({"rollout", "--policy", "demo", "--device", "cpu", "--tasks", "nothing*"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no task of set smoke matches"), std::string::npos) << r.err;
  r = cli({"rollout", "--policy", "demo", "--device", "cuda", "--tasks", "nothing*"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("no task of set bench matches"), std::string::npos) << r.err;
  r = cli({"rollout", "--policy", "demo", "--device", "tpu"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
}

TEST(cli, rollout_of_an_unknown_set_is_a_one_line_error_and_corpus_dir_is_honoured) {
  auto r = cli({"rollout", "--policy", "demo", "--corpus", "no-such-set"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("no task set 'no-such-set'"), std::string::npos) << r.err;
  // The sets are looked up under corpus.dir, as `corpus` and `train` look them up.
  r = cli({"--set", "corpus.dir=/nonexistent", "rollout", "--policy", "demo", "--corpus", "smoke"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("corpus.dir '/nonexistent'"), std::string::npos) << r.err;
}

TEST(cli, rollout_resume_needs_the_run_and_its_log) {
  auto r = cli({"rollout", "--corpus", "smoke", "--policy", "demo", "--resume"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--resume needs the --run-id and the --log"), std::string::npos) << r.err;
  const auto empty = std::filesystem::temp_directory_path() / "cuda-agent-cli-test-no-log-here";
  r = cli({"rollout", "--corpus", "smoke", "--policy", "demo", "--resume", "--run-id", "x", "--log",
           empty.string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("no message log at"), std::string::npos) << r.err;
}

TEST(cli, rollout_with_no_openai_server_is_refused_up_front) {
  // Nothing listens on port 1: refused before any episode starts, not after every retry.
  const auto r = cli({"--set", "policy.base_url=http://127.0.0.1:1/v1", "rollout", "--corpus", "smoke",
                      "--policy", "openai", "--device", "cpu"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("policy.base_url http://127.0.0.1:1/v1: no server answers"), std::string::npos) << r.err;
}

TEST(cli, rollout_on_cuda_without_a_gpu_is_refused_up_front) {
  if (std::filesystem::exists("/dev/nvidia0")) GTEST_SKIP() << "this host has a GPU";
  const auto r = cli({"rollout", "--corpus", "smoke", "--policy", "demo", "--device", "cuda"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("--device cuda: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("use --device cpu"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace cuda_agent
