// The rollout manager's own logic with scripted peers: the concurrency bound, retries of
// infrastructure failures only, and the retry budget. Episode directories are real.
#include "tests/actors/scripted_peers.hpp"

#include <algorithm>
#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "actors/rollout_manager.hpp"
#include "actors/supervisor.hpp"

namespace cuda_agent {
namespace {

using namespace scripted;

// A policy that answers "done" from a thread of its own per request (so requests overlap as
// they do against a real server), counts the episodes waiting on it at once, and answers an
// error, as a dead server would, to episode ids that contain `fail_marker`.
policy_actor::behavior_type counting_policy(policy_actor::pointer self,
                                            std::shared_ptr<std::atomic<int>> inside,
                                            std::shared_ptr<std::atomic<int>> most,
                                            std::string fail_marker) {
  return policy_behavior([=](const policy_request& request) -> caf::result<policy_response> {
    auto promise = self->make_response_promise<policy_response>();
    std::thread([=]() mutable {
      const int now = ++*inside;
      int seen = most->load();
      while (now > seen && !most->compare_exchange_weak(seen, now)) {}
      std::this_thread::sleep_for(30ms);
      --*inside;
      if (!fail_marker.empty() && request.episode_id.find(fail_marker) != std::string::npos) {
        promise.deliver(caf::make_error(caf::sec::runtime_error, "model server connection refused"));
        return;
      }
      policy_response r = done();
      r.episode_id = request.episode_id;
      r.turn = request.turn;
      promise.deliver(r);
    }).detach();
    return promise;
  });
}

// A policy that answers "done" at once, but crashes (quits with an error) on a request from the
// episode `crash_on`, taking that request and any others in its mailbox with it.
policy_actor::behavior_type crashing_policy(policy_actor::pointer self, std::string crash_on) {
  return policy_behavior([=](const policy_request& request) -> caf::result<policy_response> {
    if (request.episode_id == crash_on) {
      self->quit(caf::make_error(caf::sec::runtime_error, "the policy actor crashed"));
      return caf::make_error(caf::sec::runtime_error, "the policy actor crashed");
    }
    policy_response r = done();
    r.episode_id = request.episode_id;
    r.turn = request.turn;
    return r;
  });
}

struct rollout_fixture : peers_fixture {
  std::shared_ptr<std::atomic<int>> inside = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> most = std::make_shared<std::atomic<int>>(0);
  std::atomic<int> tools_started{0};

  // A plan of `episodes` episodes of the fixture's task, `concurrency` at a time.
  rollout_plan plan_for(std::string run_id, int32_t episodes, int32_t concurrency) {
    rollout_plan plan;
    plan.run_id = std::move(run_id);
    plan.tasks = {config().task};
    plan.episodes = episodes;
    plan.concurrency = concurrency;
    plan.episodes_dir = dir.path() / "episodes";
    plan.base = config();
    return plan;
  }

  // Runs `episodes` episodes of the fixture's task, `concurrency` at a time, against a policy
  // that ends the recorder; returns the error the run ended with and what it settled. Stops the
  // manager and the policy.
  std::pair<std::string, std::shared_ptr<rollout_results>> run_losing_the_log(
      policy_actor policy, std::string run_id, int32_t episodes, int32_t concurrency) {
    rollout_plan plan = plan_for(std::move(run_id), episodes, concurrency);
    auto results = std::make_shared<rollout_results>();
    rollout_services services{policy, compiler, gpu, recorder,
                              [this](const episode_config&) { return tools; }};
    auto manager = spawn_rollout_manager(*system, plan, services, results);
    caf::scoped_actor self{*system};
    std::string error;
    self->request(manager, 60s, run_atom::value)
        .receive([](int32_t) { FAIL() << "the run finished without its log"; },
                 [&](caf::error& e) { error = system->render(e); });
    self->send_exit(manager, caf::exit_reason::user_shutdown);
    self->send_exit(policy, caf::exit_reason::user_shutdown);
    return {error, results};
  }

  // Tools for one episode (the manager stops them after it) that answer every call "ok".
  tools_actor own_tools() {
    return system->spawn([](tools_actor::pointer) -> tools_actor::behavior_type {
      return {[](const tool_request& r) {
        return tool_result{r.episode_id, r.call.call_id, r.call.tool, "ok", 0, false, false, 1};
      }};
    });
  }

  std::vector<episode_summary> run_rollout(int episodes, int concurrency, int retries,
                                           std::string fail_marker = {},
                                           supervisor_actor policy_supervisor = {}) {
    auto policy = system->spawn(counting_policy, inside, most, fail_marker);
    rollout_plan plan = plan_for("r1", episodes, concurrency);
    plan.tasks.push_back(plan.tasks[0]);
    plan.tasks[1].id = "smoke-mul";
    plan.retries = retries;
    auto results = std::make_shared<rollout_results>();
    rollout_services services{policy, compiler, gpu, recorder, [this](const episode_config& c) {
                                ++tools_started;
                                EXPECT_TRUE(std::filesystem::exists(c.workdir / "model.py"));
                                return own_tools();
                              },
                              policy_supervisor};
    auto manager = spawn_rollout_manager(*system, plan, services, results);
    caf::scoped_actor self{*system};
    int32_t count = -1;
    self->request(manager, 60s, run_atom::value)
        .receive([&](int32_t n) { count = n; }, [](caf::error& e) { FAIL() << caf::to_string(e); });
    EXPECT_EQ(count, episodes);
    self->send_exit(manager, caf::exit_reason::user_shutdown);
    self->send_exit(policy, caf::exit_reason::user_shutdown);
    std::lock_guard<std::mutex> lock{results->mutex};
    return results->episodes;
  }
};

TEST_F(rollout_fixture, runs_every_episode_with_at_most_k_at_once) {
  const auto results = run_rollout(6, 2, 0);
  ASSERT_EQ(results.size(), 6u);
  EXPECT_EQ(most->load(), 2);
  for (const auto& r : results) {
    EXPECT_EQ(r.ended.reason, termination::agent_done) << r.episode_id;
    EXPECT_EQ(r.verdict.reward, 3);
    EXPECT_EQ(r.attempts, 1);
  }
  EXPECT_EQ(results[0].task.id == "smoke-add" || results[0].task.id == "smoke-mul", true);
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "episodes" / "r1-0005" / "task" / "model.py"));
}

TEST_F(rollout_fixture, retries_infrastructure_failures_but_never_a_candidate_failure) {
  build_ok = false;  // every candidate fails to build: reward -1, an agent's result
  const auto results = run_rollout(3, 3, 2, "r1-0001");
  ASSERT_EQ(results.size(), 3u);
  for (const auto& r : results) {
    if (r.episode_id.rfind("r1-0001", 0) == 0) {
      // The dead server is infrastructure: retried until the budget is spent, then reported.
      EXPECT_EQ(r.attempts, 3);
      EXPECT_EQ(r.ended.reason, termination::infrastructure_failure);
      EXPECT_EQ(r.episode_id, "r1-0001-retry2");
    } else {
      EXPECT_EQ(r.attempts, 1) << "a candidate's failure must not be retried";
      EXPECT_EQ(r.verdict.reward, -1);
      EXPECT_EQ(r.ended.reason, termination::agent_done);
    }
  }
}

TEST_F(rollout_fixture, a_crashed_policy_is_restarted_and_the_episodes_it_failed_are_retried) {
  supervisor_options options;
  options.name = "policy";
  options.children.push_back(make_child("policy", [](caf::actor_system& sys) {
    return sys.spawn(crashing_policy, std::string{"r1-0002"});
  }));
  auto supervisor = spawn_supervisor(*system, options);
  const auto results = run_rollout(4, 2, 3, {}, supervisor);
  ASSERT_EQ(results.size(), 4u);
  bool crashed_one_seen = false;
  for (const auto& r : results) {
    EXPECT_EQ(r.ended.reason, termination::agent_done) << r.episode_id << ": " << r.ended.error;
    EXPECT_EQ(r.verdict.reward, 3) << r.episode_id;
    if (r.episode_id.rfind("r1-0002-retry", 0) == 0) {
      crashed_one_seen = true;
      EXPECT_GE(r.attempts, 2);
    }
  }
  EXPECT_TRUE(crashed_one_seen) << "the episode whose request crashed the policy was not retried";
  caf::scoped_actor self{*system};
  self->request(supervisor, 10s, restarts_atom::value)
      .receive([](int32_t restarts) { EXPECT_EQ(restarts, 1); },
               [](caf::error& e) { FAIL() << caf::to_string(e); });
  self->send_exit(supervisor, caf::exit_reason::user_shutdown);
}

TEST_F(rollout_fixture, a_dead_recorder_stops_the_rollout_with_an_error_that_says_so) {
  // The policy ends the recorder at the first turn, as a full disk would (recorder.hpp), and
  // answers each turn 50 ms after it has seen the recorder go (a busy recorder can take a while to
  // read its exit), so that the run is still going when the recorder is gone.
  auto policy = system->spawn([rec = recorder](policy_actor::pointer self) {
    auto recorder_gone = std::make_shared<std::promise<void>>();
    auto gone = std::make_shared<std::shared_future<void>>(recorder_gone->get_future().share());
    self->monitor(rec);
    self->set_down_handler([=](caf::down_msg&) { recorder_gone->set_value(); });
    return policy_behavior([=](const policy_request& request) -> caf::result<policy_response> {
      self->send_exit(rec, caf::make_error(caf::sec::runtime_error, "no space left on device"));
      auto promise = self->make_response_promise<policy_response>();
      std::thread([=]() mutable {
        gone->wait();
        std::this_thread::sleep_for(50ms);
        policy_response r = done();
        r.episode_id = request.episode_id;
        r.turn = request.turn;
        promise.deliver(r);
      }).detach();
      return promise;
    });
  });
  const auto [error, results] = run_losing_the_log(policy, "r2", 6, 2);
  EXPECT_NE(error.find("the recorder stopped"), std::string::npos) << error;
  EXPECT_NE(error.find("no space left on device"), std::string::npos) << error;
  std::lock_guard<std::mutex> lock{results->mutex};
  EXPECT_LT(results->episodes.size(), 6u) << "episodes went on after the log was lost";
}

TEST_F(rollout_fixture, a_recorder_that_dies_as_the_last_episode_ends_fails_the_run) {
  // The only episode's one turn ends the recorder and is answered at once: the episode can settle
  // before the manager hears of the death, and the run must still not claim a complete log.
  auto policy = system->spawn([rec = recorder](policy_actor::pointer self) {
    return policy_behavior([=](const policy_request& request) {
      self->send_exit(rec, caf::make_error(caf::sec::runtime_error, "no space left on device"));
      policy_response r = done();
      r.episode_id = request.episode_id;
      r.turn = request.turn;
      return r;
    });
  });
  const auto [error, results] = run_losing_the_log(policy, "r3", 1, 1);
  EXPECT_NE(error.find("the recorder stopped"), std::string::npos) << error;
}

// What a test learner got, readable from the test's thread: `received` is stored after each
// push_back, so a reader that sees n there may read the first n trajectories.
struct received_trajectories {
  std::vector<trajectory> items;
  std::atomic<std::size_t> received{0};
};

// A learner (learner_actor.hpp's protocol) that answers each `batch`-th trajectory with a
// learner_update 50 ms later, as a step would take, counting what it got.
// The step's 50 ms are a timer to itself (wake_atom, step); meanwhile it keeps whom to answer.
using slow_learner_actor = learner_actor::extend<caf::reacts_to<wake_atom, int64_t>>;
slow_learner_actor::behavior_type slow_learner(slow_learner_actor::pointer self, int32_t batch,
                                               std::shared_ptr<std::atomic<int>> trained,
                                               std::shared_ptr<received_trajectories> log) {
  auto waiting = std::make_shared<std::map<int64_t, learner_listener_actor>>();
  return {[=](trajectory& t) {
            auto* got = &log->items;
            got->push_back(std::move(t));
            log->received.store(got->size(), std::memory_order_release);
            if (got->size() % static_cast<std::size_t>(batch) != 0) return;
            const auto step = static_cast<int64_t>(got->size() / batch);
            (*waiting)[step] = caf::actor_cast<learner_listener_actor>(self->current_sender());
            self->delayed_send(self, 50ms, wake_atom::value, step);
          },
          [](flush_atom) { return learner_update{}; },
          [=](wake_atom, int64_t step) {
            trained->store(static_cast<int>(step));
            learner_update u;
            u.step = step;
            u.weight_version = step;
            self->send(waiting->at(step), u);
            waiting->erase(step);
          }};
}

// Answers "done", noting for each episode's first request how many batches the learner had
// consumed by then; an error (a dead server) for episodes whose id contains `fail_marker`.
policy_actor::behavior_type noting_policy(policy_actor::pointer, std::shared_ptr<std::atomic<int>> trained,
                                          std::shared_ptr<std::map<std::string, int>> first_request,
                                          std::string fail_marker) {
  return policy_behavior([=](const policy_request& request) -> caf::result<policy_response> {
    first_request->emplace(request.episode_id, trained->load());
    if (request.episode_id.find(fail_marker) != std::string::npos)
      return caf::make_error(caf::sec::runtime_error, "model server connection refused");
    policy_response r = done();
    r.episode_id = request.episode_id;
    r.turn = request.turn;
    return r;
  });
}

TEST_F(rollout_fixture, with_a_learner_episodes_start_only_within_the_staleness_bound) {
  for (const int32_t staleness : {0, 1}) {
    auto trained = std::make_shared<std::atomic<int>>(0);
    auto log = std::make_shared<received_trajectories>();
    auto first_request = std::make_shared<std::map<std::string, int>>();
    const std::string run_id = "s" + std::to_string(staleness);
    auto policy = system->spawn(noting_policy, trained, first_request, run_id + "-0001");
    auto learner = system->spawn(slow_learner, 2, trained, log);
    rollout_plan plan = plan_for(run_id, 8, 8);  // concurrency 8: only the bound holds episodes back
    plan.retries = 0;  // episode 0001's dead server settles it as an infrastructure failure
    plan.batch_episodes = 2;
    plan.staleness = staleness;
    auto results = std::make_shared<rollout_results>();
    rollout_services services{policy, compiler, gpu, recorder, [this](const episode_config&) { return own_tools(); }};
    services.learner = learner;
    auto manager = spawn_rollout_manager(*system, plan, services, results);
    caf::scoped_actor self{*system};
    int32_t count = -1;
    self->request(manager, 60s, run_atom::value)
        .receive([&](int32_t n) { count = n; }, [](caf::error& e) { FAIL() << caf::to_string(e); });
    EXPECT_EQ(count, 8) << "staleness " << staleness;
    // Every settled episode reaches the learner, the infrastructure failure too (so that its
    // batch closes). The run's answer can overtake the last trajectories in the learner's mailbox on a
    // loaded machine: wait for them, boundedly.
    const auto deadline = std::chrono::steady_clock::now() + 20s;
    while (log->received.load(std::memory_order_acquire) < 8 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);
    self->send_exit(manager, caf::exit_reason::user_shutdown);
    self->send_exit(policy, caf::exit_reason::user_shutdown);
    self->send_exit(learner, caf::exit_reason::user_shutdown);
    ASSERT_EQ(first_request->size(), 8u);
    for (const auto& [id, batches_trained] : *first_request) {
      const int index = std::stoi(id.substr(run_id.size() + 1, 4));
      EXPECT_LE(index / 2, batches_trained + staleness) << id << " started too early (staleness " << staleness << ")";
    }
    ASSERT_EQ(log->received.load(std::memory_order_acquire), 8u) << "staleness " << staleness;
    const auto* got = &log->items;
    EXPECT_EQ(std::count_if(got->begin(), got->end(),
                            [](const trajectory& t) { return t.reason == termination::infrastructure_failure; }),
              1);
  }
}

TEST_F(rollout_fixture, a_learner_that_stops_ends_the_run_with_an_error_that_says_so) {
  auto trained = std::make_shared<std::atomic<int>>(0);
  auto first_request = std::make_shared<std::map<std::string, int>>();
  auto policy = system->spawn(noting_policy, trained, first_request, "none");
  // Quits at the first trajectory, as a learner whose step threw does.
  auto learner = system->spawn([](learner_actor::pointer self) -> learner_actor::behavior_type {
    return {[=](trajectory&) { self->quit(caf::make_error(caf::sec::runtime_error, "the step failed")); },
            [](flush_atom) { return learner_update{}; }};
  });
  rollout_plan plan = plan_for("dead", 6, 2);
  plan.batch_episodes = 1;
  plan.staleness = 0;
  auto results = std::make_shared<rollout_results>();
  rollout_services services{policy, compiler, gpu, recorder, [this](const episode_config&) { return own_tools(); }};
  services.learner = learner;
  auto manager = spawn_rollout_manager(*system, plan, services, results);
  caf::scoped_actor self{*system};
  std::string error;
  self->request(manager, 60s, run_atom::value)
      .receive([](int32_t) { FAIL() << "the run finished without its learner"; },
               [&](caf::error& e) { error = system->render(e); });
  EXPECT_NE(error.find("the learner stopped"), std::string::npos) << error;
  EXPECT_LT(first_request->size(), 6u) << "episodes kept starting without a learner";
  self->send_exit(manager, caf::exit_reason::user_shutdown);
  self->send_exit(policy, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace cuda_agent
