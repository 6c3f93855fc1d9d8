// cuda-agent-ns-init: pid 1 of the PID namespace that spawn_child (spawn.hpp) makes for one
// contained command, with the command's lifeline on fd 3.
//
//   cuda-agent-ns-init -- PROGRAM [ARGS...]
//
// It runs PROGRAM (a path) as its child, reaps whatever is orphaned in the namespace, and exits
// when PROGRAM does, with its exit status (128 + the signal when a signal ended it), or as soon
// as the lifeline reports its end (cut, or its owner died). Its exit ends the namespace: the
// kernel kills every process left in it, those that double-forked into sessions of their own
// included. Signals from inside the namespace cannot end it (the kernel protects a namespace's
// init), and only SIGKILL can from outside.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr int lifeline_fd = 3;

// Failures are reported like bubblewrap's own: one line on stderr, exit status 1.
[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "cuda-agent-ns-init: %s: %s\n", what, std::strerror(errno));
  std::_Exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::strcmp(argv[1], "--") != 0) {
    std::fprintf(stderr, "usage: cuda-agent-ns-init -- PROGRAM [ARGS...]\n");
    return 2;
  }
  char** command = argv + 2;

  // SIGCHLD through a signalfd, so that one poll waits for the children and the lifeline alike.
  sigset_t chld, old;
  ::sigemptyset(&chld);
  ::sigaddset(&chld, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &chld, &old);
  const int children = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (children < 0) fail("signalfd");
  if (::fcntl(lifeline_fd, F_SETFD, FD_CLOEXEC) != 0) fail("no lifeline on fd 3");
  const pid_t pid = ::fork();
  if (pid < 0) fail("fork");
  if (pid == 0) {
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    ::execv(command[0], command);
    fail(command[0]);
  }
  for (;;) {
    pollfd fds[2] = {{lifeline_fd, POLLIN, 0}, {children, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      fail("poll");
    }
    // Nothing is ever written to the lifeline: any event on it is its end.
    if (fds[0].revents != 0) return 128 + SIGKILL;
    signalfd_siginfo info;
    while (::read(children, &info, sizeof info) > 0) {
    }
    int status = 0;
    pid_t done;
    while ((done = ::waitpid(-1, &status, WNOHANG)) > 0)
      if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
}
