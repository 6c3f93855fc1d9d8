#include "actors/process/spawn.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <system_error>

namespace cuda_agent {
namespace {

void check(int rc, const char* what) {
  if (rc != 0) throw std::system_error{rc, std::generic_category(), what};
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

pid_t spawn_plain(const spawn_spec& spec) {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  check(posix_spawnattr_init(&attr), "posix_spawnattr_init");
  check(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init");
  struct cleanup {
    posix_spawnattr_t& attr;
    posix_spawn_file_actions_t& actions;
    ~cleanup() {
      posix_spawn_file_actions_destroy(&actions);
      posix_spawnattr_destroy(&attr);
    }
  } destroy{attr, actions};
  check(posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP), "posix_spawnattr_setflags");
  check(posix_spawnattr_setpgroup(&attr, 0), "posix_spawnattr_setpgroup");
  check(posix_spawn_file_actions_adddup2(&actions, spec.stdin_fd, 0), "adddup2");
  check(posix_spawn_file_actions_adddup2(&actions, spec.stdout_fd, 1), "adddup2");
  check(posix_spawn_file_actions_adddup2(&actions, spec.stderr_fd, 2), "adddup2");
  if (!spec.working_dir.empty())
    check(posix_spawn_file_actions_addchdir_np(&actions, spec.working_dir.c_str()), "addchdir");
  auto args = spec.argv;
  auto env = spec.env;
  auto c_args = c_strings(args);
  auto c_env = c_strings(env);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, c_args[0], &actions, &attr, c_args.data(), c_env.data());
  if (rc != 0)
    throw std::system_error{rc, std::generic_category(), "cannot start '" + spec.argv[0] + "'"};
  return pid;
}

// What the contained child needs, all of it prepared before clone(): the child shares this
// process's memory until it execs, so it must not allocate.
struct exec_args {
  const char* path;
  char** argv;
  char** envp;
  int fds[4];               // become 0, 1, 2 and 3 (the lifeline)
  const char* working_dir;  // nullptr: ours
  const char* uid_map;      // for a user namespace of its own; nullptr: none
  const char* gid_map;
  sigset_t mask;            // the caller's signal mask: the child's after exec
  int error;                // errno of the step that failed; read once the child exec'd or exited
};

[[noreturn]] void child_failed(exec_args& a) {
  a.error = errno;
  ::_exit(127);
}

bool write_file(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const auto size = static_cast<ssize_t>(std::strlen(text));
  const bool written = ::write(fd, text, static_cast<std::size_t>(size)) == size;
  ::close(fd);
  return written;
}

// The child of clone(CLONE_VM | CLONE_VFORK), on a stack of its own while the calling thread
// waits for it to exec: system calls only, as in posix_spawn's child.
int exec_child(void* p) {
  auto& a = *static_cast<exec_args*>(p);
  // The caller's ids, mapped to themselves, while the child still has the capabilities its new
  // user namespace gave it (exec drops them). setgroups is denied first, as the kernel requires.
  if (a.uid_map != nullptr &&
      (!write_file("/proc/self/setgroups", "deny") || !write_file("/proc/self/gid_map", a.gid_map) ||
       !write_file("/proc/self/uid_map", a.uid_map)))
    child_failed(a);
  // This process's handlers must not run in the child: back to the defaults (ignored signals stay
  // ignored, as across exec).
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction action {};
    if (::sigaction(sig, nullptr, &action) != 0 || action.sa_handler == SIG_IGN ||
        action.sa_handler == SIG_DFL)
      continue;
    action = {};
    ::sigaction(sig, &action, nullptr);
  }
  // Each source is moved above 3 first, so that none is overwritten before it is copied.
  int fds[4];
  for (int i = 0; i < 4; ++i)
    if ((fds[i] = ::fcntl(a.fds[i], F_DUPFD_CLOEXEC, 4)) < 0) child_failed(a);
  for (int i = 0; i < 4; ++i)
    if (::dup2(fds[i], i) < 0) child_failed(a);
  if (::setpgid(0, 0) != 0) child_failed(a);
  if (a.working_dir != nullptr && ::chdir(a.working_dir) != 0) child_failed(a);
  ::sigprocmask(SIG_SETMASK, &a.mask, nullptr);
  ::execve(a.path, a.argv, a.envp);
  child_failed(a);
}

pid_t spawn_contained(const spawn_spec& spec) {
  const auto program = find_program(spec.argv[0]);
  if (program.empty())
    throw std::system_error{ENOENT, std::generic_category(), "cannot start '" + spec.argv[0] + "'"};
  std::vector<std::string> args{CUDA_AGENT_NS_INIT, "--", program};
  args.insert(args.end(), spec.argv.begin() + 1, spec.argv.end());
  // Root may make a PID namespace; anyone else makes a user namespace with it.
  const bool root = ::geteuid() == 0;
  const auto uid_map = std::to_string(::geteuid()) + " " + std::to_string(::geteuid()) + " 1";
  const auto gid_map = std::to_string(::getegid()) + " " + std::to_string(::getegid()) + " 1";
  auto env = spec.env;
  auto c_args = c_strings(args);
  auto c_env = c_strings(env);

  exec_args a{c_args[0],
              c_args.data(),
              c_env.data(),
              {spec.stdin_fd, spec.stdout_fd, spec.stderr_fd, spec.contain->read_end()},
              spec.working_dir.empty() ? nullptr : spec.working_dir.c_str(),
              root ? nullptr : uid_map.c_str(),
              root ? nullptr : gid_map.c_str(),
              {},
              0};
  std::vector<char> stack(64 * 1024);
  // No signal may reach the child before it has reset the handlers.
  sigset_t all;
  ::sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &a.mask);
  const int flags = CLONE_VM | CLONE_VFORK | CLONE_NEWPID | (root ? 0 : CLONE_NEWUSER) | SIGCHLD;
  const pid_t pid = ::clone(exec_child, stack.data() + stack.size(), flags, &a);
  const int clone_error = errno;
  ::pthread_sigmask(SIG_SETMASK, &a.mask, nullptr);
  if (pid < 0)
    throw std::system_error{clone_error, std::generic_category(),
                            "cannot make a PID namespace for '" + spec.argv[0] + "'"};
  if (a.error != 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    throw std::system_error{a.error, std::generic_category(),
                            "cannot start '" + args[0] + "' for '" + spec.argv[0] + "'"};
  }
  return pid;
}

}  // namespace

lifeline::lifeline() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    throw std::system_error{errno, std::generic_category(), "pipe2"};
  read_end_ = fds[0];
  write_end_ = fds[1];
}

lifeline::~lifeline() {
  cut();
  ::close(read_end_);
}

void lifeline::cut() {
  const int fd = write_end_.exchange(-1);
  if (fd >= 0) ::close(fd);
}

pid_t spawn_child(const spawn_spec& spec) {
  if (spec.argv.empty()) throw std::invalid_argument{"spawn_child: empty argv"};
  return spec.contain ? spawn_contained(spec) : spawn_plain(spec);
}

std::string find_program(const std::string& name) {
  if (name.find('/') != std::string::npos) return ::access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const auto end = std::min(dirs.find(':', start), dirs.size());
    const auto candidate = dirs.substr(start, end - start) + "/" + name;
    if (end > start && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

}  // namespace cuda_agent
