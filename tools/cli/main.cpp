// cuda-agent: the one command line of the system. Subcommands live in *_command.cpp beside
// this file; see commands.hpp for how they are wired.
#include <cstdio>
#include <iostream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "tools/cli/commands.hpp"

namespace {

int fail(const std::string& message, int status) {
  std::cerr << "cuda-agent: error: " << message << "\n";
  return status;
}

// Diagnostics go to standard error so that standard output stays machine-readable.
void setup_logging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("cuda-agent");
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cuda_agent;
  CLI::App app{"cuda-agent: train and run language-model agents that write fast CUDA kernels.",
               "cuda-agent"};
  app.require_subcommand(1);
  std::string config_path;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "TOML settings file (keys: config/README.md)")
      ->check(CLI::ExistingFile);
  app.add_option("--set", overrides, "Override one setting, KEY=VALUE (repeatable)")
      ->type_name("KEY=VALUE")
      ->take_all();

  cli::invocation inv;
  cli::add_config_command(app, inv);
  cli::add_doctor_command(app, inv);
  cli::add_log_command(app, inv);
  cli::add_check_command(app, inv);
  cli::add_corpus_command(app, inv);
  cli::add_build_command(app, inv);
  cli::add_policy_command(app, inv);
  cli::add_rollout_command(app, inv);
  cli::add_eval_command(app, inv);
  cli::add_replay_command(app, inv);
  cli::add_node_command(app, inv);
  cli::add_status_command(app, inv);
  cli::add_report_command(app, inv);
#ifdef CUDA_AGENT_HAVE_TORCH
  cli::add_generate_command(app, inv);
  cli::add_train_command(app, inv);
  cli::add_learner_rank_command(app, inv);
#endif
  auto* bench = app.add_subcommand("bench", "Benchmarks that print their numbers");
  bench->require_subcommand(1);
  cli::add_bench_log_command(*bench, inv);
  cli::add_bench_build_command(*bench, inv);
  cli::add_bench_sandbox_command(*bench, inv);
  cli::add_bench_actors_command(*bench, inv);
  cli::add_bench_harness_command(*bench, inv);
  cli::add_bench_nodes_command(*bench, inv);
#ifdef CUDA_AGENT_HAVE_TORCH
  cli::add_bench_generate_command(*bench, inv);
  cli::add_bench_learn_command(*bench, inv);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(std::string{e.what()} + " (see --help)", 2);
  }

  try {
    if (!config_path.empty()) inv.config.load_file(config_path);
    for (const auto& assignment : overrides) inv.config.apply_override(assignment);
  } catch (const config_error& e) {
    return fail(e.what(), 2);
  }
  setup_logging(inv.config.get_string("logging.level"));

  if (!inv.action) return fail("no command given (see --help)", 2);
  try {
    return inv.action();
  } catch (const cli::usage_error& e) {
    return fail(e.what(), 2);
  } catch (const config_error& e) {
    return fail(e.what(), 2);
  } catch (const cli::task_failure& e) {
    return fail(e.what(), cli::exit_task_failure);
  } catch (const std::exception& e) {
    return fail(e.what(), 1);
  }
}
