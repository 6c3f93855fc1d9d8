// `cuda-agent bench harness`: where one evaluation's time goes in a warm harness worker.
//
// Builds the shipped demonstrations of a few tasks (the bench set on cuda, smoke on cpu), then
// evaluates each of them --jobs times through one harness worker, as the GPU pool does, and
// prints per job the wall time and the worker's phases (skills/harness/evaluator.py, PhaseLog),
// then the median of each over the warm jobs: every job but the worker's first, which also
// pays the worker's own start. A task's first job pays its first torch.compile unless the
// baseline cache already holds it.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/harness/harness_process.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"

#if __has_include("kernels/build/build.hpp")
#include "kernels/build/build.hpp"
#define CUDA_AGENT_BENCH_BUILDS 1
#endif

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct bench_harness_options {
  std::string device = "cuda";
  std::vector<std::string> tasks;  // demonstration ids; empty: a default few of the device's set
  int jobs = 3;
};

double median(std::vector<double> xs) {
  if (xs.empty()) return 0.0;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

int run_bench_harness(const bench_harness_options& opt, const settings& config) {
#ifndef CUDA_AGENT_BENCH_BUILDS
  (void)opt;
  (void)config;
  throw usage_error{"this cuda-agent was built without the build pipeline; bench harness needs it"};
#else
  if (opt.jobs < 1) throw usage_error{"--jobs must be at least 1"};
  const std::string set = opt.device == "cuda" ? "bench" : "smoke";
  std::vector<std::string> tasks = opt.tasks;
  if (tasks.empty())
    tasks = opt.device == "cuda"
                ? std::vector<std::string>{"bench_05_matmul", "bench_13_linear_relu", "bench_17_attention",
                                           "bench_18_rmsnorm"}
                : std::vector<std::string>{"smoke_01_relu", "smoke_05_matmul", "smoke_08_add_relu"};
  const fs::path corpus = corpus_root(config);
  struct built_task {
    std::string id;
    fs::path task, solution, module;
  };
  std::vector<built_task> built;
  for (const auto& id : tasks) {
    built_task b{id, corpus / "tasks" / set / (id + ".py"), corpus / "demos" / set / id, {}};
    if (!fs::is_regular_file(b.task) || !fs::is_regular_file(b.solution / "model_new.py"))
      throw usage_error{"no demonstration '" + id + "' in the " + set + " set under " + corpus.string() +
                        "; give --tasks ids of " + (corpus / "demos" / set).string()};
    build::build_request request;
    request.solution_dir = fs::absolute(b.solution);
    request.device = opt.device;
    const auto result = build::build_solution(build::build_settings::from(config), request);
    if (!result.ok) throw std::runtime_error{"building " + id + " failed: " + result.error + result.diagnostics};
    b.module = result.module_path;
    built.push_back(std::move(b));
  }

  const auto harness_config = harness::harness_settings::from(config);
  hold_timing_cpus(harness_config, opt.device);
  harness::harness_process worker{harness_config, opt.device};
  std::vector<std::string> phase_names;  // in the order the worker reported them
  std::map<std::string, std::vector<double>> warm;
  std::cout << fmt::format("{:<22} {:>3} {:>9} {:>7} {:>9}", "task", "job", "wall ms", "reward", "eager ms");
  bool header_done = false;
  int job_index = 0;
  for (int round = 0; round < opt.jobs; ++round) {
    for (const auto& b : built) {
      const auto start = clock_type::now();
      const auto result = worker.evaluate(evaluate_job{fmt::format("bench-{}", job_index), "bench-harness",
                                                       fs::absolute(b.task).string(), fs::absolute(b.solution).string(),
                                                       fs::absolute(b.module).string(), opt.device,
                                                       harness_config.judging});
      const double wall = std::chrono::duration<double, std::milli>(clock_type::now() - start).count();
      if (!header_done) {
        for (const auto& [name, ms] : result.phases_ms) phase_names.push_back(name);
        for (const auto& name : phase_names) std::cout << fmt::format(" {:>10}", name);
        std::cout << "\n";
        header_done = true;
      }
      std::cout << fmt::format("{:<22} {:>3} {:>9.0f} {:>7} {:>9.4f}", b.id, round, wall, result.record.reward,
                               result.record.t_eager_ms);
      std::map<std::string, double> phases(result.phases_ms.begin(), result.phases_ms.end());
      for (const auto& name : phase_names) std::cout << fmt::format(" {:>10.0f}", phases[name]);
      if (!result.record.error.empty()) std::cout << "  " << result.record.error.substr(0, 120);
      std::cout << "\n";
      if (job_index > 0) {
        warm["wall"].push_back(wall);
        for (const auto& name : phase_names) warm[name].push_back(phases[name]);
      }
      ++job_index;
    }
  }
  if (!warm.empty()) {
    std::cout << fmt::format("median over {} warm jobs: wall {:.0f} ms", warm["wall"].size(), median(warm["wall"]));
    for (const auto& name : phase_names) std::cout << fmt::format(", {} {:.0f}", name, median(warm[name]));
    std::cout << " ms\n";
  }
  return 0;
#endif
}

}  // namespace

void add_bench_harness_command(CLI::App& bench, invocation& inv) {
  auto opt = std::make_shared<bench_harness_options>();
  CLI::App* cmd = bench.add_subcommand("harness", "Phases of evaluations in one warm harness worker, per job and median");
  cmd->add_option("--device", opt->device, "Where to evaluate")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--tasks", opt->tasks, "Demonstration ids (default: four of bench on cuda, three of smoke on cpu)");
  cmd->add_option("--jobs", opt->jobs, "Evaluations of each task");
  cmd->callback([opt, &inv] { inv.action = [opt, &inv] { return run_bench_harness(*opt, inv.config); }; });
}

}  // namespace cuda_agent::cli
