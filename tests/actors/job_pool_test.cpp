// The job pool with a real actor system and real worker actors under a real supervisor: credit
// bounds, the bounded queue, the waiting deadline, a worker that crashes mid-job, and a requester
// that dies while its job waits.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <caf/all.hpp>

#include "actors/job_pool.hpp"
#include "messages/registry.hpp"

namespace cuda_agent {
namespace {

using namespace std::chrono_literals;

struct worker_stats {
  std::atomic<int> running{0};
  std::atomic<int> most_running{0};
  std::atomic<int> jobs_run{0};
};

// A compiler worker stand-in that sleeps for the milliseconds named in job.arch, or crashes when
// solution_dir says so. It runs detached, like the real workers, whose jobs block.
compiler_actor::behavior_type sleepy_worker(compiler_actor::pointer, std::shared_ptr<worker_stats> stats) {
  return {[stats](const compile_job& job) {
    if (job.solution_dir == "crash") throw std::runtime_error{"injected worker crash"};
    const int now = ++stats->running;
    int seen = stats->most_running.load();
    while (now > seen && !stats->most_running.compare_exchange_weak(seen, now)) {}
    std::this_thread::sleep_for(std::chrono::milliseconds{std::stoi(job.arch)});
    --stats->running;
    ++stats->jobs_run;
    compile_result result;
    result.job_id = job.job_id;
    result.ok = true;
    return result;
  }};
}

struct pool_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<worker_stats> stats = std::make_shared<worker_stats>();
  supervisor_actor supervisor;
  compiler_pool_actor pool;

  void start(int workers, std::size_t max_waiting, std::chrono::milliseconds max_wait) {
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    supervisor_options sup{"compiler workers", restart_strategy::one_for_one, {}, {}};
    job_pool_options options;
    options.name = "compiler pool";
    for (int i = 0; i < workers; ++i) {
      const auto name = "compiler-" + std::to_string(i);
      sup.children.push_back(make_child(name, [s = stats](caf::actor_system& sys) {
        return sys.spawn<caf::detached>(sleepy_worker, s);
      }));
      options.workers.push_back(name);
    }
    supervisor = spawn_supervisor(*system, sup);
    options.supervisor = supervisor;
    options.max_waiting = max_waiting;
    options.max_wait = max_wait;
    pool = spawn_job_pool<compile_job>(*system, options);
  }

  void TearDown() override {
    if (!system) return;
    caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(supervisor, caf::exit_reason::user_shutdown);
    system->await_all_actors_done();
    system.reset();
  }

  static compile_job job(std::string id, int sleep_ms, std::string dir = "ok") {
    compile_job j;
    j.job_id = std::move(id);
    j.solution_dir = std::move(dir);
    j.arch = std::to_string(sleep_ms);
    return j;
  }
};

TEST_F(pool_fixture, never_runs_more_jobs_than_workers_and_finishes_them_all) {
  start(2, 64, 30s);
  caf::scoped_actor self{*system};
  constexpr int jobs = 8;
  for (int i = 0; i < jobs; ++i) self->send(pool, job("j" + std::to_string(i), 50));
  int done = 0;
  for (int i = 0; i < jobs; ++i)
    self->receive([&](compile_result& r) { done += r.ok; },
                  [](caf::error& e) { FAIL() << caf::to_string(e); },
                  caf::after(10s) >> [] { FAIL() << "a job never finished"; });
  EXPECT_EQ(done, jobs);
  EXPECT_EQ(stats->most_running.load(), 2);
}

TEST_F(pool_fixture, rejects_clearly_when_the_queue_is_full) {
  start(1, 2, 30s);
  caf::scoped_actor self{*system};
  // One runs, two wait, the fourth finds the queue full.
  for (int i = 0; i < 4; ++i)
    self->send(pool, job("j" + std::to_string(i), 300));
  std::vector<std::string> errors;
  int ok = 0;
  for (int i = 0; i < 4; ++i)
    self->receive([&](compile_result&) { ++ok; },
                  [&](caf::error& e) { errors.push_back(system->render(e)); },
                  caf::after(10s) >> [] { FAIL() << "no answer"; });
  EXPECT_EQ(ok, 3);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("queue full"), std::string::npos) << errors[0];
}

TEST_F(pool_fixture, a_job_that_waits_too_long_is_rejected_and_the_pool_goes_on) {
  start(1, 8, 200ms);
  caf::scoped_actor self{*system};
  std::string first, second;
  self->send(pool, job("slow", 800));
  self->send(pool, job("late", 10));
  for (int i = 0; i < 2; ++i)
    self->receive([&](compile_result& r) { first = r.job_id; },
                  [&](caf::error& e) { second = system->render(e); },
                  caf::after(10s) >> [] { FAIL() << "no answer"; });
  EXPECT_EQ(first, "slow");
  EXPECT_NE(second.find("waited 200 ms"), std::string::npos) << second;
  bool ok = false;
  self->request(pool, 10s, job("after", 10)).receive([&](compile_result& r) { ok = r.ok; },
                                                      [](caf::error& e) { FAIL() << caf::to_string(e); });
  EXPECT_TRUE(ok);
}

TEST_F(pool_fixture, a_worker_that_crashes_mid_job_fails_that_job_only_and_is_replaced) {
  start(1, 8, 30s);
  caf::scoped_actor self{*system};
  std::string error;
  self->request(pool, 10s, job("boom", 0, "crash"))
      .receive([](compile_result&) { FAIL() << "a crashed job cannot succeed"; },
               [&](caf::error& e) { error = system->render(e); });
  EXPECT_NE(error.find("compiler-0 failed"), std::string::npos) << error;
  // The supervisor restarts the worker; the pool finds the new one by name.
  bool ok = false;
  for (int attempt = 0; attempt < 50 && !ok; ++attempt) {
    self->request(pool, 10s, job("next", 0)).receive([&](compile_result& r) { ok = r.ok; },
                                                      [](caf::error&) {});
    if (!ok) std::this_thread::sleep_for(20ms);
  }
  EXPECT_TRUE(ok);
  int restarts = 0;
  self->request(supervisor, 5s, restarts_atom::value).receive([&](int n) { restarts = n; },
                                                              [](caf::error&) {});
  EXPECT_EQ(restarts, 1);
}

TEST_F(pool_fixture, a_requester_that_dies_while_waiting_loses_its_place) {
  start(1, 8, 30s);
  caf::scoped_actor self{*system};
  self->send(pool, job("holding", 400));
  // A short-lived episode asks, then crashes before its turn comes.
  auto doomed = system->spawn([pool = pool](caf::event_based_actor* ep) {
    ep->request(pool, 10s, job("orphan", 0)).then([](compile_result&) {});
    ep->quit(caf::make_error(caf::sec::runtime_error));
  });
  std::this_thread::sleep_for(100ms);
  self->send(pool, job("after", 0));
  std::vector<std::string> finished;
  for (int i = 0; i < 2; ++i)
    self->receive([&](compile_result& r) { finished.push_back(r.job_id); },
                  [](caf::error& e) { FAIL() << caf::to_string(e); },
                  caf::after(10s) >> [] { FAIL() << "no answer"; });
  EXPECT_EQ(finished, (std::vector<std::string>{"holding", "after"}));
  EXPECT_EQ(stats->jobs_run.load(), 2) << "the dead requester's job must not run";
}

}  // namespace
}  // namespace cuda_agent
