// The episode sandbox: where every shell command of an agent runs.
//
// A command runs under bubblewrap in fresh namespaces (no network but loopback, its own PID
// namespace, no capabilities), sees the host's /usr and a few /etc files read-only, the episode
// workdir read-write at the fixed path /workdir, a private /tmp, a minimal /dev without GPU
// devices, and runs under resource limits (address space, processes, file size) and a wall-clock
// limit after which its whole process tree is killed.
//
// Why /workdir and not the host path: the agent's view (paths in tool outputs, in its own
// commands, in demonstrations) is then the same on every host and in every episode, so a
// recorded trajectory replays anywhere. The file tools translate /workdir paths to the host.
//
// Needs bubblewrap 0.8 or later (Debian bookworm's; `--size` for the /tmp tmpfs) and, inside,
// prlimit and bash from the host's /usr.
//
// No command outlives the sandbox: each runs contained (actors/process/spawn.hpp), as the child
// of an init of ours in a PID namespace of its own, under the sandbox's lifeline. Everything the
// command starts stays in that namespace (bubblewrap's own nests inside it), and the kernel kills
// the whole namespace when the init ends: when the command ends or is killed, when stop() cuts
// the lifeline (the episode ended), or when this process dies, SIGKILL included.
//
// sandbox.mode = none runs commands with the same limits but no isolation and no containment
// (a process that leaves the command's process group outlives it): only for a host without
// bubblewrap, and only when configured explicitly. The agent then sees the host path.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/process/background_process.hpp"
#include "actors/process/subprocess.hpp"
#include "config/settings.hpp"

namespace cuda_agent {

// The sandbox cannot be used at all (bwrap missing or refused, workdir missing). One line,
// naming the problem and the fix.
struct sandbox_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct sandbox_settings {
  bool isolate = true;         // sandbox.mode: bwrap (true) or none
  std::string bwrap = "bwrap";
  int64_t memory_mb = 8192;
  int64_t max_processes = 256;
  int64_t max_file_mb = 1024;
  std::chrono::milliseconds default_timeout{120000};
  std::chrono::milliseconds max_timeout{600000};
  std::size_t output_limit_bytes = 30000;
  std::vector<std::filesystem::path> ro_paths;
  std::string path_env = "/usr/local/bin:/usr/bin:/bin";
  uid_t run_as_uid = 65534;  // applies only when this process is root; 0 keeps root
  int64_t max_background = 8;

  static sandbox_settings from(const settings& config);
};

class sandbox {
 public:
  // Where the workdir appears inside the sandbox.
  static inline const std::filesystem::path mount_point{"/workdir"};

  // Throws sandbox_error when the workdir is not a directory or (mode bwrap) bwrap is not
  // found. Whether bwrap is permitted to create namespaces here is checked by probe().
  sandbox(std::filesystem::path workdir, sandbox_settings settings);

  const std::filesystem::path& workdir() const { return workdir_; }  // on the host
  // The workdir as the agent sees it: /workdir, or the host path when not isolated.
  const std::filesystem::path& visible_workdir() const { return visible_; }
  const sandbox_settings& settings() const { return settings_; }
  bool isolated() const { return settings_.isolate; }

  // The user that owns files in the workdir, when this process is root and commands run as
  // another user (files the file tools create are handed to it); nothing otherwise.
  std::optional<uid_t> file_owner() const;
  // Hands the workdir tree to file_owner() so that sandboxed commands can write it.
  void prepare_workdir() const;

  // The argv that runs `bash -c command` in the sandbox with its limits.
  std::vector<std::string> command_argv(const std::string& command) const;

  // Runs a command to completion (timeout clamped to the maximum). Output is capped at a
  // little over the output limit per stream. Throws sandbox_error when bwrap itself fails.
  subprocess_result run(const std::string& command, std::chrono::milliseconds timeout) const;

  // Starts a command in the background, stdout and stderr merged, killed at the timeout.
  std::shared_ptr<background_process> start(const std::string& command,
                                            std::chrono::milliseconds timeout) const;

  // Ends every command of this sandbox and of its copies, running ones and those started from
  // now on (they end as they start). It returns at once; the kernel tears the namespaces down
  // within milliseconds. Thread-safe.
  void stop();

  // Runs `true` in the sandbox; throws sandbox_error (one line) when that fails.
  void probe() const;

 private:
  std::map<std::string, std::string> environment() const;

  std::filesystem::path workdir_;
  std::filesystem::path visible_;
  sandbox_settings settings_;
  std::string bwrap_path_;  // resolved
  std::shared_ptr<lifeline> lifeline_;  // mode bwrap only; shared by copies
};

}  // namespace cuda_agent
