// Child processes that a command forks and supervises: `node --gpus 0,1` (a node process per
// GPU) and `train` (its learner process, restarted after a death by a signal). Children are
// forked before the command starts any thread, die with their supervisor (PR_SET_PDEATHSIG),
// and get the supervisor's SIGTERM or SIGINT passed on.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace cuda_agent::cli {

class supervised_children {
 public:
  // Installs this process's SIGTERM and SIGINT handlers (one supervisor per process).
  supervised_children();
  supervised_children(const supervised_children&) = delete;
  supervised_children& operator=(const supervised_children&) = delete;

  // Forks a child: 0 in the child (its signal handlers back to the defaults), the child's pid
  // in the supervisor. Throws std::runtime_error where fork fails.
  pid_t start();

  struct ended {
    pid_t pid;
    int status;  // as waitpid reports it
  };
  // Waits for the next child to end, passing a SIGTERM or SIGINT this process got on to every
  // child once; nullopt when none is left.
  std::optional<ended> wait();

  // Whether this process got SIGTERM or SIGINT.
  bool stop_requested() const;

  // "exited with status 2", "died by signal 9 (Killed)".
  static std::string describe(int status);

 private:
  pid_t supervisor_;
  std::vector<pid_t> running_;
  bool passed_on_ = false;
};

}  // namespace cuda_agent::cli
