// Looking for processes that outlived what should have ended them: commands carry a marker (the
// argument of `sleep`), and the host's /proc is scanned for it. Also a load that keeps every core
// busy (leaks are races: they show under load) and an owner process to SIGKILL (a copy of the
// test binary running one chosen test).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

extern char** environ;

namespace cuda_agent::testing {

// A fresh number for `sleep`, unique in this run and unlikely anywhere else on the host.
inline std::string unique_marker() {
  static std::atomic<int> next{0};
  static const int base = 6000000 + static_cast<int>(std::random_device{}() % 3000000);
  return std::to_string(base + next++);
}

inline std::vector<std::string> unique_markers(int n) {
  std::vector<std::string> markers;
  for (int i = 0; i < n; ++i) markers.push_back(unique_marker());
  return markers;
}

// A process's arguments, NUL-separated; empty when it is gone (it may go while it is read).
inline std::string read_cmdline(const char* pid) {
  std::string text;
  const int fd = ::open((std::string{"/proc/"} + pid + "/cmdline").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(n));
  ::close(fd);
  return text;
}

struct marked_process {
  pid_t pid;
  std::string marker;
};

// The host's processes that have one of `markers` as an argument.
inline std::vector<marked_process> marked_processes(const std::vector<std::string>& markers) {
  std::vector<marked_process> found;
  DIR* proc = ::opendir("/proc");
  while (auto* entry = ::readdir(proc)) {
    if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
    const auto cmdline = read_cmdline(entry->d_name);
    const std::string* match = nullptr;
    for (std::size_t start = 0; start < cmdline.size() && !match;) {
      const auto end = std::min(cmdline.find('\0', start), cmdline.size());
      for (const auto& m : markers)
        if (cmdline.compare(start, end - start, m) == 0) match = &m;
      start = end + 1;
    }
    if (match) found.push_back({std::stoi(entry->d_name), *match});
  }
  ::closedir(proc);
  return found;
}

inline std::vector<pid_t> processes_with(const std::vector<std::string>& markers) {
  std::vector<pid_t> pids;
  for (const auto& p : marked_processes(markers)) pids.push_back(p.pid);
  return pids;
}

// Waits until exactly `n` processes carry the markers (or `limit` passes); returns how many do.
inline int wait_for_processes(const std::vector<std::string>& markers, std::size_t n,
                              std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto seen = processes_with(markers).size();
  while (seen != n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds{5});
    seen = processes_with(markers).size();
  }
  return static_cast<int>(seen);
}

// How many processes carry the markers once `settle` has passed: a command its owner left while
// it was still starting shows only when it is up (a sandbox takes milliseconds to come up).
inline std::size_t survivors_after_settling(const std::vector<std::string>& markers,
                                            std::chrono::milliseconds settle =
                                                std::chrono::milliseconds{500}) {
  std::this_thread::sleep_for(settle);
  return processes_with(markers).size();
}

// Every core this process may run on busy for the object's lifetime, one spinning thread each.
// (Not one per core of the host: a test pinned to one core would starve its own processes.)
class cpu_load {
 public:
  cpu_load() {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    const int cores = ::sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 2;
    for (int i = 0; i < cores; ++i)
      spinners_.emplace_back([this] {
        while (!stop_.load(std::memory_order_relaxed)) {
        }
      });
  }
  ~cpu_load() {
    stop_ = true;
    for (auto& t : spinners_) t.join();
  }
  cpu_load(const cpu_load&) = delete;
  cpu_load& operator=(const cpu_load&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::vector<std::thread> spinners_;
};

// A copy of this test binary running only `test` (a gtest filter), with `variable` set to
// `value` in its environment and a pipe on its fd 3 through which it reports progress.
class owner_process {
 public:
  owner_process(const std::string& test, const std::string& variable, const std::string& value) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    std::vector<std::string> env{variable + "=" + value};
    for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
    std::vector<char*> c_env;
    for (auto& e : env) c_env.push_back(e.data());
    c_env.push_back(nullptr);
    std::string filter = "--gtest_filter=" + test;
    char self[] = "/proc/self/exe";
    char* argv[] = {self, filter.data(), nullptr};
    if (::posix_spawn(&pid_, self, &actions, nullptr, argv, c_env.data()) != 0)
      throw std::runtime_error("cannot start the owner process");
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    progress_ = fds[0];
  }
  ~owner_process() {
    kill(SIGKILL);
    ::close(progress_);
  }
  owner_process(const owner_process&) = delete;
  owner_process& operator=(const owner_process&) = delete;

  // The next line the owner reported; empty once it exited.
  std::string next_line() {
    std::string line;
    char c;
    while (::read(progress_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  // Signals it and reaps it; its wait status.
  int kill(int signal) {
    if (pid_ < 0) return status_;
    ::kill(pid_, signal);
    return wait();
  }
  int wait() {
    if (pid_ < 0) return status_;
    while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  int progress_ = -1;
};

// In the owner: reports a line to the test that started it.
inline void report_to_parent(const std::string& line) {
  const auto text = line + "\n";
  if (::write(3, text.data(), text.size()) < 0) std::_Exit(1);
}

// Runs `rounds` owners (`test`, with `variable` set to setup("kill" or "exit", markers)) that each
// start commands carrying five fresh markers, ends each one, and expects none of those commands to
// outlive it. Killed owners are SIGKILLed mostly while their commands start (0-5 ms after they say
// "starting"), otherwise once they say "started"; exiting owners exit on their own after "started".
template <class Setup>
void expect_nothing_outlives_owners(const std::string& test, const std::string& variable, const std::string& mode,
                                    int rounds, Setup setup) {
  cpu_load load;
  std::mt19937 random{std::random_device{}()};
  std::vector<std::string> all;
  for (int i = 0; i < rounds; ++i) {
    const auto m = unique_markers(5);
    all.insert(all.end(), m.begin(), m.end());
    owner_process owner{test, variable, setup(mode, m)};
    ASSERT_EQ(owner.next_line(), "starting") << "iteration " << i;
    int status = 0;
    if (mode == "kill") {
      if (i % 3 != 0) {
        std::this_thread::sleep_for(std::chrono::microseconds{random() % 5000});
      } else {
        ASSERT_EQ(owner.next_line(), "started") << "iteration " << i;
      }
      status = owner.kill(SIGKILL);
      ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "iteration " << i;
    } else {
      ASSERT_EQ(owner.next_line(), "started") << "iteration " << i;
      status = owner.wait();
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "iteration " << i;
    }
    EXPECT_EQ(wait_for_processes(m, 0, std::chrono::seconds{2}), 0) << "iteration " << i;
  }
  EXPECT_EQ(survivors_after_settling(all), 0u);
}

}  // namespace cuda_agent::testing
