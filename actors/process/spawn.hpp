// Starting a child process, for run_subprocess and background_process.
//
// Plain: posix_spawn, in a process group of its own. kill(-pid) then reaches what it starts,
// unless that moves to a group or session of its own (setsid, bubblewrap's --new-session).
//
// Contained (a lifeline given): the child is cuda-agent-ns-init (ns_init.cpp), pid 1 of a fresh
// PID namespace, which runs the command. Nothing started inside can leave that namespace, and
// the kernel kills everything in it when its init ends: when the command ends, when the init is
// killed, or when the lifeline ends. A lifeline is a pipe of which this process alone holds the
// write end; it ends when cut() closes that end or when this process dies, however it dies
// (SIGKILL included), so no command outlives its owner. Reaping the init (waitpid) returns only
// once every process of its namespace is gone.
//
// Why not PR_SET_PDEATHSIG (bubblewrap's --die-with-parent): it fires when the *thread* that
// started the child ends, and the tool calls run on threads that end right after a background
// command starts; and bubblewrap arms it only some milliseconds after it starts, so a parent that
// dies in between leaves the sandbox running, reparented to init.
//
// A contained child needs the right to make a PID namespace: root's, or (not root) a user
// namespace of its own, in which the caller's uid and gid are mapped to themselves.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <vector>

namespace cuda_agent {

class lifeline {
 public:
  lifeline();  // throws std::system_error
  ~lifeline();  // cuts it
  lifeline(const lifeline&) = delete;
  lifeline& operator=(const lifeline&) = delete;

  // Ends every process contained under this lifeline: those running now, and any started later
  // as soon as it starts. Thread-safe; a second call does nothing.
  void cut();
  int read_end() const { return read_end_; }

 private:
  int read_end_ = -1;
  std::atomic<int> write_end_{-1};
};

struct spawn_spec {
  std::vector<std::string> argv;  // argv[0] searched in this process's PATH
  std::vector<std::string> env;   // the child's whole environment, NAME=value
  std::filesystem::path working_dir;  // empty: this process's
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;
  const lifeline* contain = nullptr;  // contained under it (needed for the call only; its end
                                      // still ends the child)
};

// Starts the child in a process group of its own (its pid is the group's id) and returns its
// pid. Throws std::system_error when it cannot start (a missing program, no right to make a
// PID namespace).
pid_t spawn_child(const spawn_spec& spec);

// The path of an executable as execvp would find it: a name with a slash as it is, otherwise
// searched in PATH. Empty when there is none.
std::string find_program(const std::string& name);

}  // namespace cuda_agent
