// Jobs shipped to a node in-process: the remote workers (coordinator side) and the node endpoint,
// with stand-in pools behind the endpoint. Files a candidate controls (its solution directory,
// the module built from it) that cannot travel are the candidate's failure on whichever side the
// limit is met: a failed build, a verify that is not correct, reward -1. Only our own files (the
// task) make an infrastructure error. (Real node processes over TCP: test_nodes.py.)
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>

#include <caf/all.hpp>

#include "actors/cluster/node_endpoint.hpp"
#include "actors/cluster/remote_worker.hpp"
#include "tests/actors/scripted_peers.hpp"
#include "tests/actors/cluster/test_files.hpp"

namespace cuda_agent::cluster {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using message_log::testing::scratch_dir;

constexpr uint64_t mib = uint64_t{1} << 20;

using test_files::read;
using test_files::write;

struct shipping_fixture : ::testing::Test {
  scratch_dir dir;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::atomic<int> builds{0}, judged{0};
  std::size_t module_bytes = 100;  // what the node's stand-in compiler writes
  compiler_pool_actor node_compiler;
  gpu_pool_actor node_gpu;

  fs::path task() const { return dir.path() / "tasks/L1-1.py"; }
  fs::path solution() const { return dir.path() / "work"; }

  void SetUp() override {
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    write(task(), "class Model: pass\n");
    write(solution() / "model_new.py", "class ModelNew: pass\n");
    const auto modules = dir.path() / "node-cache";
    // The node's pools: a build writes a module; a judge answers what it read of the shipped files.
    node_compiler = system->spawn([this, modules](compiler_pool_actor::pointer) {
      return scripted::pool_behavior<compiler_pool_actor>([this, modules](const compile_job& job) {
        ++builds;
        write(modules / job.job_id / "cuda_agent_kernels.so", std::string(module_bytes, 'm'));
        compile_result r;
        r.job_id = job.job_id;
        r.ok = true;
        r.module_path = (modules / job.job_id / "cuda_agent_kernels.so").string();
        return r;
      });
    });
    node_gpu = system->spawn([this](gpu_pool_actor::pointer) {
      return scripted::pool_behavior<gpu_pool_actor>(
          [this](const verify_job& job) {
            ++judged;
            return verify_result{job.job_id, read(fs::path{job.solution_dir} / "model_new.py") ==
                                                 "class ModelNew: pass\n", {}, "", 1};
          },
          [this](const profile_job& job) {
            ++judged;
            profile_result r;
            r.job_id = job.job_id;
            return r;
          },
          [this](const evaluate_job& job) {
            ++judged;
            reward_record r;
            r.job_id = job.job_id;
            std::error_code ec;
            r.compiled = r.correct = read(job.task_path) == "class Model: pass\n" &&
                                     fs::file_size(job.module_path, ec) == module_bytes;
            r.reward = r.correct ? 2 : -1;
            return r;
          });
    });
  }

  void TearDown() override {
    caf::anon_send_exit(node_compiler, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(node_gpu, caf::exit_reason::user_shutdown);
    node_compiler = nullptr;
    node_gpu = nullptr;
    system->await_all_actors_done();
  }

  node_actor node(uint64_t max_bytes) {
    node_endpoint_options options;
    options.work_dir = dir.path() / "node";
    options.max_bundle_bytes = max_bytes;
    options.job_timeout = 10s;
    options.compiler = node_compiler;
    options.gpu = node_gpu;
    return spawn_node_endpoint(*system, options);
  }

  shipping_settings coordinator(uint64_t max_bytes) const {
    shipping_settings settings;
    settings.store = dir.path() / "store";
    settings.max_bundle_bytes = max_bytes;
    settings.job_timeout = 10s;
    return settings;
  }

  template <class Result, class Worker, class Job>
  caf::expected<Result> ask(const Worker& worker, const Job& job) {
    caf::scoped_actor self{*system};
    caf::expected<Result> answer{caf::sec::request_timeout};
    self->request(worker, 20s, job)
        .receive([&](Result& r) { answer = std::move(r); }, [&](caf::error& e) { answer = std::move(e); });
    return answer;
  }

  // Builds on the node, then evaluates the stored module on the node: both as the pool asks.
  struct round {
    caf::expected<compile_result> built{caf::sec::request_timeout};
    caf::expected<reward_record> verdict{caf::sec::request_timeout};
    caf::expected<verify_result> verified{caf::sec::request_timeout};
  };
  round build_and_judge(const node_actor& on, const shipping_settings& settings) {
    const auto compiler = spawn_remote_compiler(*system, on, "n1", settings);
    const auto gpu = spawn_remote_gpu_slot(*system, on, "n1", settings);
    round r;
    r.built = ask<compile_result>(compiler, compile_job{"c1", "e1", solution().string(), "cpu", ""});
    const auto module = r.built && r.built->ok ? r.built->module_path : std::string{};
    r.verdict = ask<reward_record>(
        gpu, evaluate_job{"j1", "e1", task().string(), solution().string(), module, "cpu", {}});
    verify_job verify;
    verify.job_id = "v1";
    verify.task_path = task().string();
    verify.solution_dir = solution().string();
    verify.module_path = module;
    r.verified = ask<verify_result>(gpu, verify);
    for (const auto& a : {caf::actor_cast<caf::actor>(compiler), caf::actor_cast<caf::actor>(gpu),
                          caf::actor_cast<caf::actor>(on)})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    return r;
  }
};

TEST_F(shipping_fixture, files_within_the_limits_reach_the_node_and_the_module_comes_back_to_the_store) {
  const auto r = build_and_judge(node(mib), coordinator(mib));
  ASSERT_TRUE(r.built) << system->render(r.built.error());
  EXPECT_TRUE(r.built->ok);
  EXPECT_EQ(r.built->module_path.rfind((dir.path() / "store").string(), 0), 0u) << r.built->module_path;
  ASSERT_TRUE(r.verdict) << system->render(r.verdict.error());
  EXPECT_EQ(r.verdict->reward, 2);
  ASSERT_TRUE(r.verified);
  EXPECT_TRUE(r.verified->correct);
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(judged, 2);
  EXPECT_TRUE(fs::is_empty(dir.path() / "node/jobs")) << "each job's directory goes once it is answered";
}

TEST_F(shipping_fixture, a_solution_over_the_coordinator_s_limit_is_the_candidate_s_failure_never_shipped) {
  write(solution() / "padding.bin", std::string(2 * mib, 'x'));
  const auto r = build_and_judge(node(64 * mib), coordinator(mib));
  ASSERT_TRUE(r.built) << "a failed build, not an infrastructure error: " << system->render(r.built.error());
  EXPECT_FALSE(r.built->ok);
  EXPECT_NE(r.built->diagnostics.find("cluster.max_bundle_mb"), std::string::npos) << r.built->diagnostics;
  ASSERT_TRUE(r.verdict) << "reward -1, not an infrastructure error: " << system->render(r.verdict.error());
  EXPECT_EQ(r.verdict->reward, -1);
  EXPECT_FALSE(r.verdict->correct);
  EXPECT_EQ(r.verdict->episode_id, "e1");
  EXPECT_NE(r.verdict->error.find("cluster.max_bundle_mb"), std::string::npos) << r.verdict->error;
  ASSERT_TRUE(r.verified);
  EXPECT_FALSE(r.verified->correct);
  EXPECT_EQ(builds, 0);
  EXPECT_EQ(judged, 0);
}

TEST_F(shipping_fixture, a_solution_over_the_node_s_own_limit_is_refused_there_as_the_candidate_s_failure) {
  write(solution() / "padding.bin", std::string(2 * mib, 'x'));
  const auto r = build_and_judge(node(mib), coordinator(64 * mib));
  ASSERT_TRUE(r.built) << system->render(r.built.error());
  EXPECT_FALSE(r.built->ok);
  EXPECT_NE(r.built->diagnostics.find("cluster.max_bundle_mb"), std::string::npos) << r.built->diagnostics;
  ASSERT_TRUE(r.verdict) << system->render(r.verdict.error());
  EXPECT_EQ(r.verdict->reward, -1);
  ASSERT_TRUE(r.verified);
  EXPECT_FALSE(r.verified->correct);
  EXPECT_EQ(builds, 0);
  EXPECT_EQ(judged, 0);
  EXPECT_FALSE(fs::exists(dir.path() / "node/jobs") && !fs::is_empty(dir.path() / "node/jobs"));
}

TEST_F(shipping_fixture, a_built_module_too_large_to_come_back_is_a_failed_build) {
  module_bytes = 2 * mib;
  const auto from_node = build_and_judge(node(mib), coordinator(64 * mib));
  ASSERT_TRUE(from_node.built) << system->render(from_node.built.error());
  EXPECT_FALSE(from_node.built->ok);
  EXPECT_NE(from_node.built->diagnostics.find("module cannot be shipped"), std::string::npos)
      << from_node.built->diagnostics;
  // The node sent it, but it is over the coordinator's limit: refused on arrival, the same way.
  const auto at_home = build_and_judge(node(64 * mib), coordinator(mib));
  ASSERT_TRUE(at_home.built) << system->render(at_home.built.error());
  EXPECT_FALSE(at_home.built->ok);
  EXPECT_NE(at_home.built->diagnostics.find("cluster.max_bundle_mb"), std::string::npos)
      << at_home.built->diagnostics;
  EXPECT_FALSE(fs::exists(dir.path() / "store") && !fs::is_empty(dir.path() / "store"));
}

TEST_F(shipping_fixture, our_own_task_file_that_cannot_ship_is_an_infrastructure_error_not_a_reward) {
  fs::remove(task());
  const auto r = build_and_judge(node(mib), coordinator(mib));
  ASSERT_TRUE(r.built);
  EXPECT_TRUE(r.built->ok);
  ASSERT_FALSE(r.verdict) << "the candidate did nothing wrong: reward " << r.verdict->reward;
  EXPECT_NE(system->render(r.verdict.error()).find("L1-1.py"), std::string::npos)
      << system->render(r.verdict.error());
  EXPECT_FALSE(r.verified);
}

}  // namespace
}  // namespace cuda_agent::cluster
