// A child process that runs while its owner does other things: started with posix_spawn in its
// own process group (or contained, spawn.hpp), standard output and error merged into one stream
// that a reader thread collects into a capped buffer, killed (with its whole group, or its PID
// namespace) at a wall-clock limit, on kill() or when the object is destroyed. take_output()
// hands out what arrived since the last call.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "actors/process/spawn.hpp"

namespace cuda_agent {

class background_process {
 public:
  struct snapshot {
    std::string output;          // new since the previous take_output()
    std::size_t dropped_bytes = 0;  // new output lost because the buffer was full
    bool running = true;
    bool exited = false;
    int exit_code = -1;
    int term_signal = 0;
    bool timed_out = false;
    bool killed = false;  // by kill()
    // "running", "exit status 0", "killed by signal 9 (Killed)", "timed out after 5000 ms", ...
    std::string describe() const;
  };

  // Starts argv (argv[0] searched in PATH) with exactly `env` as its environment, contained
  // under `contain` when given. Throws std::system_error when the child cannot be started.
  background_process(const std::vector<std::string>& argv,
                     const std::map<std::string, std::string>& env,
                     std::chrono::milliseconds timeout, std::size_t max_buffered_bytes,
                     const lifeline* contain = nullptr);
  ~background_process();  // kills the group if still running and waits for it
  background_process(const background_process&) = delete;
  background_process& operator=(const background_process&) = delete;

  snapshot take_output();
  // The status without taking the output.
  snapshot state();
  // Kills the process group and waits until the child is reaped.
  void kill();
  // Waits until the process ends or `limit` passes; true if it ended.
  bool wait_for(std::chrono::milliseconds limit);
  pid_t pid() const { return pid_; }

 private:
  void pump();  // the reader thread

  pid_t pid_ = -1;
  int read_fd_ = -1;
  std::chrono::steady_clock::time_point deadline_;
  std::size_t max_buffered_;

  std::mutex mutex_;
  std::condition_variable ended_;
  std::string buffer_;
  std::size_t dropped_ = 0;
  bool kill_requested_ = false;
  snapshot status_;
  std::chrono::steady_clock::time_point started_;
  std::thread reader_;
};

}  // namespace cuda_agent
