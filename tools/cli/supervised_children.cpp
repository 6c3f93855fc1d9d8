#include "tools/cli/supervised_children.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>

namespace cuda_agent::cli {
namespace {

std::atomic<bool> stop_signal{false};
extern "C" void note_stop(int) { stop_signal = true; }

}  // namespace

supervised_children::supervised_children() : supervisor_(::getpid()) {
  ::signal(SIGTERM, note_stop);
  ::signal(SIGINT, note_stop);
}

pid_t supervised_children::start() {
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string{"cannot start a child process: fork: "} + std::strerror(errno));
  if (pid == 0) {
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != supervisor_) ::_exit(1);  // the supervisor died before the line above
    return 0;
  }
  running_.push_back(pid);
  if (stop_signal) ::kill(pid, SIGTERM);  // a stop that came while it was being started
  return pid;
}

std::optional<supervised_children::ended> supervised_children::wait() {
  while (!running_.empty()) {
    if (stop_signal && !passed_on_) {
      for (const pid_t pid : running_) ::kill(pid, SIGTERM);
      passed_on_ = true;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      running_.erase(std::remove(running_.begin(), running_.end(), pid), running_.end());
      return ended{pid, status};
    }
    if (pid < 0 && errno != EINTR) throw std::runtime_error(std::string{"waitpid: "} + std::strerror(errno));
    std::this_thread::sleep_for(std::chrono::milliseconds{100});
  }
  return std::nullopt;
}

bool supervised_children::stop_requested() const { return stop_signal; }

std::string supervised_children::describe(int status) {
  if (WIFSIGNALED(status)) return fmt::format("died by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("exited with status {}", WEXITSTATUS(status));
}

}  // namespace cuda_agent::cli
