// The GPU pool with real profiler slots: each slot owns a real harness worker process (on the CPU
// device here) that runs real candidates. What the pool adds to harness_process: jobs reach a
// slot through the credit, a candidate that kills its worker costs only that job, and a broken
// task comes back as an error (an infrastructure failure) instead of a verdict on the candidate.
#include "actors/gpu_pool.hpp"

#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <variant>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "messages/registry.hpp"
#include "tests/actors/harness/built_candidate.hpp"

namespace cuda_agent {
namespace {

using namespace std::chrono_literals;
using harness::built_candidate;

struct gpu_pool_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  worker_pool<elastic_gpu_pool_actor> pool;

  void start(int32_t slots) {
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    worker_pool_limits limits;
    limits.workers = slots;
    limits.job_timeout = 5min;
    pool = spawn_gpu_pool(*system, harness::candidate_harness_settings(), "cpu", limits);
  }

  void TearDown() override {
    if (!system) return;
    stop_worker_pool(pool);
    system->await_all_actors_done();
    system.reset();
  }

  static verify_job verify_of(const built_candidate& c, std::string id) {
    auto job = harness::verify_job_for(c, std::move(id));
    job.episode_id = "ep";
    return job;
  }

  // The pool's answer to one job: its verdict, or the error text.
  std::variant<verify_result, std::string> ask(const verify_job& job) {
    caf::scoped_actor self{*system};
    std::variant<verify_result, std::string> answer = std::string{"no answer"};
    self->request(pool.pool, 5min, job)
        .receive([&](verify_result& r) { answer = std::move(r); },
                 [&](caf::error& e) { answer = system->render(e); });
    return answer;
  }
};

TEST_F(gpu_pool_fixture, a_slot_judges_on_after_a_candidate_crashes_its_worker) {
  start(1);
  const auto honest = harness::build("honest_elementwise");
  const auto crashing = harness::build("fault_segfault");

  const auto first = ask(verify_of(honest, "j1"));
  ASSERT_TRUE(std::holds_alternative<verify_result>(first)) << std::get<std::string>(first);
  EXPECT_TRUE(std::get<verify_result>(first).correct) << std::get<verify_result>(first).error;

  // The crash is the candidate's: a verdict (incorrect, with the reason), not a pool error.
  const auto crashed = ask(verify_of(crashing, "j2"));
  ASSERT_TRUE(std::holds_alternative<verify_result>(crashed)) << std::get<std::string>(crashed);
  EXPECT_FALSE(std::get<verify_result>(crashed).correct);
  EXPECT_NE(std::get<verify_result>(crashed).error.find("SIGSEGV"), std::string::npos)
      << std::get<verify_result>(crashed).error;

  // The one slot takes the next job.
  const auto after = ask(verify_of(honest, "j3"));
  ASSERT_TRUE(std::holds_alternative<verify_result>(after)) << std::get<std::string>(after);
  EXPECT_TRUE(std::get<verify_result>(after).correct) << std::get<verify_result>(after).error;
  EXPECT_EQ(std::get<verify_result>(after).job_id, "j3");
}

TEST_F(gpu_pool_fixture, a_broken_task_is_an_error_not_a_verdict_on_the_candidate) {
  start(1);
  const auto honest = harness::build("honest_elementwise");
  const auto broken_task = honest.solution.parent_path() / "broken_task.py";
  std::ofstream{broken_task} << "raise RuntimeError('this task cannot import')\n";
  auto job = verify_of(honest, "j1");
  job.task_path = broken_task.string();
  const auto answer = ask(job);
  ASSERT_TRUE(std::holds_alternative<std::string>(answer)) << "the candidate was judged";
  EXPECT_NE(std::get<std::string>(answer).find("the task is broken, not the candidate"),
            std::string::npos)
      << std::get<std::string>(answer);
  // And the slot is still there for a good task.
  const auto next = ask(verify_of(honest, "j2"));
  ASSERT_TRUE(std::holds_alternative<verify_result>(next)) << std::get<std::string>(next);
  EXPECT_TRUE(std::get<verify_result>(next).correct);
}

TEST_F(gpu_pool_fixture, jobs_beyond_the_slots_wait_and_all_are_answered) {
  start(2);
  const auto honest = harness::build("honest_elementwise");
  caf::scoped_actor self{*system};
  constexpr int jobs = 5;
  for (int i = 0; i < jobs; ++i) self->send(pool.pool, verify_of(honest, "j" + std::to_string(i)));
  std::set<std::string> answered;
  for (int i = 0; i < jobs; ++i)
    self->receive([&](verify_result& r) { if (r.correct) answered.insert(r.job_id); },
                  [&](caf::error& e) { ADD_FAILURE() << system->render(e); },
                  caf::after(5min) >> [] { ADD_FAILURE() << "a job was never answered"; });
  EXPECT_EQ(answered.size(), static_cast<std::size_t>(jobs));
}

}  // namespace
}  // namespace cuda_agent
