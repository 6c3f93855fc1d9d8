#include "actors/process/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>
#include <system_error>

extern char** environ;

namespace cuda_agent {
namespace {

// An owned file descriptor; closed on destruction.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(other.release()) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    reset(other.release());
    return *this;
  }
  ~unique_fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct pipe_pair {
  unique_fd read_end, write_end;
};

pipe_pair make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::system_error{errno, std::generic_category(), "pipe2"};
  return {unique_fd{fds[0]}, unique_fd{fds[1]}};
}

std::vector<std::string> child_environment(const std::map<std::string, std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry{*e};
    const auto name = entry.substr(0, entry.find('='));
    if (extra.count(std::string{name}) == 0) env.emplace_back(entry);
  }
  for (const auto& [name, value] : extra) env.push_back(name + "=" + value);
  return env;
}

}  // namespace

std::string subprocess_result::describe() const {
  if (timed_out) return "timed out after " + std::to_string(elapsed.count()) + " ms";
  if (signaled)
    return "killed by signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
  if (exited) return "exit status " + std::to_string(exit_code);
  return "did not finish";
}

subprocess_result run_subprocess(const std::vector<std::string>& argv,
                                 const subprocess_options& options) {
  if (argv.empty()) throw std::invalid_argument{"run_subprocess: empty argv"};
  // A child that dies while we write its stdin must not kill us.
  ::signal(SIGPIPE, SIG_IGN);

  auto in = make_pipe();
  auto out = make_pipe();
  auto err = make_pipe();

  spawn_spec spec;
  spec.argv = argv;
  spec.env = child_environment(options.extra_env);
  spec.working_dir = options.working_dir;
  spec.stdin_fd = in.read_end.get();
  spec.stdout_fd = out.write_end.get();
  spec.stderr_fd = err.write_end.get();
  spec.contain = options.contain;
  const auto start = std::chrono::steady_clock::now();
  // Own process group, so a timeout kills the child and everything it started.
  const pid_t pid = spawn_child(spec);
  in.read_end.reset();
  out.write_end.reset();
  err.write_end.reset();

  subprocess_result result;
  std::size_t stdin_written = 0;
  if (options.stdin_data.empty()) in.write_end.reset();
  else ::fcntl(in.write_end.get(), F_SETFL, O_NONBLOCK);

  const auto deadline = start + options.timeout;
  auto append = [&](std::string& sink, const char* data, std::size_t n) {
    const auto room = options.max_output_bytes - std::min(options.max_output_bytes, sink.size());
    if (n > room) result.output_truncated = true;
    sink.append(data, std::min(n, room));
  };

  // Pump the pipes until both output streams close (the child and its descendants are done
  // with them) or the deadline passes.
  while (out.read_end.get() >= 0 || err.read_end.get() >= 0) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    pollfd fds[3];
    int count = 0;
    for (int fd : {out.read_end.get(), err.read_end.get()})
      if (fd >= 0) fds[count++] = pollfd{fd, POLLIN, 0};
    if (in.write_end.get() >= 0) fds[count++] = pollfd{in.write_end.get(), POLLOUT, 0};
    const auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const int ready = ::poll(fds, count, static_cast<int>(std::min<int64_t>(wait_ms.count() + 1, 1000)));
    if (ready < 0 && errno != EINTR) throw std::system_error{errno, std::generic_category(), "poll"};
    for (int i = 0; i < count && ready > 0; ++i) {
      if (fds[i].revents == 0) continue;
      if (fds[i].fd == in.write_end.get()) {
        const auto& data = options.stdin_data;
        const auto n = ::write(fds[i].fd, data.data() + stdin_written, data.size() - stdin_written);
        if (n > 0) stdin_written += static_cast<std::size_t>(n);
        if (n < 0 && errno != EAGAIN) in.write_end.reset();
        if (stdin_written == data.size()) in.write_end.reset();
        continue;
      }
      char buffer[65536];
      const auto n = ::read(fds[i].fd, buffer, sizeof buffer);
      const bool is_out = fds[i].fd == out.read_end.get();
      if (n > 0) {
        append(is_out ? result.out : result.err, buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        (is_out ? out : err).read_end.reset();
      }
    }
  }
  in.write_end.reset();

  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  // Descendants that outlived the child would keep running unsupervised: end them too.
  ::kill(-pid, SIGKILL);
  result.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  if (WIFEXITED(status)) {
    result.exited = true;
    result.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signaled = true;
    result.term_signal = WTERMSIG(status);
  }
  return result;
}

}  // namespace cuda_agent
