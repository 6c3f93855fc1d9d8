// The coordinator in-process, asked the way a node asks it: every way a join can fail to prove
// itself is refused and logged, and an admitted node's workers reach the pools. (The node's side,
// and the network, are in test_nodes.py and test_node_faults.py.)
#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include <caf/all.hpp>

#include "actors/cluster/coordinator.hpp"
#include "actors/cluster/node_auth.hpp"
#include "actors/job_pool.hpp"
#include "messages/registry.hpp"

namespace cuda_agent::cluster {
namespace {

using namespace std::chrono_literals;

const std::string token = "the-cluster-token-0123456789";

// The coordinator sends its records to the recorder without waiting, so a record may arrive after
// the answer that caused it: readers wait for the count they expect, never a fixed sleep.
struct logged {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<recorded_message> records;

  void keep(recorded_message r) {
    {
      std::lock_guard<std::mutex> lock{mutex};
      records.push_back(std::move(r));
    }
    arrived.notify_all();
  }

  // The reasons of the node_leave records once `expected` have come (or 10 s passed), and
  // anything that came after them.
  std::vector<std::string> leave_reasons(size_t expected) {
    std::unique_lock<std::mutex> lock{mutex};
    std::vector<std::string> reasons;
    arrived.wait_for(lock, std::chrono::seconds(10), [&] {
      reasons.clear();
      for (const auto& r : records)
        if (r.type == "node_leave") reasons.push_back(decode<node_leave>(r.payload).reason);
      return reasons.size() >= expected;
    });
    return reasons;
  }
};

recorder_actor::behavior_type keeping_recorder(recorder_actor::pointer, std::shared_ptr<logged> log) {
  return {[log](record_atom, recorded_message& r) { log->keep(std::move(r)); },
          [](flush_atom) {}};
}

// A node that answers nothing but the end of the run.
node_actor::behavior_type idle_node(node_actor::pointer) {
  return {[](compile_job&, file_bundle&) -> caf::result<compile_result, file_bundle> { return caf::sec::unexpected_message; },
          [](verify_job&, file_bundle&) -> caf::result<verify_result> { return caf::sec::unexpected_message; },
          [](profile_job&, file_bundle&) -> caf::result<profile_result> { return caf::sec::unexpected_message; },
          [](evaluate_job&, file_bundle&) -> caf::result<reward_record> { return caf::sec::unexpected_message; },
          [](finish_atom, const std::string&) { return true; }};
}

struct coordinator_fixture : ::testing::Test {
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::shared_ptr<logged> log = std::make_shared<logged>();
  elastic_gpu_pool_actor gpu;
  elastic_compiler_pool_actor compiler;
  coordinator_actor coordinator;

  void SetUp() override {
    register_message_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    job_pool_options pool;
    pool.open_to_nodes = true;
    gpu = spawn_job_pool<verify_job, profile_job, evaluate_job>(*system, pool);
    compiler = spawn_job_pool<compile_job>(*system, pool);
    coordinator_options options;
    options.token = token;
    options.gpu = gpu;
    options.compiler = compiler;
    options.recorder = system->spawn(keeping_recorder, log);
    coordinator = spawn_coordinator(*system, options);
  }

  void TearDown() override {
    for (const auto& a : {caf::actor_cast<caf::actor>(coordinator), caf::actor_cast<caf::actor>(gpu),
                          caf::actor_cast<caf::actor>(compiler)})
      caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    system->await_all_actors_done();
  }

  node_challenge hello(caf::scoped_actor& self, const std::string& name) {
    node_challenge challenge;
    const auto nonce = random_nonce();
    self->request(coordinator, 5s, hello_atom::value, name, nonce)
        .receive([&](node_challenge& c) { challenge = c; }, [](caf::error& e) { FAIL() << caf::to_string(e); });
    EXPECT_TRUE(same_secret(challenge.proof, coordinator_proof(token, nonce)));
    return challenge;
  }

  static node_offer offer(const std::string& name, const std::string& nonce, const std::string& proof) {
    node_offer o;
    o.node.node_id = name;
    o.node.gpu_slots = 1;
    o.node.compiler_workers = 2;
    o.nonce = nonce;
    o.proof = proof;
    o.heartbeat_ms = 1000;
    o.connection_timeout_ms = 5000;
    return o;
  }

  // The welcome text, or the error.
  std::string join(caf::scoped_actor& self, const node_offer& o, const node_actor& node) {
    std::string answer;
    self->request(coordinator, 5s, join_atom::value, o, node)
        .receive([&](std::string& welcome) { answer = welcome; }, [&](caf::error& e) { answer = system->render(e); });
    return answer;
  }

  int32_t capacity(caf::scoped_actor& self, const elastic_gpu_pool_actor& pool) {
    int32_t n = -1;
    self->request(pool, 5s, pool_stats_atom::value).receive([&](pool_stats& s) { n = s.capacity; }, [](caf::error&) {});
    return n;
  }

  // Workers join and leave the pool by messages of their own: ask until the capacity is
  // `expected` or 10 s have passed, and give the last answer.
  int32_t await_capacity(caf::scoped_actor& self, const elastic_gpu_pool_actor& pool, int32_t expected) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    int32_t n = capacity(self, pool);
    while (n != expected && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(20ms);
      n = capacity(self, pool);
    }
    return n;
  }
};

TEST_F(coordinator_fixture, a_join_that_does_not_prove_the_token_is_refused_logged_and_given_nothing) {
  caf::scoped_actor self{*system};
  auto node = system->spawn(idle_node);
  const auto c1 = hello(self, "node-a");
  EXPECT_NE(join(self, offer("node-a", c1.nonce, node_proof("another-token-0123456789", c1.nonce, "node-a")), node)
                .find("refused: wrong token"),
            std::string::npos);
  // The nonce was spent by that attempt: the right proof over it is refused too.
  EXPECT_NE(join(self, offer("node-a", c1.nonce, node_proof(token, c1.nonce, "node-a")), node).find("expired nonce"),
            std::string::npos);
  // A proof made for another name does not serve.
  const auto c2 = hello(self, "node-a");
  EXPECT_NE(join(self, offer("node-a", c2.nonce, node_proof(token, c2.nonce, "node-b")), node).find("wrong token"),
            std::string::npos);
  // Heartbeat settings that differ would give spurious losses.
  const auto c3 = hello(self, "node-a");
  auto late = offer("node-a", c3.nonce, node_proof(token, c3.nonce, "node-a"));
  late.connection_timeout_ms = 60000;
  EXPECT_NE(join(self, late, node).find("cluster.connection_timeout_ms"), std::string::npos);
  // A nonce never issued.
  EXPECT_NE(join(self, offer("node-a", "made-up", node_proof(token, "made-up", "node-a")), node).find("expired nonce"),
            std::string::npos);
  EXPECT_EQ(capacity(self, gpu), 0) << "a refused node must add no slot";
  const auto reasons = log->leave_reasons(5);
  ASSERT_EQ(reasons.size(), 5u);
  for (const auto& r : reasons) EXPECT_EQ(r.rfind("refused: ", 0), 0u) << r;
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
}

TEST_F(coordinator_fixture, an_admitted_node_s_workers_reach_the_pools_and_leave_with_it) {
  caf::scoped_actor self{*system};
  auto node = system->spawn(idle_node);
  const auto c = hello(self, "node-a");
  EXPECT_NE(join(self, offer("node-a", c.nonce, node_proof(token, c.nonce, "node-a")), node).find("joined as node-a"),
            std::string::npos);
  EXPECT_EQ(await_capacity(self, gpu, 1), 1);
  // Status needs a proof of its own.
  const auto s = hello(self, status_caller);
  cluster_status status;
  self->request(coordinator, 5s, status_atom::value, s.nonce, node_proof(token, s.nonce, status_caller))
      .receive([&](cluster_status& st) { status = st; }, [](caf::error& e) { FAIL() << caf::to_string(e); });
  ASSERT_EQ(status.nodes.size(), 1u);
  EXPECT_EQ(status.nodes[0].node_id, "node-a");
  EXPECT_EQ(status.compiler.capacity, 2);
  std::string refused;
  self->request(coordinator, 5s, status_atom::value, s.nonce, node_proof(token, s.nonce, status_caller))
      .receive([](cluster_status&) {}, [&](caf::error& e) { refused = system->render(e); });
  EXPECT_NE(refused.find("refused"), std::string::npos) << "a status proof is good once";
  // The run ends: the node is told.
  int32_t told = -1;
  self->request(coordinator, 5s, finish_atom::value, std::string{"done"})
      .receive([&](int32_t n) { told = n; }, [](caf::error& e) { FAIL() << caf::to_string(e); });
  EXPECT_EQ(told, 1);
  // The node is lost: its workers leave the pools, and the log says so.
  caf::anon_send_exit(node, caf::exit_reason::kill);
  EXPECT_EQ(await_capacity(self, gpu, 0), 0);
  const auto reasons = log->leave_reasons(1);
  ASSERT_EQ(reasons.size(), 1u);
  EXPECT_EQ(reasons[0].rfind("lost: ", 0), 0u) << reasons[0];
}

}  // namespace
}  // namespace cuda_agent::cluster
