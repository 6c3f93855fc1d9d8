// What a kernel build compiles and links against: the harness Python (its headers and the
// extension suffix of its modules), its torch package (headers, libraries, version) and the host
// and CUDA compilers. Probed without importing torch, so that a cache hit stays fast.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace cuda_agent::build {

struct toolchain {
  std::string python;                  // the interpreter, as configured
  std::filesystem::path torch_dir;     // .../site-packages/torch
  std::filesystem::path site_packages;  // its parent (nvidia-* wheels live here too)
  std::string torch_version;           // "2.11.0+cu130"
  std::string torch_cuda;              // "13.0"; empty for a CPU build of torch
  std::filesystem::path python_include;
  std::string ext_suffix;              // ".cpython-312-x86_64-linux-gnu.so"
  std::filesystem::path cxx;           // resolved host compiler
  std::string cxx_version;             // first line of `cxx --version`
  std::filesystem::path binding_cxx;   // compiler of binding files (build.binding_cxx resolved)
  std::string binding_cxx_version;
  bool binding_cxx_is_clang = false;   // decides how the slim header is precompiled and used
  std::filesystem::path gold;          // ld.gold where installed: the module's linker
  std::filesystem::path nvcc;          // empty unless probed for CUDA
  std::string nvcc_version;
  std::filesystem::path cuda_home;
  std::string fingerprint;             // digest of all of the above

  std::filesystem::path torch_include() const { return torch_dir / "include"; }
  std::filesystem::path torch_api_include() const {
    return torch_dir / "include" / "torch" / "csrc" / "api" / "include";
  }
  std::filesystem::path torch_lib() const { return torch_dir / "lib"; }
  std::filesystem::path cuda_lib() const;
  // Directories a sandboxed compiler must be able to read beyond /usr.
  std::vector<std::filesystem::path> read_only_roots() const;
};

// Probes once per (python, cxx, binding_cxx, nvcc) and process; throws std::runtime_error with a
// one-line reason (a python without torch, a missing compiler). binding_cxx "auto" means clang++
// where it is on PATH, else cxx.
const toolchain& probe_toolchain(const std::string& python, const std::string& cxx,
                                 const std::string& binding_cxx, const std::string& nvcc,
                                 bool cuda);

// "sm_90" for the first visible GPU (nvidia-smi); throws std::runtime_error when none is seen.
std::string detect_gpu_arch();

// The program's absolute path, searched in PATH when it has no slash; empty if not found.
std::filesystem::path find_program(const std::string& name);

// Linker arguments for library `name` found in `dirs` as libNAME.so or, failing that, the
// highest libNAME.so.N (pip wheels ship only versioned names); empty when not found.
std::vector<std::string> link_library(const std::string& name,
                                      const std::vector<std::filesystem::path>& dirs);

}  // namespace cuda_agent::build
