// Building a solution (CUDA Agent's agent_workdir layout, DESIGN.md) into the Python module
// `cuda_extension`.
//
// What makes it fast: every object file is cached under the digest of its source, the solution's
// headers, its flags and the toolchain, so the system's binding.cpp is compiled once per
// toolchain and an unchanged kernel is never compiled twice; a module whose inputs did not
// change is found by its digest without compiling anything. Independent files compile in
// parallel; binding files get a slim <torch/extension.h>, precompiled once per toolchain, and
// -O0 (kernels keep -O3); CUDA code is generated for the one architecture of the GPU at hand.
//
// What makes it safe: the solution's files are copied into a staging directory (with the
// system's binding.cpp and binding_registry.h over whatever the solution holds under those
// names) and every compiler runs sandboxed (sandbox.hpp) under one wall-clock limit.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "config/settings.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::build {

struct build_settings {
  std::filesystem::path cache_dir = "runs/build-cache";
  int jobs = 0;  // 0: one per core
  std::chrono::milliseconds timeout{std::chrono::seconds{300}};
  int64_t memory_mb = 16384;
  int64_t max_file_mb = 2048;
  int64_t max_output_kb = 1024;
  int64_t diagnostics_chars = 4000;
  std::string sandbox = "bwrap";  // "bwrap" | "none"
  std::string bwrap = "bwrap";
  std::string cxx = "g++";
  std::string binding_cxx = "auto";  // auto: clang++ where found, else cxx
  std::string nvcc;  // empty: $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc
  std::string kernel_flags = "-O3";
  std::string binding_flags = "-O0";
  std::string python = "python3";  // harness.python: whose torch the module links against

  static build_settings from(const settings& config);  // the [build] section and harness.python
};

struct build_request {
  std::filesystem::path solution_dir;
  std::string device = "cpu";  // "cpu" | "cuda"
  std::string arch;            // "sm_90"; empty: detect the GPU (cuda) / unused (cpu)
};

struct build_result {
  bool ok = false;                    // the candidate compiled and linked
  std::filesystem::path module_path;  // the built .so; `import cuda_extension` works when its
                                      // directory is on sys.path (file named cuda_extension<EXT_SUFFIX>)
  std::string diagnostics;            // condensed compiler errors for the agent (empty when ok)
  std::filesystem::path log_path;     // full compiler log on disk
  bool cache_hit = false;
  double duration_ms = 0;
  std::string error;                  // infrastructure failure (not the candidate's fault); empty if none
  bool timed_out = false;             // a compiler hit the wall-clock limit (reported in diagnostics)
  int compiled_files = 0;             // compiler runs this build made (0 on a module cache hit)
  int cached_objects = 0;             // objects taken from the cache
  // What each compiler run of this build took, in order: the precompiled header, each source
  // compiled (independent ones in parallel), "link". Empty on a module cache hit.
  std::vector<std::pair<std::string, double>> step_ms;
};

build_result build_solution(const build_settings& settings, const build_request& request);

// The compiler pool's answer for a compile_job.
compile_result to_compile_result(const std::string& job_id, const build_result& result);

// The system's copies of the workdir template files (kernels/workdir_template/).
const std::string& template_binding_cpp();
const std::string& template_binding_registry_h();

}  // namespace cuda_agent::build
