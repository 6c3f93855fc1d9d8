// `cuda-agent build DIR` builds a solution into the module `cuda_extension` (kernels/build/), and
// `cuda-agent bench build DIR` measures that build against torch.utils.cpp_extension.load, and
// `cuda-agent bench build --kernelbench-file MODEL_NEW.py` a KernelBench-format candidate's
// converted build against load_inline of the file itself.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "actors/process/subprocess.hpp"
#include "kernels/build/build.hpp"
#include "kernels/build/toolchain.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/kernelbench_candidate.hpp"
#include "tools/cli/scratch_dir.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;

struct build_options {
  std::string solution;
  std::string device = "cpu";
  std::string arch;
  bool json = false;
  bool skip_reference = false;
  std::string kernelbench_file;  // bench build: a KernelBench-format candidate instead of DIR
};

void add_solution_options(CLI::App& command, build_options& options) {
  command.add_option("solution", options.solution, "Solution directory (kernels/*.cpp|cu, ...)")
      ->type_name("DIR");
  command.add_option("--device", options.device, "Build for cpu or cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  command.add_option("--arch", options.arch, "CUDA architecture, e.g. sm_90 (default: the GPU's)");
}

build::build_request make_request(const build_options& options) {
  if (options.solution.empty()) throw usage_error("give the solution directory to build");
  if (!fs::is_directory(options.solution))
    throw usage_error(fmt::format("solution directory {} does not exist", options.solution));
  if (!fs::is_directory(fs::path(options.solution) / "kernels"))
    throw usage_error(fmt::format(
        "{} has no kernels/ directory (a solution holds kernels/*.cpp or kernels/*.cu)",
        options.solution));
  build::build_request request;
  request.solution_dir = options.solution;
  request.device = options.device;
  request.arch = options.arch;
  return request;
}

nlohmann::json to_json(const build::build_result& r) {
  return {{"ok", r.ok},
          {"module_path", r.module_path.string()},
          {"diagnostics", r.diagnostics},
          {"log_path", r.log_path.string()},
          {"cache_hit", r.cache_hit},
          {"timed_out", r.timed_out},
          {"duration_ms", r.duration_ms},
          {"compiled_files", r.compiled_files},
          {"cached_objects", r.cached_objects},
          {"error", r.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.error)}};
}

int run_build(const invocation& inv, const build_options& options) {
  const auto settings = build::build_settings::from(inv.config);
  const auto result = build::build_solution(settings, make_request(options));
  if (options.json) {
    std::cout << to_json(result).dump() << "\n";
    return 0;
  }
  if (!result.error.empty()) throw std::runtime_error(result.error);
  if (!result.ok) {
    std::cout << result.diagnostics;
    spdlog::error("build failed in {:.0f} ms; full log: {}", result.duration_ms,
                  result.log_path.string());
    return 1;
  }
  std::cout << result.module_path.string() << "\n";
  spdlog::info("built in {:.0f} ms ({}; {} files compiled, {} objects from the cache)",
               result.duration_ms, result.cache_hit ? "cache hit" : "cache miss",
               result.compiled_files, result.cached_objects);
  return 0;
}

// --- bench build --------------------------------------------------------------------------------

// A copy of the solution whose sources the cache has never seen: a comment with a fresh nonce
// at the end of every source and header changes every digest, not the code.
fs::path unseen_copy(const fs::path& solution, const fs::path& into) {
  const std::string nonce = fmt::format("{}-{}", ::getpid(),
                                        std::chrono::steady_clock::now().time_since_epoch().count());
  fs::copy(solution, into, fs::copy_options::recursive);
  for (const auto& entry : fs::recursive_directory_iterator(into / "kernels")) {
    if (!entry.is_regular_file()) continue;
    std::ofstream(entry.path(), std::ios::app) << "\n// bench nonce " << nonce << "\n";
  }
  return into;
}

double seconds_of(const build::build_result& r) { return r.duration_ms / 1000.0; }

// "              steps: kernels/add.cu 1.42 s, kernels/add_binding.cpp 3.10 s, link 0.52 s"
// (sources compile in parallel; the link follows them).
std::string steps_line(const build::build_result& r) {
  std::string line = "              steps:";
  for (size_t i = 0; i < r.step_ms.size(); ++i)
    line += fmt::format("{} {} {:.2f} s", i ? "," : "", r.step_ms[i].first, r.step_ms[i].second / 1000.0);
  return line + "\n";
}

build::build_result checked_build(const build::build_settings& settings,
                                  const build::build_request& request, const char* what) {
  auto result = build::build_solution(settings, request);
  if (!result.error.empty()) throw std::runtime_error(fmt::format("{} build: {}", what, result.error));
  if (!result.ok)
    throw std::runtime_error(fmt::format("{} build failed (log {}):\n{}", what,
                                         result.log_path.string(), result.diagnostics));
  return result;
}

// How a reference build runs: a fresh build dir, the bench's job count, and the architecture
// torch would detect on this GPU ("sm_90" -> "9.0"), also where none is seen.
subprocess_options reference_options(const std::string& device, const std::string& arch, int jobs) {
  subprocess_options options;
  options.timeout = std::chrono::minutes{30};
  if (jobs > 0) options.extra_env["MAX_JOBS"] = std::to_string(jobs);
  if (device == "cuda") {
    const std::string digits = arch.substr(3);
    options.extra_env["TORCH_CUDA_ARCH_LIST"] =
        digits.substr(0, digits.size() - 1) + "." + digits.substr(digits.size() - 1);
  }
  return options;
}

double reference_seconds(const subprocess_result& result, const char* what) {
  const auto at = result.out.find("reference_s=");
  if (!result.ok() || at == std::string::npos)
    throw std::runtime_error(std::string{"reference build ("} + what + ") failed: " +
                             result.describe() + "\n" + result.err.substr(0, 4000));
  return std::stod(result.out.substr(at + 12));
}

// The reference path: what CUDA Agent's workdir does on every attempt, with a fresh build dir.
constexpr const char* kReferenceScript = R"py(
import glob, os, sys, time
import torch
from torch.utils.cpp_extension import load
solution, build_dir, device = sys.argv[1], sys.argv[2], sys.argv[3]
sources = [os.path.join(solution, "binding.cpp")] + sorted(
    glob.glob(os.path.join(solution, "kernels", "*.cpp")) + glob.glob(os.path.join(solution, "kernels", "*.cu")))
cuda = device == "cuda"
start = time.perf_counter()
module = load(name="cuda_extension", sources=sources, build_directory=build_dir,
              extra_include_paths=[solution], extra_cflags=["-O3"] + ([] if cuda else ["-fopenmp"]),
              extra_cuda_cflags=["-O3"], extra_ldflags=["-lcublas"] if cuda else ["-fopenmp"],
              verbose=False)
print("reference_s=%.3f" % (time.perf_counter() - start))
)py";

double run_reference(const std::string& python, const fs::path& solution, const fs::path& build_dir,
                     const std::string& device, const std::string& arch, int jobs) {
  fs::create_directories(build_dir);
  const auto result = run_subprocess({python, "-c", kReferenceScript, solution.string(), build_dir.string(), device},
                                     reference_options(device, arch, jobs));
  return reference_seconds(result, "torch.utils.cpp_extension.load");
}

// A KernelBench-format candidate's own build: the file run as KernelBench runs it, timing what
// its load_inline calls take, with a fresh extensions dir.
constexpr const char* kLoadInlineScript = R"py(
import runpy, sys, time
import torch
import torch.utils.cpp_extension as ext
real, spent = ext.load_inline, [0.0]
def timed(*args, **kwargs):
    start = time.perf_counter()
    try:
        return real(*args, **kwargs)
    finally:
        spent[0] += time.perf_counter() - start
ext.load_inline = timed
runpy.run_path(sys.argv[1], run_name="kernelbench_candidate")
print("reference_s=%.3f" % spent[0])
)py";

double run_load_inline(const std::string& python, const fs::path& file, const fs::path& build_dir,
                       const std::string& device, const std::string& arch, int jobs) {
  fs::create_directories(build_dir);
  auto options = reference_options(device, arch, jobs);
  options.extra_env["TORCH_EXTENSIONS_DIR"] = build_dir.string();
  return reference_seconds(run_subprocess({python, "-c", kLoadInlineScript, file.string()}, options),
                           "load_inline");
}

// Imports the module in the harness python and lists its functions: proof the build is real.
std::string import_check(const std::string& python, const fs::path& module_path) {
  subprocess_options options;
  options.timeout = std::chrono::minutes{2};
  const auto result = run_subprocess(
      {python, "-c",
       "import sys, torch; sys.path.insert(0, sys.argv[1]); import cuda_extension as m; "
       "print(','.join(sorted(n for n in dir(m) if not n.startswith('_'))))",
       module_path.parent_path().string()},
      options);
  if (!result.ok())
    throw std::runtime_error("the built module does not import: " + result.err.substr(0, 2000));
  std::string names = result.out;
  while (!names.empty() && names.back() == '\n') names.pop_back();
  return names;
}

int run_bench_build(const invocation& inv, build_options options) {
  auto settings = build::build_settings::from(inv.config);
  const scratch_dir scratch_space{"cuda-agent-bench-build"};
  const fs::path& scratch = scratch_space.path();
  if (!options.kernelbench_file.empty()) {
    if (!options.solution.empty())
      throw usage_error("give one candidate: a solution DIR or --kernelbench-file MODEL_NEW.py");
    const auto converted =
        convert_kernelbench_candidate(inv.config, options.kernelbench_file, scratch / "converted");
    if (!converted.value("ok", false))
      throw usage_error(converted.value("error", std::string{}) + " (the candidate is not converted)");
    options.solution = (scratch / "converted").string();
  }
  auto request = make_request(options);
  if (request.device == "cuda" && request.arch.empty()) request.arch = build::detect_gpu_arch();
  settings.cache_dir = scratch / "cache";  // empty: nothing of this toolchain is cached yet

  std::cout << fmt::format("solution: {} (device {}{}), jobs {}, sandbox {}\n",
                           options.kernelbench_file.empty() ? options.solution
                                                            : options.kernelbench_file + " (KernelBench format, converted)",
                           options.device, request.arch.empty() ? "" : " " + request.arch,
                           settings.jobs, settings.sandbox);
  request.solution_dir = unseen_copy(options.solution, scratch / "first");
  const auto first = checked_build(settings, request, "first");
  request.solution_dir = unseen_copy(options.solution, scratch / "cold");
  const auto cold = checked_build(settings, request, "cold");
  const auto warm = checked_build(settings, request, "warm");
  if (!warm.cache_hit) throw std::runtime_error("the unchanged rebuild was not a cache hit");
  const std::string functions = import_check(settings.python, cold.module_path);
  const auto& tc = build::probe_toolchain(settings.python, settings.cxx, settings.binding_cxx,
                                          settings.nvcc, request.device == "cuda");
  std::cout << fmt::format("compilers: {} ({}) for bindings, {} for the rest{}\n",
                           tc.binding_cxx.string(), tc.binding_cxx_version, tc.cxx.string(),
                           tc.nvcc.empty() ? "" : " and " + tc.nvcc.string());

  std::cout << fmt::format(
      "first build   {:8.2f} s  empty cache: per-toolchain artifacts (precompiled slim header, "
      "binding.cpp) built too; "
      "{} files compiled\n",
      seconds_of(first), first.compiled_files);
  std::cout << steps_line(first);
  std::cout << fmt::format(
      "cold build    {:8.2f} s  solution never seen; per-toolchain objects cached; "
      "{} files compiled, {} cached\n",
      seconds_of(cold), cold.compiled_files, cold.cached_objects);
  std::cout << steps_line(cold);
  std::cout << fmt::format(
      "warm build    {:8.4f} s  unchanged inputs: cache hit (in-process, toolchain already probed)\n",
      seconds_of(warm));
  std::cout << fmt::format("module imports; functions: {}\n", functions);
  if (options.skip_reference) return 0;

  // A reference build's line and its ratios to the three builds above.
  const auto print_reference = [&](const std::string& name, double reference, const std::string& how) {
    std::cout << fmt::format("{:<13} {:8.2f} s  {} (ninja{})\n", name, reference, how,
                             settings.jobs > 0 ? fmt::format(", MAX_JOBS={}", settings.jobs) : "");
    std::cout << fmt::format("ratio         {0}/cold {1:.1f}x, {0}/first {2:.1f}x, {0}/warm {3:.0f}x\n", name,
                             reference / seconds_of(cold), reference / seconds_of(first),
                             reference / seconds_of(warm));
  };
  if (!options.kernelbench_file.empty()) {
    // The candidate's own way: its load_inline calls, as KernelBench runs it.
    const double reference = run_load_inline(settings.python, fs::absolute(options.kernelbench_file),
                                             scratch / "load-inline-build", options.device, request.arch,
                                             settings.jobs);
    print_reference("load_inline", reference, "the candidate's load_inline calls, fresh TORCH_EXTENSIONS_DIR");
    return 0;
  }

  // The reference compiles the same files, with the system's binding.cpp beside them.
  const fs::path reference_src = unseen_copy(options.solution, scratch / "reference");
  std::ofstream(reference_src / "binding.cpp", std::ios::trunc) << build::template_binding_cpp();
  std::ofstream(reference_src / "binding_registry.h", std::ios::trunc)
      << build::template_binding_registry_h();
  const double reference =
      run_reference(settings.python, reference_src, scratch / "reference-build", options.device,
                    request.arch, settings.jobs);
  print_reference("reference", reference, "torch.utils.cpp_extension.load, fresh build dir");
  return 0;
}

}  // namespace

void add_build_command(CLI::App& app, invocation& inv) {
  auto options = std::make_shared<build_options>();
  auto* command = app.add_subcommand(
      "build", "Build a solution directory into the module cuda_extension; prints its path");
  add_solution_options(*command, *options);
  command->add_flag("--json", options->json, "Print the build result as one JSON line");
  command->callback([&inv, options] { inv.action = [&inv, options] { return run_build(inv, *options); }; });
}

void add_bench_build_command(CLI::App& bench, invocation& inv) {
  auto options = std::make_shared<build_options>();
  auto* command = bench.add_subcommand(
      "build", "Cold, warm and reference (torch.utils.cpp_extension.load) builds of one solution");
  add_solution_options(*command, *options);
  command->add_flag("--skip-reference", options->skip_reference,
                    "Leave out the reference build (it takes a minute or more)");
  command->add_option("--kernelbench-file", options->kernelbench_file,
                      "Instead of DIR: a KernelBench-format model_new.py, converted, against its own load_inline");
  command->callback(
      [&inv, options] { inv.action = [&inv, options] { return run_bench_build(inv, *options); }; });
}

}  // namespace cuda_agent::cli
