// `cuda-agent doctor`: checks that this installation has what the system needs, running each
// piece for real (a LibTorch tensor operation, the harness interpreter, a kernel on each GPU).
#include <iostream>

#include <caf/config.hpp>

#include "actors/process/subprocess.hpp"
#include "tools/cli/commands.hpp"

#ifdef CUDA_AGENT_HAVE_TORCH
#include "tools/cli/libtorch_check.hpp"
#endif
#ifdef CUDA_AGENT_HAVE_CUDA
#include "kernels/device_query.hpp"
#endif

namespace cuda_agent::cli {
namespace {

class checklist {
 public:
  void ok(const std::string& what) { std::cout << "  ok    " << what << "\n"; }
  void info(const std::string& what) { std::cout << "  --    " << what << "\n"; }
  void fail(const std::string& what) {
    std::cout << "  FAIL  " << what << "\n";
    ++failures_;
  }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

int run_doctor(const settings& config) {
  checklist check;
  std::cout << "cuda-agent " << CUDA_AGENT_VERSION << "\n";
  check.ok("CAF " + std::to_string(CAF_MAJOR_VERSION) + "." + std::to_string(CAF_MINOR_VERSION) +
           "." + std::to_string(CAF_PATCH_VERSION));

  std::string linked_torch;
#ifdef CUDA_AGENT_HAVE_TORCH
  linked_torch = libtorch_version().substr(0, libtorch_version().find('+'));
  if (const auto error = libtorch_smoke_test(); error.empty())
    check.ok("LibTorch " + linked_torch + ": a tensor computation ran");
  else
    check.fail("LibTorch " + linked_torch + ": " + error);
#else
  check.info("LibTorch: not built (-DCUDA_AGENT_WITH_TORCH=OFF)");
#endif

  const auto& python = config.get_string("harness.python");
  try {
    subprocess_options options;
    options.timeout = std::chrono::seconds{120};
    const auto r = run_subprocess(
        {python, "-c",
         "import sys, torch; print(torch.__version__.split('+')[0], sys.version.split()[0])"},
        options);
    if (!r.ok()) {
      check.fail("harness.python '" + python + "' cannot import torch (" + r.describe() + "): " +
                 first_line(r.err) + "; run tools/setup.sh or set harness.python");
    } else {
      const auto torch_version = r.out.substr(0, r.out.find(' '));
      const auto summary = "harness.python '" + python + "': torch " + torch_version +
                           ", Python " + first_line(r.out.substr(r.out.find(' ') + 1));
      if (!linked_torch.empty() && torch_version != linked_torch)
        check.fail(summary + " differs from LibTorch " + linked_torch);
      else
        check.ok(summary);
    }
  } catch (const std::exception& e) {
    check.fail("harness.python '" + python + "': " + e.what());
  }

#ifdef CUDA_AGENT_HAVE_CUDA
  const auto gpus = query_gpus();
  const auto nccl = nccl_version();
  check.ok("CUDA runtime " + std::to_string(gpus.runtime_version / 1000) + "." +
           std::to_string(gpus.runtime_version % 1000 / 10) +
           (nccl.empty() ? ", NCCL not built" : ", NCCL " + nccl));
  if (gpus.devices.empty()) check.info("no GPU usable here: " + gpus.error);
  for (const auto& d : gpus.devices) {
    const auto what = "GPU " + std::to_string(d.index) + ": " + d.name + ", " + d.arch() + ", " +
                      std::to_string(d.multiprocessors) + " SMs, " +
                      std::to_string(d.global_memory_bytes >> 20) + " MiB, L2 " +
                      std::to_string(d.l2_cache_bytes >> 20) + " MiB";
    if (const auto error = run_gpu_smoke_test(d.index); error.empty())
      check.ok(what + ": a kernel ran and wrote the right values");
    else
      check.fail(what + ": " + error);
  }
#else
  check.info("CUDA: not built (no CUDA toolkit found at configure time)");
#endif

  std::cout << (check.failures() == 0 ? "all checks passed\n"
                                      : std::to_string(check.failures()) + " check(s) failed\n");
  return check.failures() == 0 ? 0 : 1;
}

}  // namespace

void add_doctor_command(CLI::App& app, invocation& inv) {
  app.add_subcommand("doctor", "Check this installation: LibTorch, the harness Python, GPUs, NCCL")
      ->callback([&inv] { inv.action = [&inv] { return run_doctor(inv.config); }; });
}

}  // namespace cuda_agent::cli
