#include "actors/process/background_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

namespace cuda_agent {

std::string background_process::snapshot::describe() const {
  if (running) return "running";
  if (timed_out) return "timed out (process group killed)";
  if (killed) return "killed";
  if (exited) return "exit status " + std::to_string(exit_code);
  return "killed by signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
}

background_process::background_process(const std::vector<std::string>& argv,
                                       const std::map<std::string, std::string>& env,
                                       std::chrono::milliseconds timeout,
                                       std::size_t max_buffered_bytes, const lifeline* contain)
    : max_buffered_(max_buffered_bytes) {
  if (argv.empty()) throw std::invalid_argument{"background_process: empty argv"};
  ::signal(SIGPIPE, SIG_IGN);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error{errno, std::generic_category(), "pipe2"};
  const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

  spawn_spec spec;
  spec.argv = argv;
  for (const auto& [name, value] : env) spec.env.push_back(name + "=" + value);
  spec.stdin_fd = null_fd;
  spec.stdout_fd = fds[1];
  spec.stderr_fd = fds[1];
  spec.contain = contain;
  started_ = std::chrono::steady_clock::now();
  deadline_ = started_ + timeout;
  const auto close_child_ends = [&] {
    ::close(fds[1]);
    if (null_fd >= 0) ::close(null_fd);
  };
  try {
    // Own process group, so that kill() and the time limit reach everything it started.
    pid_ = spawn_child(spec);
  } catch (...) {
    close_child_ends();
    ::close(fds[0]);
    throw;
  }
  close_child_ends();
  read_fd_ = fds[0];
  reader_ = std::thread{[this] { pump(); }};
}

background_process::~background_process() {
  kill();
  if (reader_.joinable()) reader_.join();
  if (read_fd_ >= 0) ::close(read_fd_);
}

void background_process::pump() {
  bool eof = false;
  bool reaped = false;
  int status = 0;
  while (!reaped) {
    bool stop = false;
    {
      std::lock_guard lock{mutex_};
      stop = kill_requested_;
    }
    const bool late = std::chrono::steady_clock::now() >= deadline_;
    if (stop || late) {
      ::kill(-pid_, SIGKILL);
      std::lock_guard lock{mutex_};
      if (late && !stop) status_.timed_out = true;
      if (stop) status_.killed = true;
    }
    if (!eof) {
      pollfd fd{read_fd_, POLLIN, 0};
      if (::poll(&fd, 1, 50) > 0) {
        char chunk[65536];
        const auto n = ::read(read_fd_, chunk, sizeof chunk);
        if (n > 0) {
          std::lock_guard lock{mutex_};
          const auto room = max_buffered_ - std::min(max_buffered_, buffer_.size());
          const auto kept = std::min(room, static_cast<std::size_t>(n));
          buffer_.append(chunk, kept);
          dropped_ += static_cast<std::size_t>(n) - kept;
        } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
          eof = true;
        }
      }
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds{20});
    }
    // The child may exit while a descendant still holds the pipe: reap it, then end the group.
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped = true;
      ::kill(-pid_, SIGKILL);
    }
  }
  // Whatever is still in the pipe after the exit belongs to the output.
  for (;;) {
    pollfd fd{read_fd_, POLLIN, 0};
    if (::poll(&fd, 1, 0) <= 0) break;
    char chunk[65536];
    const auto n = ::read(read_fd_, chunk, sizeof chunk);
    if (n <= 0) break;
    std::lock_guard lock{mutex_};
    const auto room = max_buffered_ - std::min(max_buffered_, buffer_.size());
    const auto kept = std::min(room, static_cast<std::size_t>(n));
    buffer_.append(chunk, kept);
    dropped_ += static_cast<std::size_t>(n) - kept;
  }
  std::lock_guard lock{mutex_};
  status_.running = false;
  if (WIFEXITED(status)) {
    status_.exited = true;
    status_.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    status_.term_signal = WTERMSIG(status);
  }
  ended_.notify_all();
}

background_process::snapshot background_process::take_output() {
  std::lock_guard lock{mutex_};
  snapshot s = status_;
  s.output = std::move(buffer_);
  s.dropped_bytes = dropped_;
  buffer_.clear();
  dropped_ = 0;
  return s;
}

background_process::snapshot background_process::state() {
  std::lock_guard lock{mutex_};
  return status_;
}

void background_process::kill() {
  std::unique_lock lock{mutex_};
  if (!status_.running) return;
  kill_requested_ = true;
  ended_.wait(lock, [this] { return !status_.running; });
}

bool background_process::wait_for(std::chrono::milliseconds limit) {
  std::unique_lock lock{mutex_};
  return ended_.wait_for(lock, limit, [this] { return !status_.running; });
}

}  // namespace cuda_agent
