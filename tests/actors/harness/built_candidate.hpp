// Candidates of tests/skills/harness/candidates assembled into solution directories and built, for
// the C++ tests that run them through the real harness worker (harness_process, the GPU pool).
#pragma once

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "actors/harness/harness_process.hpp"
#include "actors/process/subprocess.hpp"

namespace cuda_agent::harness {

namespace fs = std::filesystem;

// The Python harness suite's folder: its candidates, tasks, kernels and build script are shared
// with the C++ tests.
inline const fs::path kSuite = fs::path{CUDA_AGENT_SOURCE_DIR} / "tests" / "skills" / "harness";

// Assembles tests/skills/harness/candidates/NAME into a solution directory and builds it with the
// tests' build script (objects cached by content, shared with the pytest suite).
struct built_candidate {
  fs::path solution;
  fs::path task;
  fs::path module;
};

// One root per test process, removed at its exit: CTest runs these tests in parallel, and one
// process replacing a solution directory under another's running candidate fails that candidate.
inline const fs::path& solutions_root() {
  static const struct owned_dir {
    fs::path path = fs::temp_directory_path() /
                    ("cuda-agent-harness-process-test-" + std::to_string(::getpid()));
    ~owned_dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } root;
  return root.path;
}

inline built_candidate build(const std::string& name) {
  const fs::path& root = solutions_root();
  const fs::path src = kSuite / "candidates" / name;
  std::ifstream meta_file{src / "candidate.json"};
  const auto meta = nlohmann::json::parse(meta_file);
  built_candidate c;
  c.solution = root / name;
  fs::remove_all(c.solution);
  fs::create_directories(c.solution / "kernels");
  c.task = c.solution / "model.py";
  fs::copy_file(kSuite / "tasks" / (meta["task"].get<std::string>() + ".py"), c.task);
  fs::copy_file(src / "model_new.py", c.solution / "model_new.py");
  for (const auto& k : meta["kernels"])
    fs::copy_file(kSuite / "kernels" / k.get<std::string>(), c.solution / "kernels" / k.get<std::string>());
  subprocess_options options;
  options.timeout = std::chrono::minutes{10};
  const auto result = run_subprocess({CUDA_AGENT_PYTHON, (kSuite / "build_candidate.py").string(),
                                      c.solution.string(), "/tmp/cuda-agent-harness-test-cache"},
                                     options);
  EXPECT_TRUE(result.ok()) << result.describe() << "\n" << result.err;
  std::string out = result.out;
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  c.module = out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  return c;
}

// A verify job on the CPU for the built candidate.
// Short timing runs on one thread: what the tests judge candidates by.
inline judging_parameters quick_judging() {
  judging_parameters j;
  j.warmup_runs = 1;
  j.timed_runs = 3;
  j.cpu_threads = 1;
  j.candidate_timeout_s = 60;
  return j;
}

inline verify_job verify_job_for(const built_candidate& c, std::string job_id,
                                 judging_parameters judging = quick_judging()) {
  verify_job job;
  job.job_id = std::move(job_id);
  job.task_path = c.task.string();
  job.solution_dir = c.solution.string();
  job.module_path = c.module.string();
  job.device = "cpu";
  job.judging = std::move(judging);
  return job;
}

inline evaluate_job evaluate_job_for(const built_candidate& c, std::string job_id,
                                     judging_parameters judging = quick_judging()) {
  return {std::move(job_id), "", c.task.string(), c.solution.string(), c.module.string(), "cpu", std::move(judging)};
}

// The harness as the tests run it: the build's Python, the source tree's skills, a baseline cache
// of the tests' own.
inline harness_settings candidate_harness_settings() {
  harness_settings s;
  s.python = CUDA_AGENT_PYTHON;
  s.skills_dir = fs::path{CUDA_AGENT_SOURCE_DIR} / "skills";
  s.baseline_cache_dir = fs::temp_directory_path() / "cuda-agent-harness-process-test" / "baselines";
  return s;
}

}  // namespace cuda_agent::harness
