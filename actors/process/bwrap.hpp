// The one bubblewrap command line: every sandbox of ours that runs untrusted work under bwrap
// (the episode sandbox, actors/sandbox; the build sandbox, kernels/build/sandbox.*) builds it
// here, so the protections cannot drift apart. Always, whatever the caller asks:
// - fresh namespaces of every kind, a user namespace included, with no capabilities and no way to
//   make further user namespaces (--disable-userns): no network but its own loopback, no view of
//   the host's processes, no privilege to regain;
// - a new session (no terminal to inject input into), death with the parent, an empty
//   environment but the caller's variables;
// - the host's /usr, the top-level links or directories into it and a few /etc files the loader
//   and the shell need, read-only; the caller's read-only paths; a private /proc, a minimal
//   /dev without GPU devices and a private /tmp;
// - one writable directory, and the root remounted read-only last, so nothing else can be written.
// The protections themselves (namespaces, capabilities, session, hostname) are one list,
// skills/harness/sandbox_protections.json, compiled in here and read by the harness's candidate
// isolation (skills/harness/candidate_process.py), which builds its own view on them (GPU
// devices, the read-only host root) because a candidate needs the host's Python and CUDA.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace cuda_agent {

struct bwrap_spec {
  std::string program;  // the resolved bwrap
  std::vector<std::pair<std::string, std::string>> environment;  // all there is inside
  // Bound read-only at their own path (and at their real path, when it is a link). Missing
  // ones are skipped; those under /usr are already there.
  std::vector<std::filesystem::path> read_only;
  std::filesystem::path writable;     // on the host
  std::filesystem::path writable_at;  // where it appears inside; empty: the same path
  std::filesystem::path chdir;        // inside
  int64_t tmp_bytes = 0;              // the private /tmp's size; 0: bwrap's default
};

// The protections every sandbox starts with (skills/harness/sandbox_protections.json).
const std::vector<std::string>& bwrap_protections();

// bwrap, its options, "--", then `command`.
std::vector<std::string> bwrap_argv(const bwrap_spec& spec, const std::vector<std::string>& command);

}  // namespace cuda_agent
