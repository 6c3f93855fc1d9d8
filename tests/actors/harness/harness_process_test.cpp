// The C++ client of the harness worker, against the real worker and real candidate children:
// jobs end with typed results, a hung worker is killed at the job deadline and replaced, a
// killed worker is replaced, and the C++ and Python rewards agree.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/harness/harness_process.hpp"
#include "actors/process/subprocess.hpp"
#include "messages/reward.hpp"
#include "tests/actors/harness/built_candidate.hpp"

namespace cuda_agent::harness {
namespace {

namespace fs = std::filesystem;

// Processes whose working directory is `dir` (candidate children run in their solution dir).
int processes_in(const fs::path& dir) {
  int count = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const auto name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code link_ec;
    if (fs::read_symlink(it->path() / "cwd", link_ec) == dir) ++count;
  }
  return count;
}

// The shared test settings (built_candidate.hpp); the jobs carry quick_judging().
harness_settings test_settings() { return candidate_harness_settings(); }

verify_job verify_of(const built_candidate& c) { return verify_job_for(c, "v"); }

TEST(HarnessProcess, VerifiesHonestAndNamesACheat) {
  harness_process worker{test_settings(), "cpu"};
  const auto honest = build("honest_elementwise");
  const auto honest_result = worker.verify(verify_of(honest));
  EXPECT_TRUE(honest_result.correct) << honest_result.error;
  EXPECT_TRUE(honest_result.violations.empty());

  const auto cheat = build("binding_aten");
  const auto cheat_result = worker.verify(verify_of(cheat));
  EXPECT_FALSE(cheat_result.correct);
  ASSERT_EQ(cheat_result.violations.size(), 1u);
  EXPECT_EQ(cheat_result.violations[0], "torch_compute_in_binding");
  EXPECT_EQ(worker.restarts(), 0);
}

TEST(HarnessProcess, KilledWorkerIsReplacedAndTheNextJobRuns) {
  harness_process worker{test_settings(), "cpu"};
  const auto honest = build("honest_elementwise");
  worker.ping();
  const pid_t first = worker.worker_pid();
  ASSERT_GT(first, 0);
  ASSERT_EQ(::kill(first, SIGKILL), 0);
  const auto lost = worker.verify(verify_of(honest));  // finds the worker dead
  EXPECT_FALSE(lost.correct);
  EXPECT_NE(lost.error.find("harness worker"), std::string::npos) << lost.error;
  const auto next = worker.verify(verify_of(honest));
  EXPECT_TRUE(next.correct) << next.error;
  EXPECT_NE(worker.worker_pid(), first);
  EXPECT_EQ(worker.restarts(), 1);
}

TEST(HarnessProcess, HungJobIsKilledAtItsDeadlineAndTheWorkerReplaced) {
  auto settings = test_settings();
  settings.job_timeout = std::chrono::seconds{30};  // the C++ deadline fires first
  harness_process worker{settings, "cpu"};
  const auto looping = build("fault_infinite_loop");
  const auto started = std::chrono::steady_clock::now();
  auto job = evaluate_job_for(looping, "hang");
  job.judging.candidate_timeout_s = 300;  // the worker would wait longer
  const auto hung = worker.evaluate(job);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(hung.record.reward, -1);
  EXPECT_NE(hung.record.error.find("did not answer within 30000 ms"), std::string::npos) << hung.record.error;
  EXPECT_LT(took, std::chrono::seconds{60});
  // The looping candidate child dies with its worker; an orphan would spin on and hold the
  // worker's output pipe open (and with it whatever reads it, CTest included).
  const auto dir = fs::canonical(looping.solution);
  for (int i = 0; i < 50 && processes_in(dir) > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  EXPECT_EQ(processes_in(dir), 0) << "a candidate child outlived its killed worker";
  const auto next = worker.verify(verify_of(build("honest_elementwise")));
  EXPECT_TRUE(next.correct) << next.error;
  EXPECT_EQ(worker.restarts(), 1);
}

TEST(HarnessProcess, EvaluateGivesTimesAndTheCppReward) {
  harness_process worker{test_settings(), "cpu"};
  const auto honest = build("honest_elementwise");
  const auto result = worker.evaluate(evaluate_job_for(honest, "e"));
  EXPECT_TRUE(result.record.correct) << result.record.error;
  EXPECT_GT(result.record.t_new_ms, 0);
  EXPECT_GT(result.record.t_eager_ms, 0);
  EXPECT_GT(result.record.t_compile_ms, 0);
  EXPECT_EQ(result.profile.candidate.runs, 3);
  // Speed earns a milestone only where it was measured steadily.
  const auto& timing = result.record.timing;
  EXPECT_GE(timing.measurements, 1);
  EXPECT_TRUE(timing.baseline == "fresh" || timing.baseline == "cached" || timing.baseline == "remeasured")
      << timing.baseline;
  EXPECT_EQ(result.record.reward, milestone_reward(true, timing.reliable ? result.record.t_new_ms : not_measured,
                                                   result.record.t_eager_ms, result.record.t_compile_ms));
  EXPECT_GE(result.record.reward, 1);
  // The worker says where the job's time went.
  std::vector<std::string> phases;
  for (const auto& [name, ms] : result.phases_ms) phases.push_back(name);
  EXPECT_NE(std::find(phases.begin(), phases.end(), "timed_runs"), phases.end());
}

// The slot's settings say nothing about judging: each job is judged by the parameters it carries,
// one worker taking jobs with different ones in turn.
TEST(HarnessProcess, EachJobIsJudgedByItsOwnParameters) {
  harness_process worker{test_settings(), "cpu"};
  const auto honest = build("honest_elementwise");
  for (const int32_t runs : {3, 5, 3}) {
    auto job = evaluate_job_for(honest, "runs-" + std::to_string(runs));
    job.judging.timed_runs = runs;
    const auto result = worker.evaluate(job);
    EXPECT_TRUE(result.record.correct) << result.record.error;
    EXPECT_EQ(result.profile.candidate.runs, runs);
  }
  // Tolerances too: the honest matmul sums in another order than torch's, so it passes the
  // default tolerances and fails exact equality (atol = rtol = 0).
  const auto linear = build("honest_linear");
  EXPECT_TRUE(worker.verify(verify_job_for(linear, "tolerant")).correct);
  auto exact = verify_job_for(linear, "exact");
  exact.judging.atol = exact.judging.rtol = 0;
  const auto verdict = worker.verify(exact);
  EXPECT_FALSE(verdict.correct);
  EXPECT_NE(verdict.error.find("atol=0.0, rtol=0.0"), std::string::npos) << verdict.error;
}

// Tasks broken in each way a task can be, written beside the honest candidate's: the text of
// tasks/elementwise.py with one part replaced. `cause` is what the error must name.
struct broken_task {
  const char* name;
  const char* replace;  // a line of elementwise.py
  const char* with;
  const char* cause;
};
constexpr broken_task kBrokenTasks[] = {
    {"no_import", "import torch.nn as nn", "import torch.nn as nn\nimport no_such_module_here", "no_such_module_here"},
    {"no_get_inputs", "def get_inputs():", "def not_get_inputs():", "defines no get_inputs"},
    {"inputs_raise", "    return [torch.randn(256, 1024)]", "    raise RuntimeError('inputs broke')", "inputs broke"},
    {"init_raises", "        super().__init__()", "        raise ValueError('init broke')", "init broke"},
    {"forward_raises", "        return torch.relu(x * 2.0 + 1.0)", "        raise RuntimeError('forward broke')",
     "forward broke"},
};

fs::path write_broken_task(const fs::path& dir, const broken_task& b) {
  std::ifstream in{kSuite / "tasks" / "elementwise.py"};
  std::string text{std::istreambuf_iterator<char>{in}, {}};
  const auto at = text.find(b.replace);
  EXPECT_NE(at, std::string::npos) << b.replace;
  text.replace(at, std::string{b.replace}.size(), b.with);
  const fs::path path = dir / (std::string{b.name} + ".py");
  std::ofstream{path} << text;
  return path;
}

TEST(HarnessProcess, ABrokenTaskIsATaskErrorAndNeverTheCandidatesReward) {
  harness_process worker{test_settings(), "cpu"};
  const auto honest = build("honest_elementwise");
  worker.check_task(honest.task.string(), "cpu", /*reference=*/true);  // a sound task passes
  auto job = evaluate_job_for(honest, "broken");
  for (const auto& b : kBrokenTasks) {
    SCOPED_TRACE(b.name);
    job.task_path = write_broken_task(honest.solution.parent_path(), b).string();
    try {
      worker.check_task(job.task_path, "cpu", /*reference=*/true);
      ADD_FAILURE() << "check_task accepted it";
    } catch (const task_error& e) {
      EXPECT_NE(std::string{e.what()}.find(b.cause), std::string::npos) << e.what();
    }
    // Loading alone finds the tasks that do not import or lack a name, not the others.
    const bool load_fails = std::string{b.name} == "no_import" || std::string{b.name} == "no_get_inputs";
    try {
      worker.check_task(job.task_path, "cpu", /*reference=*/false);
      EXPECT_FALSE(load_fails);
    } catch (const task_error&) {
      EXPECT_TRUE(load_fails);
    }
    // A job on it, with an honest candidate: a task_error, not a reward of -1 for the candidate.
    EXPECT_THROW(worker.evaluate(job), task_error);
  }
  EXPECT_THROW(worker.verify(verify_of({honest.solution, job.task_path, honest.module})), task_error);
  EXPECT_EQ(worker.restarts(), 0);  // the worker lives on, and its next job is judged
  const auto next = worker.verify(verify_of(honest));
  EXPECT_TRUE(next.correct) << next.error;
}

TEST(HarnessProcess, PythonRewardAgreesWithMilestoneReward) {
  const double cases[][3] = {{1, 2, 2}, {1, 2, 1}, {95, 100, 100}, {94, 100, 100}, {1, 1, 1},
                             {2, 1, 1}, {1, 0, 0}, {NAN, 1, 1},   {0.5, 1, 0.52}, {0.9, 1, 0.9}};
  std::string script = "import math, sys\nfrom harness.reward import milestone_reward\nnan = math.nan\n";
  std::string expected;
  for (const auto& c : cases) {
    for (bool correct : {true, false}) {
      script += "print(milestone_reward(" + std::string{correct ? "True" : "False"} + ", " +
                (std::isnan(c[0]) ? std::string{"nan"} : std::to_string(c[0])) + ", " + std::to_string(c[1]) +
                ", " + std::to_string(c[2]) + "))\n";
      expected += std::to_string(milestone_reward(correct, c[0], c[1], c[2])) + "\n";
    }
  }
  subprocess_options options;
  options.extra_env["PYTHONPATH"] = (fs::path{CUDA_AGENT_SOURCE_DIR} / "skills").string();
  const auto result = run_subprocess({CUDA_AGENT_PYTHON, "-c", script}, options);
  ASSERT_TRUE(result.ok()) << result.err;
  EXPECT_EQ(result.out, expected);
}

}  // namespace
}  // namespace cuda_agent::harness

namespace cuda_agent::harness {
namespace {

// `cuda-agent check --json` end to end: one line of JSON on standard output, exit status 0
// whatever the candidate did.
// With prebuilt, the module from the tests' build script is passed with --module; otherwise
// `check` builds the solution itself with build_solution, as everywhere else.
nlohmann::json check_json_of(const built_candidate& c, bool prebuilt) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  if (!binary) throw std::runtime_error{"CUDA_AGENT_BINARY is not set (run through ctest)"};
  subprocess_options options;
  options.timeout = std::chrono::minutes{10};
  const fs::path baselines = fs::temp_directory_path() / "cuda-agent-harness-process-test" / "baselines";
  std::vector<std::string> argv{binary,
                                "--set", std::string{"harness.python="} + CUDA_AGENT_PYTHON,
                                "--set", "harness.timed_runs=3",
                                "--set", "harness.warmup_runs=1",
                                "--set", "harness.cpu_threads=1",
                                "--set", "harness.baseline_cache_dir=" + baselines.string(),
                                "--set", "build.cache_dir=" + (baselines.parent_path() / "build-cache").string(),
                                "check", "--task", c.task.string(), "--solution", c.solution.string(), "--json"};
  if (prebuilt) argv.insert(argv.end(), {"--module", c.module.string()});
  const auto result = run_subprocess(argv, options);
  EXPECT_TRUE(result.ok()) << result.describe() << "\n" << result.err;
  EXPECT_EQ(std::count(result.out.begin(), result.out.end(), '\n'), 1) << result.out;
  return nlohmann::json::parse(result.out);
}

TEST(CheckCommand, HonestCandidateGetsAPositiveReward) {
  const auto json = check_json_of(build("honest_elementwise"), /*prebuilt=*/false);
  EXPECT_EQ(json["compiled"], true);
  EXPECT_EQ(json["correct"], true);
  EXPECT_TRUE(json["violations"].empty());
  EXPECT_GE(json["reward"].get<int>(), 1);
  EXPECT_GT(json["t_new_ms"].get<double>(), 0);
  EXPECT_GT(json["speedup_compile"].get<double>(), 0);
  EXPECT_TRUE(json["error"].is_null());
}

TEST(CheckCommand, CheatGetsMinusOneWithTheTrickNamed) {
  const auto json = check_json_of(build("output_memory_reuse"), /*prebuilt=*/true);
  EXPECT_EQ(json["reward"], -1);
  EXPECT_EQ(json["correct"], false);
  EXPECT_NE(std::find(json["violations"].begin(), json["violations"].end(), "output_memory_reuse"),
            json["violations"].end())
      << json.dump();
  EXPECT_TRUE(json["t_new_ms"].is_null());
  EXPECT_TRUE(json["error"].is_string());
}

TEST(CheckCommand, ABrokenTaskIsAOneLineTaskErrorFoundBeforeAnythingIsBuilt) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  ASSERT_NE(binary, nullptr);
  const auto honest = build("honest_elementwise");
  const fs::path cache = honest.solution.parent_path() / "check-build-cache";
  for (const char* name : {"no_import", "inputs_raise", "forward_raises"}) {
    SCOPED_TRACE(name);
    const auto& b = *std::find_if(std::begin(kBrokenTasks), std::end(kBrokenTasks),
                                  [&](const broken_task& t) { return std::string{t.name} == name; });
    const fs::path task = write_broken_task(honest.solution.parent_path(), b);
    const auto result = run_subprocess({binary, "--set", std::string{"harness.python="} + CUDA_AGENT_PYTHON,
                                        "--set", "build.cache_dir=" + cache.string(), "check", "--task",
                                        task.string(), "--solution", honest.solution.string(), "--json"});
    EXPECT_EQ(result.exit_code, 3) << result.err;
    EXPECT_TRUE(result.out.empty()) << result.out;  // no reward record
    // One error line, the last (info lines such as the held timing core may come before it).
    const auto error_at = result.err.find("cuda-agent: error: ");
    ASSERT_NE(error_at, std::string::npos) << result.err;
    const std::string error = result.err.substr(error_at);
    EXPECT_EQ(std::count(error.begin(), error.end(), '\n'), 1) << result.err;
    EXPECT_NE(error.find(b.cause), std::string::npos) << result.err;
    EXPECT_NE(error.find("fix the task"), std::string::npos) << result.err;
    EXPECT_FALSE(fs::exists(cache)) << "the solution was built for a broken task";
  }
}

TEST(CheckCommand, MissingTaskIsAUsageError) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  ASSERT_NE(binary, nullptr);
  const auto result = run_subprocess({binary, "check", "--task", "/nonexistent/model.py", "--solution", "/tmp"});
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.err.find("--task /nonexistent/model.py is not a file"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace cuda_agent::harness
