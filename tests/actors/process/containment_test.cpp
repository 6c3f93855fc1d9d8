// Contained children (actors/process/spawn.hpp) end with everything they started, whatever that
// did to get away: commands detach (a background job, a double fork into a session of its own, a
// job that ignores SIGTERM and SIGHUP), then what should end them happens and the host's /proc is
// searched for survivors. Leaks are races, so each case runs many times with every core busy.
#include <gtest/gtest.h>

#include <sstream>

#include "actors/process/background_process.hpp"
#include "actors/process/subprocess.hpp"
#include "tests/actors/process/survivors.hpp"

namespace cuda_agent {
namespace {

using namespace std::chrono_literals;
using testing::cpu_load;
using testing::processes_with;
using testing::unique_markers;
using testing::wait_for_processes;

const std::map<std::string, std::string> path_env{{"PATH", "/usr/bin:/bin"}};

// Leaves three processes behind as it goes (m[0] to m[2]), then waits (m[3]).
std::vector<std::string> detaching_command(const std::vector<std::string>& m) {
  return {"sh", "-c",
          "sleep " + m[0] + " & (setsid sleep " + m[1] + " >/dev/null 2>&1 &); "
          "(trap '' TERM HUP; exec sleep " + m[2] + ") >/dev/null 2>&1 & exec sleep " + m[3]};
}

std::unique_ptr<background_process> start_detaching(const std::vector<std::string>& m,
                                                    const lifeline& life) {
  return std::make_unique<background_process>(detaching_command(m), path_env, 60s, 1 << 16, &life);
}

TEST(containment, the_scan_finds_what_a_plain_child_leaves_behind) {
  // The control: without containment, a double fork into a session of its own survives.
  const auto m = unique_markers(1);
  const auto r = run_subprocess({"sh", "-c", "(setsid sleep " + m[0] + " >/dev/null 2>&1 &); "
                                              "until pgrep -f '^sleep " + m[0] + "$'; do sleep 0.01; done"});
  ASSERT_TRUE(r.ok()) << r.describe();
  const auto survivors = processes_with(m);
  ASSERT_EQ(survivors.size(), 1u);
  ::kill(survivors[0], SIGKILL);
  EXPECT_EQ(wait_for_processes(m, 0, 2s), 0);
}

TEST(containment, killing_a_command_ends_everything_it_started_before_kill_returns) {
  cpu_load load;
  lifeline life;
  for (int i = 0; i < 20; ++i) {
    const auto m = unique_markers(4);
    auto process = start_detaching(m, life);
    ASSERT_EQ(wait_for_processes(m, 4, 5s), 4) << "iteration " << i;
    process->kill();
    // Reaping the namespace's init returns only once its namespace is empty: no waiting here.
    EXPECT_EQ(processes_with(m).size(), 0u) << "iteration " << i;
  }
}

TEST(containment, a_command_that_exits_takes_what_it_started_with_it) {
  cpu_load load;
  lifeline life;
  subprocess_options options;
  options.contain = &life;
  for (int i = 0; i < 20; ++i) {
    const auto m = unique_markers(3);
    // It exits once the three it left behind run.
    const auto r = run_subprocess(
        {"sh", "-c", "sleep " + m[0] + " >/dev/null 2>&1 & (setsid sleep " + m[1] +
                         " >/dev/null 2>&1 &); nohup sleep " + m[2] + " >/dev/null 2>&1 & "
                         "until pgrep -f '^sleep " + m[0] + "$' && pgrep -f '^sleep " + m[1] +
                         "$' && pgrep -f '^sleep " + m[2] + "$'; do sleep 0.01; done >/dev/null; "
                         "echo done"},
        options);
    ASSERT_TRUE(r.ok()) << r.describe() << r.err;
    EXPECT_EQ(r.out, "done\n");
    EXPECT_EQ(processes_with(m).size(), 0u) << "iteration " << i;
  }
}

TEST(containment, cutting_the_lifeline_ends_running_commands_and_every_later_one) {
  cpu_load load;
  for (int i = 0; i < 10; ++i) {
    lifeline life;
    const auto m = unique_markers(5);
    auto background = start_detaching(m, life);
    subprocess_result foreground;
    std::thread call{[&] {
      subprocess_options options;
      options.contain = &life;
      options.timeout = 60s;
      foreground = run_subprocess({"sh", "-c", "sleep " + m[4]}, options);
    }};
    EXPECT_EQ(wait_for_processes(m, 5, 5s), 5) << "iteration " << i;
    const auto cut = std::chrono::steady_clock::now();
    life.cut();
    call.join();
    EXPECT_LT(std::chrono::steady_clock::now() - cut, 2s);
    EXPECT_FALSE(foreground.ok());
    EXPECT_TRUE(background->wait_for(2s));
    EXPECT_EQ(processes_with(m).size(), 0u) << "iteration " << i;
    // A command started after the cut ends as it starts.
    const auto late = unique_markers(1);
    background_process after({"sh", "-c", "sleep " + late[0]}, path_env, 60s, 1024, &life);
    EXPECT_TRUE(after.wait_for(2s));
    EXPECT_EQ(processes_with(late).size(), 0u);
  }
}

// --- The owner dies -----------------------------------------------------------------------------

constexpr const char* owner_variable = "CUDA_AGENT_CONTAINMENT_OWNER";

// Run by the tests below as a process of its own: it starts commands under a lifeline, reports
// "started" once all five run, and waits to be killed, or ("exit") leaves at once without any
// cleanup.
TEST(containment_owner, holds_commands_until_it_dies) {
  const char* setup = std::getenv(owner_variable);
  if (setup == nullptr) GTEST_SKIP() << "the owner process of the SIGKILL tests, which start it";
  std::istringstream in{setup};
  std::string mode;
  in >> mode;
  std::vector<std::string> m;
  for (std::string marker; in >> marker;) m.push_back(marker);
  lifeline life;
  testing::report_to_parent("starting");
  auto background = start_detaching(m, life);
  std::thread{[&] {
    subprocess_options options;
    options.contain = &life;
    options.timeout = 60s;
    run_subprocess({"sh", "-c", "sleep " + m[4]}, options);
  }}.detach();
  if (wait_for_processes(m, 5, 5s) != 5) std::_Exit(1);
  testing::report_to_parent("started");
  if (mode == "exit") std::_Exit(0);
  std::this_thread::sleep_for(60s);
  std::_Exit(1);
}

std::string owner_setup(const std::vector<std::string>& m, const std::string& mode) {
  std::string setup = mode;
  for (const auto& marker : m) setup += " " + marker;
  return setup;
}

TEST(containment, nothing_outlives_an_owner_killed_with_sigkill) {
  testing::expect_nothing_outlives_owners("containment_owner.*", owner_variable, "kill", 30,
                                         [](const std::string& mode, const std::vector<std::string>& m) {
                                           return owner_setup(m, mode);
                                         });
}

TEST(containment, nothing_outlives_an_owner_that_exits_without_cleaning_up) {
  testing::expect_nothing_outlives_owners("containment_owner.*", owner_variable, "exit", 10,
                                         [](const std::string& mode, const std::vector<std::string>& m) {
                                           return owner_setup(m, mode);
                                         });
}

}  // namespace
}  // namespace cuda_agent
