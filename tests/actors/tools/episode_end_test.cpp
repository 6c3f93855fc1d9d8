// An episode's end is the end of every process its tools started, however it ends: the session
// destroyed or closed, a call still starting a background shell meanwhile, the tools actor
// stopped or killed, the episode ended by the agent, by its turn budget, by its wall clock (a
// call in flight) or by a failed policy, and the process that holds the session killed with
// SIGKILL or exiting without any cleanup. The commands are real, in the real sandbox, and detach
// as best they can (a background job, a double fork into a session of its own, a job that
// ignores SIGTERM and SIGHUP); then the host's /proc is searched for them. Leaks are races, so
// each case runs many times with every core busy.
#include <random>
#include <set>
#include <sstream>

#include <caf/all.hpp>

#include "actors/episode_tools.hpp"
#include "actors/rollout_manager.hpp"
#include "tests/actors/scripted_peers.hpp"
#include "tests/actors/process/survivors.hpp"
#include "tests/actors/tools/tool_test_support.hpp"

namespace cuda_agent {
namespace {

using json = nlohmann::json;
using namespace std::chrono_literals;
using cuda_agent::testing::cpu_load;
using cuda_agent::testing::marked_processes;
using cuda_agent::testing::processes_with;
using cuda_agent::testing::unique_markers;
using cuda_agent::testing::wait_for_processes;

// Leaves three processes behind (m[0] to m[2]), runs `then`, and waits (m[3]): four processes.
std::string detaching_command(const std::vector<std::string>& m, const std::string& then = "true") {
  return "sleep " + m[0] + " & (setsid sleep " + m[1] + " >/dev/null 2>&1 &); "
         "(trap '' TERM HUP; exec sleep " + m[2] + ") >/dev/null 2>&1 & " + then + "; sleep " + m[3];
}

json in_background(const std::string& command) {
  return {{"command", command}, {"run_in_background", true}};
}

json in_foreground(const std::string& command) {  // for as long as a command may run
  return {{"command", command}, {"timeout", 600000}};
}

class episode_end : public tools::testing::tool_fixture {};

TEST_F(episode_end, a_background_shell_outlives_the_thread_that_started_it) {
  // The tool-call actor's thread ends once the call has answered; the shell must not end with it.
  cpu_load load;
  for (int i = 0; i < 10; ++i) {
    make_session(tools::testing::test_sandbox_settings());
    const auto m = unique_markers(1);
    std::thread{[&] {
      EXPECT_FALSE(call("Bash", in_background("sleep " + m[0])).is_error);
      std::this_thread::sleep_for(100ms);  // long enough for bubblewrap to be fully up
    }}.join();
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE(session->background("bash_1")->state().running) << "iteration " << i;
    EXPECT_EQ(processes_with(m).size(), 1u) << "iteration " << i;
  }
}

TEST_F(episode_end, destroying_the_session_ends_every_shell_before_it_returns) {
  cpu_load load;
  for (int i = 0; i < 20; ++i) {
    make_session(tools::testing::test_sandbox_settings());
    const auto m = unique_markers(5);
    ASSERT_FALSE(call("Bash", in_background(detaching_command(m))).is_error);
    ASSERT_FALSE(call("Bash", in_background("sleep " + m[4])).is_error);
    ASSERT_EQ(wait_for_processes(m, 5, 10s), 5) << "iteration " << i;
    session.reset();
    EXPECT_EQ(processes_with(m).size(), 0u) << "iteration " << i;
  }
}

TEST_F(episode_end, closing_the_session_ends_its_shells_and_the_calls_still_in_flight) {
  cpu_load load;
  for (int i = 0; i < 20; ++i) {
    make_session(tools::testing::test_sandbox_settings());
    const auto m = unique_markers(5);
    ASSERT_FALSE(call("Bash", in_background(detaching_command(m))).is_error);
    tool_result in_flight;
    std::thread foreground{[&] { in_flight = call("Bash", in_foreground("sleep " + m[4])); }};
    EXPECT_EQ(wait_for_processes(m, 5, 10s), 5) << "iteration " << i;
    const auto closed = std::chrono::steady_clock::now();
    session->close();
    foreground.join();
    EXPECT_LT(std::chrono::steady_clock::now() - closed, 2s);
    EXPECT_NE(in_flight.exit_code, 0);
    EXPECT_EQ(wait_for_processes(m, 0, 2s), 0) << "iteration " << i;
    const auto late = call("Bash", in_background("sleep " + unique_markers(1)[0]));
    EXPECT_TRUE(late.is_error);
    EXPECT_NE(late.output.find("the episode has ended"), std::string::npos) << late.output;
  }
}

TEST_F(episode_end, a_shell_started_while_the_session_closes_does_not_survive_it) {
  cpu_load load;
  std::mt19937 random{std::random_device{}()};
  std::vector<std::string> all;
  for (int i = 0; i < 50; ++i) {
    make_session(tools::testing::test_sandbox_settings());
    const auto m = unique_markers(4);
    all.insert(all.end(), m.begin(), m.end());
    std::thread starting{[&] { call("Bash", in_background(detaching_command(m))); }};
    std::this_thread::sleep_for(std::chrono::microseconds{random() % 10000});
    session->close();
    starting.join();
    EXPECT_EQ(wait_for_processes(m, 0, 2s), 0) << "iteration " << i;
  }
  EXPECT_EQ(cuda_agent::testing::survivors_after_settling(all), 0u);
}

// --- Through the actors -------------------------------------------------------------------------

struct actor_endings : scripted::peers_fixture {
  tools::testing::scratch_workdir work;

  tools_actor real_tools(const std::filesystem::path& workdir) {
    sandbox box{workdir, tools::testing::test_sandbox_settings()};
    box.prepare_workdir();
    return spawn_episode_tools(*system, std::make_shared<tools::tool_session>(std::move(box),
                                                                             tools::tool_limits{}));
  }
};

tool_request request(std::string id, json args) {
  return {"episode-1", 1, {std::move(id), "Bash", args.dump()}};
}

TEST_F(actor_endings, stopping_or_killing_the_tools_actor_ends_the_episode_s_commands) {
  cpu_load load;
  for (const auto reason : {caf::exit_reason::user_shutdown, caf::exit_reason::kill}) {
    for (int i = 0; i < 10; ++i) {
      const auto m = unique_markers(5);
      auto episode_tools = real_tools(work.path());
      caf::scoped_actor self{*system};
      self->request(episode_tools, 30s, request("c1", in_background(detaching_command(m))))
          .receive([](const tool_result& r) { EXPECT_FALSE(r.is_error) << r.output; },
                   [&](caf::error& e) { FAIL() << system->render(e); });
      self->send(episode_tools, request("c2", in_foreground("sleep " + m[4])));  // still running
      EXPECT_EQ(wait_for_processes(m, 5, 10s), 5) << "iteration " << i;
      self->send_exit(episode_tools, reason);
      EXPECT_EQ(wait_for_processes(m, 0, 2s), 0) << caf::to_string(reason) << ", iteration " << i;
    }
  }
}

// Each task's turns from its script; past the script, the agent is done. A turn scripted with
// finish_reason "error" fails as a dead model server does.
policy_actor::behavior_type scripted_agents(policy_actor::pointer,
                                            std::map<std::string, std::vector<policy_response>> scripts) {
  return scripted::policy_behavior([=](const policy_request& request) -> caf::result<policy_response> {
    const auto& script = scripts.at(request.task_id);
    const auto turn = static_cast<std::size_t>(request.turn);
    policy_response r = turn <= script.size() ? script[turn - 1] : scripted::done();
    if (r.finish_reason == "error")
      return caf::make_error(caf::sec::runtime_error, "model server connection refused");
    r.episode_id = request.episode_id;
    r.turn = request.turn;
    return r;
  });
}

tool_call bash(const json& args) { return {"c", "Bash", args.dump()}; }

// A background command that touches `flag` once it has started its processes, and a call that
// waits for that (and for their exec), so that the episode cannot end before they run.
// The flag is touched as soon as the background processes are forked, perhaps before they exec
// their marked commands; the foreground's sleep after it leaves the watcher time to see them all
// on a loaded host (0.1 s once missed one of 25 in CI).
std::vector<tool_call> start_and_wait(const std::vector<std::string>& m, const std::string& flag) {
  return {bash(in_background(detaching_command(m, "touch " + flag))),
          bash(in_foreground("until [ -e " + flag + " ]; do sleep 0.01; done; sleep 0.3"))};
}

TEST_F(actor_endings, every_way_an_episode_ends_ends_its_commands) {
  // Sandboxed commands may run as another user, who must reach the episodes' workdirs.
  std::filesystem::permissions(dir.path(), std::filesystem::perms::others_exec,
                               std::filesystem::perm_options::add);
  cpu_load load;
  for (int i = 0; i < 3; ++i) {
    std::vector<std::string> all;
    const auto markers = [&](int n) {
      auto m = unique_markers(n);
      all.insert(all.end(), m.begin(), m.end());
      return m;
    };
    const auto a = markers(4), b = markers(12), c = markers(5), d = markers(4);
    const auto turn = [&](int k) {
      return scripted::with_calls(start_and_wait({b.begin() + 4 * k, b.begin() + 4 * k + 4},
                                                 "turn" + std::to_string(k)));
    };
    std::map<std::string, std::vector<policy_response>> scripts{
        {"done", {scripted::with_calls(start_and_wait(a, "a"))}},
        {"turns", {turn(0), turn(1), turn(2)}},  // the turn budget ends it
        {"clock", {scripted::with_calls(start_and_wait(c, "c")),
                   scripted::with_calls({bash(in_foreground("sleep " + c[4]))})}},
        {"fails", {scripted::with_calls(start_and_wait(d, "d")), {}}},
    };
    scripts["fails"][1].finish_reason = "error";
    auto policy = system->spawn(scripted_agents, scripts);

    rollout_plan plan;
    plan.run_id = "end" + std::to_string(i);
    for (const auto& [id, script] : scripts) {
      plan.tasks.push_back(config().task);
      plan.tasks.back().id = id;
    }
    plan.episodes = static_cast<int32_t>(plan.tasks.size());
    plan.concurrency = plan.episodes;
    plan.retries = 0;
    plan.episodes_dir = dir.path() / "episodes";
    plan.base = config();
    plan.base.max_turns = 3;
    plan.base.wall_clock = 4s;
    auto results = std::make_shared<rollout_results>();
    rollout_services services{policy, compiler, gpu, recorder,
                              [this](const episode_config& e) { return real_tools(e.workdir); }};

    // What ran: every marker must have been seen, or the endings prove nothing.
    std::atomic<bool> running{true};
    std::set<std::string> seen;
    std::thread watcher{[&] {
      while (running) {
        for (const auto& p : marked_processes(all)) seen.insert(p.marker);
        std::this_thread::sleep_for(5ms);
      }
    }};
    auto manager = spawn_rollout_manager(*system, plan, services, results);
    caf::scoped_actor self{*system};
    self->request(manager, 60s, run_atom::value)
        .receive([&](int32_t n) { EXPECT_EQ(n, plan.episodes); },
                 [&](caf::error& e) { FAIL() << system->render(e); });
    EXPECT_EQ(wait_for_processes(all, 0, 2s), 0) << "iteration " << i;
    running = false;
    watcher.join();
    EXPECT_EQ(seen.size(), all.size()) << "iteration " << i;
    std::map<std::string, termination> reasons;
    for (const auto& s : results->episodes) reasons[s.task.id] = s.ended.reason;
    EXPECT_EQ(reasons["done"], termination::agent_done);
    EXPECT_EQ(reasons["turns"], termination::turn_budget);
    EXPECT_EQ(reasons["clock"], termination::timeout);
    EXPECT_EQ(reasons["fails"], termination::infrastructure_failure);
    self->send_exit(manager, caf::exit_reason::user_shutdown);
    self->send_exit(policy, caf::exit_reason::user_shutdown);
  }
}

// --- The process that holds the session dies ----------------------------------------------------

constexpr const char* owner_variable = "CUDA_AGENT_EPISODE_END_OWNER";

// Run by the tests below as a process of its own: a session with a detaching background shell
// and a call in flight; "started" once all five processes run; then it waits to be killed, or
// ("exit") leaves at once without any cleanup.
TEST(episode_end_owner, holds_a_session_until_it_dies) {
  const char* setup = std::getenv(owner_variable);
  if (setup == nullptr) GTEST_SKIP() << "the owner process of the SIGKILL tests, which start it";
  std::istringstream in{setup};
  std::string mode, workdir;
  in >> mode >> workdir;
  std::vector<std::string> m;
  for (std::string marker; in >> marker;) m.push_back(marker);
  sandbox box{workdir, tools::testing::test_sandbox_settings()};
  auto session = std::make_shared<tools::tool_session>(std::move(box), tools::tool_limits{});
  const auto call = [&](const json& args) {
    return tools::run_tool(*session, tool_call{"c", "Bash", args.dump()}, "episode-1");
  };
  testing::report_to_parent("starting");
  if (call(in_background(detaching_command(m))).is_error) std::_Exit(1);
  std::thread{[&] { call(in_foreground("sleep " + m[4])); }}.detach();
  if (wait_for_processes(m, 5, 10s) != 5) std::_Exit(1);
  testing::report_to_parent("started");
  if (mode == "exit") std::_Exit(0);
  std::this_thread::sleep_for(60s);
  std::_Exit(1);
}

class owner_death : public ::testing::Test {
 protected:
  std::string setup(const std::string& mode, const std::vector<std::string>& m) {
    std::string s = mode + " " + work.path().string();
    for (const auto& marker : m) s += " " + marker;
    return s;
  }
  tools::testing::scratch_workdir work;
};

TEST_F(owner_death, nothing_outlives_a_process_killed_with_sigkill) {
  testing::expect_nothing_outlives_owners("episode_end_owner.*", owner_variable, "kill", 30,
                                         [this](const std::string& mode, const std::vector<std::string>& m) {
                                           return setup(mode, m);
                                         });
}

TEST_F(owner_death, nothing_outlives_a_process_that_exits_without_cleaning_up) {
  testing::expect_nothing_outlives_owners("episode_end_owner.*", owner_variable, "exit", 5,
                                         [this](const std::string& mode, const std::vector<std::string>& m) {
                                           return setup(mode, m);
                                         });
}

}  // namespace
}  // namespace cuda_agent
