// The compiler pool with real compiler workers running real builds of tests/kernels/build/fixtures (the
// object cache shared with build_test, so the binding compiles once): a broken solution is a
// result with diagnostics for the agent, a build that cannot run at all is an error.
#include "actors/compiler_pool.hpp"

#include <chrono>
#include <filesystem>
#include <string>
#include <map>
#include <variant>

#include <caf/all.hpp>
#include <gtest/gtest.h>

#include "actors/process/spawn.hpp"
#include "config/settings.hpp"
#include "messages/registry.hpp"

namespace cuda_agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const fs::path kFixtures = fs::path(CUDA_AGENT_SOURCE_DIR) / "tests" / "kernels" / "build" / "fixtures";

struct compiler_pool_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  worker_pool<elastic_compiler_pool_actor> pool;

  static build::build_settings test_settings() {
    auto s = build::build_settings::from(settings{});
    s.cache_dir = CUDA_AGENT_BUILD_TEST_CACHE;
    s.timeout = 10min;
    s.jobs = 2;
    // The sandbox is build_test's subject; here bubblewrap is used where it is installed.
    s.sandbox = find_program(s.bwrap).empty() ? "none" : "bwrap";
    return s;
  }

  void start(build::build_settings settings, int32_t workers) {
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    worker_pool_limits limits;
    limits.workers = workers;
    limits.job_timeout = 15min;
    pool = spawn_compiler_pool(*system, std::move(settings), limits);
  }

  void TearDown() override {
    if (!system) return;
    stop_worker_pool(pool);
    system->await_all_actors_done();
    system.reset();
  }

  static compile_job job_for(const std::string& fixture, std::string id) {
    compile_job job;
    job.job_id = std::move(id);
    job.episode_id = "ep";
    job.solution_dir = (kFixtures / fixture).string();
    job.device = "cpu";
    return job;
  }

  std::variant<compile_result, std::string> ask(const compile_job& job) {
    caf::scoped_actor self{*system};
    std::variant<compile_result, std::string> answer = std::string{"no answer"};
    self->request(pool.pool, 15min, job)
        .receive([&](compile_result& r) { answer = std::move(r); },
                 [&](caf::error& e) { answer = system->render(e); });
    return answer;
  }
};

TEST_F(compiler_pool_fixture, builds_an_honest_solution_into_a_module) {
  start(test_settings(), 1);
  const auto answer = ask(job_for("cpu_add", "j1"));
  ASSERT_TRUE(std::holds_alternative<compile_result>(answer)) << std::get<std::string>(answer);
  const auto& built = std::get<compile_result>(answer);
  EXPECT_EQ(built.job_id, "j1");
  EXPECT_TRUE(built.ok) << built.diagnostics << built.error;
  EXPECT_TRUE(fs::is_regular_file(built.module_path)) << built.module_path;
}

TEST_F(compiler_pool_fixture, a_broken_solution_is_a_result_with_diagnostics) {
  start(test_settings(), 2);
  caf::scoped_actor self{*system};
  // Both at once, on two workers: the broken one does not disturb the honest one.
  self->send(pool.pool, job_for("syntax_error", "bad"));
  self->send(pool.pool, job_for("cpu_add", "good"));
  std::map<std::string, compile_result> results;
  for (int i = 0; i < 2; ++i)
    self->receive([&](compile_result& r) { results[r.job_id] = r; },
                  [&](caf::error& e) { ADD_FAILURE() << system->render(e); },
                  caf::after(15min) >> [] { ADD_FAILURE() << "a build was never answered"; });
  ASSERT_EQ(results.size(), 2u);
  EXPECT_FALSE(results["bad"].ok);
  EXPECT_NE(results["bad"].diagnostics.find("error"), std::string::npos) << results["bad"].diagnostics;
  EXPECT_TRUE(results["bad"].module_path.empty());
  EXPECT_TRUE(results["good"].ok) << results["good"].diagnostics;
}

TEST_F(compiler_pool_fixture, a_build_that_cannot_run_is_an_error_and_the_worker_goes_on) {
  auto settings = test_settings();
  settings.sandbox = "bwrap";
  settings.bwrap = "/nonexistent/bwrap";
  start(settings, 1);
  const auto answer = ask(job_for("cpu_add", "j1"));
  ASSERT_TRUE(std::holds_alternative<std::string>(answer)) << "an unrunnable build was a result";
  EXPECT_NE(std::get<std::string>(answer).find("the build could not run"), std::string::npos)
      << std::get<std::string>(answer);
  EXPECT_NE(std::get<std::string>(answer).find("/nonexistent/bwrap"), std::string::npos)
      << std::get<std::string>(answer);
  // The same worker answers the next job too (an error again: the settings are the same).
  EXPECT_TRUE(std::holds_alternative<std::string>(ask(job_for("cpu_add", "j2"))));
}

}  // namespace
}  // namespace cuda_agent
