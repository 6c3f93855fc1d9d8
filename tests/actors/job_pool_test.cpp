// The job pool with a real actor system and real worker actors under a real supervisor: credit
// bounds, the bounded queue, the waiting deadline, a worker that crashes mid-job, and a requester
// that dies while its job waits. Then nodes' workers: added while the pool runs, lost or dropped
// mid-job (the job runs elsewhere, once), and a late answer from a dropped node.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
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

// --- Nodes' workers -----------------------------------------------------------------------------

// A node's worker stand-in: sleeps for the milliseconds in job.arch, then answers with its tag in
// module_path, so the test sees which node answered; tagged "fails", it answers an error.
compiler_actor::behavior_type tagged_worker(compiler_actor::pointer, std::string tag, std::shared_ptr<worker_stats> stats) {
  return {[tag, stats](const compile_job& job) -> caf::result<compile_result> {
    std::this_thread::sleep_for(std::chrono::milliseconds{std::stoi(job.arch)});
    ++stats->jobs_run;
    if (tag == "fails") return caf::make_error(caf::sec::runtime_error, "the node's worker failed");
    compile_result result;
    result.job_id = job.job_id;
    result.ok = true;
    result.module_path = tag;
    return result;
  }};
}

// A node's worker that takes a job and never answers (the node hangs); event-based, so an exit
// message ends it at once, as a lost connection ends a real node's remote worker.
compiler_actor::behavior_type silent_worker(compiler_actor::stateful_pointer<std::vector<caf::response_promise>> self) {
  return {[self](const compile_job&) -> caf::result<compile_result> {
    auto promise = self->make_response_promise<compile_result>();
    self->state.push_back(promise);
    return promise;
  }};
}

// Keeps the type of every record the pool logs.
struct record_list {
  std::mutex mutex;
  std::vector<std::string> types;
  std::vector<std::string> all() {
    std::lock_guard<std::mutex> lock{mutex};
    return types;
  }
};

recorder_actor::behavior_type listing_recorder(recorder_actor::pointer, std::shared_ptr<record_list> list) {
  return {[list](record_atom, const recorded_message& r) {
            std::lock_guard<std::mutex> lock{list->mutex};
            list->types.push_back(r.type);
          },
          [](flush_atom) {}};
}

struct node_pool_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<worker_stats> stats = std::make_shared<worker_stats>();
  std::shared_ptr<record_list> records = std::make_shared<record_list>();
  elastic_compiler_pool_actor pool;

  void start(int32_t max_requeues = 3) {
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    job_pool_options options;
    options.name = "compiler pool";
    options.open_to_nodes = true;  // no worker of its own
    options.max_requeues = max_requeues;
    options.recorder = system->spawn(listing_recorder, records);
    options.role = "compiler";
    pool = spawn_job_pool<compile_job>(*system, options);
  }

  compiler_actor node_worker(const std::string& tag) {
    return system->spawn<caf::detached>(tagged_worker, tag, stats);
  }

  pool_stats stats_now(caf::scoped_actor& self) {
    pool_stats s;
    self->request(pool, 5s, pool_stats_atom::value).receive([&](pool_stats& r) { s = r; }, [](caf::error&) {});
    return s;
  }

  void TearDown() override {
    if (!system) return;
    caf::anon_send_exit(pool, caf::exit_reason::user_shutdown);
    system->await_all_actors_done();
    system.reset();
  }
};

TEST_F(node_pool_fixture, a_job_waits_for_a_node_and_a_lost_nodes_job_runs_on_the_next_once) {
  start();
  caf::scoped_actor self{*system};
  compiler_actor lost = system->spawn(silent_worker);
  self->send(pool, add_workers_atom::value, std::string{"node-a"}, lost, int32_t{1});
  // The job goes to node-a, which hangs; 200 ms later its worker dies (the connection is gone).
  self->send(pool, pool_fixture::job("j1", 50));
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(stats_now(self).busy, 1);
  self->send_exit(lost, caf::exit_reason::kill);
  std::this_thread::sleep_for(200ms);
  auto s = stats_now(self);
  EXPECT_EQ(s.capacity, 0) << "the lost node's worker must be gone";
  EXPECT_EQ(s.waiting, 1) << "its job must wait again, not fail";
  self->send(pool, add_workers_atom::value, std::string{"node-b"}, node_worker("node-b"), int32_t{2});
  int answers = 0;
  self->receive([&](compile_result& r) { ++answers; EXPECT_EQ(r.module_path, "node-b"); },
                [](caf::error& e) { FAIL() << caf::to_string(e); },
                caf::after(10s) >> [] { FAIL() << "the requeued job never finished"; });
  self->receive([&](compile_result&) { ++answers; }, [&](caf::error&) { ++answers; }, caf::after(2500ms) >> [] {});
  EXPECT_EQ(answers, 1) << "a job is answered once";
  s = stats_now(self);
  ASSERT_EQ(s.nodes.size(), 1u);
  EXPECT_EQ(s.nodes[0].node_id, "node-b");
  EXPECT_EQ(s.nodes[0].workers, 2);
  EXPECT_EQ(s.nodes[0].done, 1);
  const auto types = records->all();
  EXPECT_EQ(std::count(types.begin(), types.end(), "job_requeued"), 1);
}

// node-a (a worker tagged `a_tag`) takes a job of `job_ms`; 100 ms in, it is given up (as after
// missed heartbeats) while its worker still runs the job, and node-b joins. Returns who answered
// the requester within `wait_after` of node-b's answer: node-a's own answer or error must not.
std::vector<std::string> requeue_from_a_running_node(node_pool_fixture& f, caf::scoped_actor& self,
                                                     const std::string& a_tag, int job_ms,
                                                     std::chrono::milliseconds wait_after) {
  self->send(f.pool, add_workers_atom::value, std::string{"node-a"}, f.node_worker(a_tag), int32_t{1});
  self->send(f.pool, pool_fixture::job("j1", job_ms));
  std::this_thread::sleep_for(100ms);
  self->send(f.pool, drop_node_atom::value, std::string{"node-a"}, std::string{"lost: connection timed out"});
  self->send(f.pool, add_workers_atom::value, std::string{"node-b"}, f.node_worker("node-b"), int32_t{1});
  std::vector<std::string> answered_by;
  self->receive([&](compile_result& r) { answered_by.push_back(r.module_path); },
                [](caf::error& e) { FAIL() << caf::to_string(e); }, caf::after(10s) >> [] { FAIL() << "no answer"; });
  self->receive([&](compile_result& r) { answered_by.push_back(r.module_path); },
                [](caf::error& e) { ADD_FAILURE() << "delivered: " << caf::to_string(e); },
                caf::after(wait_after) >> [] {});
  return answered_by;
}

TEST_F(node_pool_fixture, an_answer_from_a_dropped_node_comes_too_late_and_is_dropped) {
  start();
  caf::scoped_actor self{*system};
  // node-a's answer arrives about 500 ms after it was given up.
  EXPECT_EQ(requeue_from_a_running_node(*this, self, "node-a", 600, 1500ms), std::vector<std::string>{"node-b"});
  EXPECT_EQ(stats->jobs_run.load(), 2) << "both nodes ran it; one answer counted";
  const auto types = records->all();
  EXPECT_EQ(std::count(types.begin(), types.end(), "job_requeued"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "late_answer"), 1);
  EXPECT_EQ(stats_now(self).busy, 0) << "the late answer must not free or take a credit";
}

TEST_F(node_pool_fixture, an_error_from_a_dropped_node_is_dropped_without_a_late_answer) {
  start();
  caf::scoped_actor self{*system};
  // node-a's error arrives about 300 ms after it was given up: neither delivered nor an answer.
  EXPECT_EQ(requeue_from_a_running_node(*this, self, "fails", 400, 1000ms), std::vector<std::string>{"node-b"});
  EXPECT_EQ(stats->jobs_run.load(), 2);
  const auto types = records->all();
  EXPECT_EQ(std::count(types.begin(), types.end(), "late_answer"), 0);
  EXPECT_EQ(stats_now(self).busy, 0);
}

TEST_F(node_pool_fixture, a_job_lost_more_often_than_allowed_fails_naming_the_setting) {
  start(0);
  caf::scoped_actor self{*system};
  self->send(pool, add_workers_atom::value, std::string{"node-a"}, node_worker("node-a"), int32_t{1});
  self->send(pool, pool_fixture::job("j1", 1000));
  std::this_thread::sleep_for(100ms);
  self->send(pool, drop_node_atom::value, std::string{"node-a"}, std::string{"left: stopped"});
  std::string error;
  self->receive([](compile_result&) { FAIL() << "the job must fail"; }, [&](caf::error& e) { error = system->render(e); },
                caf::after(5s) >> [] { FAIL() << "no answer"; });
  EXPECT_NE(error.find("cluster.max_requeues"), std::string::npos) << error;
}

TEST_F(node_pool_fixture, a_pool_closed_to_nodes_without_workers_refuses_at_once) {
  register_message_types(cfg);
  system = std::make_unique<caf::actor_system>(cfg);
  job_pool_options options;
  options.name = "compiler pool";
  pool = spawn_job_pool<compile_job>(*system, options);
  caf::scoped_actor self{*system};
  std::string error;
  self->request(pool, 5s, pool_fixture::job("j1", 1)).receive([](compile_result&) {}, [&](caf::error& e) {
    error = system->render(e);
  });
  EXPECT_NE(error.find("has no workers"), std::string::npos) << error;
}

}  // namespace
}  // namespace cuda_agent
