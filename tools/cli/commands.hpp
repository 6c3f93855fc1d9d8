// Subcommands of the `cuda-agent` binary. Each `add_*` registers a subcommand on the given
// CLI11 app; when that subcommand is chosen, its callback stores the action in
// `invocation::action`, which main() runs once the settings are loaded and validated.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <string>
#include <vector>

#include "config/settings.hpp"

namespace cuda_agent::cli {

struct invocation {
  settings config;
  std::function<int()> action;  // returns the process exit status
};

// Thrown by an action for bad usage discovered after parsing (a missing file, a bad filter):
// main prints "cuda-agent: error: <what>" on one line and exits with status 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Thrown where a task itself is broken (it does not import, lacks Model, get_inputs or
// get_init_inputs, or its reference does not run): one line, exit status 3. It is found before
// anything is built and is never a candidate's reward.
struct task_failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
constexpr int exit_task_failure = 3;

void add_config_command(CLI::App& app, invocation& inv);   // config_command.cpp
void add_doctor_command(CLI::App& app, invocation& inv);   // doctor_command.cpp
void add_log_command(CLI::App& app, invocation& inv);      // log_command.cpp
void add_policy_command(CLI::App& app, invocation& inv);   // policy_command.cpp
void add_bench_log_command(CLI::App& bench, invocation& inv);  // bench_log_command.cpp
void add_check_command(CLI::App& app, invocation& inv);    // check_command.cpp
void add_corpus_command(CLI::App& app, invocation& inv);   // corpus_command.cpp
void add_build_command(CLI::App& app, invocation& inv);     // build_command.cpp
void add_bench_build_command(CLI::App& bench, invocation& inv);  // build_command.cpp
void add_rollout_command(CLI::App& app, invocation& inv);   // rollout_command.cpp
void add_eval_command(CLI::App& app, invocation& inv);      // rollout_command.cpp
void add_replay_command(CLI::App& app, invocation& inv);    // replay_command.cpp
void add_node_command(CLI::App& app, invocation& inv);      // node_command.cpp
void add_status_command(CLI::App& app, invocation& inv);    // status_command.cpp
void add_bench_nodes_command(CLI::App& bench, invocation& inv);  // bench_nodes_command.cpp
void add_report_command(CLI::App& app, invocation& inv);    // report_command.cpp
void add_bench_sandbox_command(CLI::App& bench, invocation& inv);  // bench_sandbox_command.cpp
void add_bench_actors_command(CLI::App& bench, invocation& inv);   // bench_actors_command.cpp
void add_bench_harness_command(CLI::App& bench, invocation& inv);  // bench_harness_command.cpp
#ifdef CUDA_AGENT_HAVE_TORCH
void add_generate_command(CLI::App& app, invocation& inv);          // generate_command.cpp
void add_bench_generate_command(CLI::App& bench, invocation& inv);  // bench_generate_command.cpp
void add_bench_learn_command(CLI::App& bench, invocation& inv);     // bench_learn_command.cpp
void add_train_command(CLI::App& app, invocation& inv);             // train_command.cpp
void add_learner_rank_command(CLI::App& app, invocation& inv);      // train_command.cpp
// The non-empty items of a comma list ("a,,b" -> a, b).                 train_command.cpp
std::vector<std::string> split_list(const std::string& list);
// The positive integers of a comma list such as "1,8,32"; anything else (an empty item, "8x",
// 0) is a usage_error naming `option`.                                   train_command.cpp
std::vector<int64_t> parse_positive_list(const std::string& option, const std::string& text);
#endif

}  // namespace cuda_agent::cli
