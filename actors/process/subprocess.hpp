// Running a child process to completion: posix_spawn (safe in a threaded process, unlike
// fork), standard output and error captured through pipes, a wall-clock limit after which the
// whole process group is killed, and a cap on captured output so a runaway child cannot
// exhaust memory. Contained (spawn.hpp), the limit kills the child's whole PID namespace.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "actors/process/spawn.hpp"

namespace cuda_agent {

struct subprocess_options {
  std::chrono::milliseconds timeout{std::chrono::seconds{60}};
  std::size_t max_output_bytes = 1 << 20;  // per stream; the rest is read and dropped
  std::filesystem::path working_dir;       // empty: inherit
  std::map<std::string, std::string> extra_env;
  std::string stdin_data;  // written to the child's standard input, then closed
  const lifeline* contain = nullptr;  // run contained under it (spawn.hpp)
};

struct subprocess_result {
  int exit_code = -1;     // valid when exited
  int term_signal = 0;    // valid when signaled
  bool exited = false;
  bool signaled = false;
  bool timed_out = false;  // killed by us at the wall-clock limit
  bool output_truncated = false;
  std::string out;
  std::string err;
  std::chrono::milliseconds elapsed{0};

  bool ok() const { return exited && exit_code == 0 && !timed_out; }
  // "exit status 3", "killed by signal 9 (Killed)", "timed out after 5000 ms".
  std::string describe() const;
};

// Runs argv[0] (searched in PATH) with the given arguments. Throws std::system_error only when
// the child cannot be started at all (a missing program, for one).
subprocess_result run_subprocess(const std::vector<std::string>& argv,
                                 const subprocess_options& options = {});

}  // namespace cuda_agent
