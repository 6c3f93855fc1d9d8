// `cuda-agent check --task TASK.py (--solution DIR | --kernelbench-file MODEL_NEW.py)
// [--device cpu|cuda] [--json]`: evaluate one candidate exactly as the reward does.
//
// A KernelBench-format candidate (load_inline) is first laid out as a solution workdir
// (kernelbench_candidate.hpp), so its inline sources go through the same cached build; the JSON
// record says so under "candidate".
//
// Builds the solution with build_solution, then hands it to a harness worker (verify, anti-hacking,
// interleaved timing against eager and torch.compile, milestone reward). With --json, one JSON
// object on one line of standard output; logs go to standard error. Exit status 0 whenever the
// evaluation ran, whatever the candidate did; 3 (one line) where the task itself is broken,
// found before the solution is built.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "actors/harness/harness_process.hpp"
#include "messages/reward.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/kernelbench_candidate.hpp"
#include "tools/cli/pipeline.hpp"
#include "tools/cli/scratch_dir.hpp"

#if __has_include("kernels/build/build.hpp")
#include "kernels/build/build.hpp"
#define CUDA_AGENT_CHECK_BUILDS 1
#endif

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;

struct check_options {
  std::string task;
  std::string solution;
  std::string kernelbench_file;  // instead of solution: a KernelBench-format model_new.py
  std::string device = "cpu";
  std::string module;  // a module built elsewhere: skip the build
  bool json = false;
};

std::string ms_or_dash(double ms) { return std::isfinite(ms) ? fmt::format("{:.4f} ms", ms) : "-"; }

void print_summary(const reward_record& r) {
  std::cout << "compiled:   " << (r.compiled ? "yes" : "no") << "\n"
            << "correct:    " << (r.correct ? "yes" : "no") << "\n";
  if (!r.violations.empty()) {
    std::cout << "violations:";
    for (const auto& v : r.violations) std::cout << " " << v;
    std::cout << "\n";
  }
  std::cout << "eager:      " << ms_or_dash(r.t_eager_ms) << "\n"
            << "compile:    " << ms_or_dash(r.t_compile_ms) << "\n"
            << "candidate:  " << ms_or_dash(r.t_new_ms) << "\n";
  if (std::isfinite(r.speedup_eager))
    std::cout << fmt::format("speed-up:   {:.3f}x over eager, {:.3f}x over torch.compile\n", r.speedup_eager,
                             r.speedup_compile);
  if (!r.error.empty()) std::cout << "error:      " << r.error << "\n";
  std::cout << "reward:     " << r.reward << "\n";
}

int run_check(const check_options& opt, const settings& config) {
  if (!fs::is_regular_file(opt.task))
    throw usage_error{"--task " + opt.task + " is not a file; give the task's model.py"};
  if (opt.solution.empty() == opt.kernelbench_file.empty())
    throw usage_error{"give one candidate: --solution DIR or --kernelbench-file MODEL_NEW.py"};
  if (!opt.kernelbench_file.empty() && !fs::is_regular_file(opt.kernelbench_file))
    throw usage_error{"--kernelbench-file " + opt.kernelbench_file + " is not a file; give the candidate's model_new.py"};
  if (opt.kernelbench_file.empty() && !fs::is_regular_file(fs::path{opt.solution} / "model_new.py"))
    throw usage_error{"--solution " + opt.solution + " holds no model_new.py; give the solution directory"};
  if (!opt.module.empty() && !fs::exists(opt.module))
    throw usage_error{"--module " + opt.module + " does not exist; give the built cuda_extension module or its directory"};

  require_device(opt.device);

  // The task first: a broken one is the task's error, not the candidate's r = -1, and nothing
  // is built for it.
  const auto harness_config = harness::harness_settings::from(config);
  hold_timing_cpus(harness_config, opt.device);
  harness::harness_process worker{harness_config, opt.device};
  const std::string task_path = fs::absolute(opt.task).string();
  const auto refuse = [&](const harness::task_error& e) {
    return task_failure{std::string{e.what()} + "; fix the task (Model, get_inputs and get_init_inputs, runnable on their own)"};
  };
  try {
    worker.check_task(task_path, opt.device, /*reference=*/true);
  } catch (const harness::task_error& e) {
    throw refuse(e);
  }

  reward_record record;
  std::string solution_dir = opt.solution;
  nlohmann::json candidate;  // how a KernelBench-format candidate was laid out and built
  std::unique_ptr<scratch_dir> converted;
  if (!opt.kernelbench_file.empty()) {
    converted = std::make_unique<scratch_dir>("cuda-agent-check-kernelbench");
    solution_dir = converted->path().string();
    candidate = convert_kernelbench_candidate(config, opt.kernelbench_file, converted->path());
    if (!candidate.value("ok", false)) {
      record.compiled = false;
      record.error = "not converted: " + candidate.value("error", std::string{});
      record.reward = milestone_reward(false, record.t_new_ms, record.t_eager_ms, record.t_compile_ms);
    }
  }
  std::string module_path = opt.module;
  if (module_path.empty() && record.error.empty()) {
#ifdef CUDA_AGENT_CHECK_BUILDS
    build::build_request request;
    request.solution_dir = fs::absolute(solution_dir);
    request.device = opt.device;
    const auto built = build::build_solution(build::build_settings::from(config), request);
    if (!built.error.empty()) throw std::runtime_error{"build infrastructure failed: " + built.error};
    if (!built.ok) {
      record.compiled = false;
      record.error = "build failed: " + built.diagnostics;
      record.reward = milestone_reward(false, record.t_new_ms, record.t_eager_ms, record.t_compile_ms);
    }
    module_path = built.module_path.string();
    spdlog::info("check: built {} in {:.0f} ms{}", module_path, built.duration_ms,
                 built.cache_hit ? " (cache hit)" : "");
    if (!candidate.is_null()) {
      candidate["build_ms"] = built.duration_ms;
      candidate["build_cache_hit"] = built.cache_hit;
    }
#else
    throw usage_error{"this cuda-agent was built without the build pipeline; pass --module with a built cuda_extension"};
#endif
  }

  if (record.error.empty()) {
    const evaluate_job job{"check", "", task_path, fs::absolute(solution_dir).string(),
                           fs::absolute(module_path).string(), opt.device, harness_config.judging};
    try {
      record = worker.evaluate(job).record;
    } catch (const harness::task_error& e) {
      throw refuse(e);  // drawn inputs of another seed can still break it
    }
  }

  if (opt.json) {
    auto out = check_json(record);
    if (!candidate.is_null()) out["candidate"] = candidate;
    std::cout << out.dump() << std::endl;
  } else {
    if (!candidate.is_null() && candidate.value("ok", false))
      std::cout << "candidate:  KernelBench format, " << candidate.value("built_with", std::string{}) << "\n";
    print_summary(record);
  }
  return 0;
}

}  // namespace

void add_check_command(CLI::App& app, invocation& inv) {
  auto opt = std::make_shared<check_options>();
  CLI::App* cmd = app.add_subcommand("check", "Evaluate one solution exactly as the reward does.");
  cmd->add_option("--task", opt->task, "The task's model.py (Model, get_inputs, get_init_inputs)")->required();
  cmd->add_option("--solution", opt->solution, "The solution directory (model_new.py, kernels/)");
  cmd->add_option("--kernelbench-file", opt->kernelbench_file,
                  "Instead of --solution: a KernelBench-format model_new.py whose ModelNew uses load_inline");
  cmd->add_option("--device", opt->device, "Where to evaluate")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--module", opt->module, "Use this built cuda_extension (file or directory) instead of building");
  cmd->add_flag("--json", opt->json, "One JSON object on one line of standard output");
  cmd->callback([opt, &inv] { inv.action = [opt, &inv] { return run_check(*opt, inv.config); }; });
}

}  // namespace cuda_agent::cli
