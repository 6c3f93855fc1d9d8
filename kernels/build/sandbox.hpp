// The command line that runs one compiler process inside the build's limits.
//
// Every process gets an address-space and a file-size limit and no core files (prlimit). With
// bubblewrap it runs in the episode sandbox's bwrap (actors/process/bwrap.hpp: every namespace
// unshared, no capabilities, no network, the root read-only), with the toolchain read-only and
// one writable directory: the build's work dir. It dies with its parent, and killing the
// process group we start kills the sandbox's whole PID namespace.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace cuda_agent::build {

struct sandbox_spec {
  bool bubblewrap = true;
  std::filesystem::path bwrap;                       // resolved program, when bubblewrap
  std::vector<std::filesystem::path> read_only;      // toolchain roots beyond /usr
  std::filesystem::path writable;                    // the build's work dir
  std::filesystem::path cwd;                         // where the compiler runs
  std::vector<std::filesystem::path> path_dirs;      // PATH inside the sandbox
  std::string library_path;  // LD_LIBRARY_PATH inside (a compiler unpacked under /opt needs it)
  int64_t memory_bytes = 0;
  int64_t file_bytes = 0;
};

std::vector<std::string> sandboxed_command(const sandbox_spec& spec,
                                           const std::vector<std::string>& argv);

}  // namespace cuda_agent::build
