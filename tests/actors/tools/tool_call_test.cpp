// The tool-call actor in a real actor system: one request, one tool_result, then it is gone;
// concurrent calls of one episode each get their own answer.
#include <caf/all.hpp>

#include "actors/tool_call.hpp"
#include "messages/registry.hpp"
#include "tests/actors/tools/tool_test_support.hpp"

namespace cuda_agent::tools::testing {
namespace {

using namespace std::chrono_literals;

class tool_call_actor : public tool_fixture {
 protected:
  tool_call_actor() : system{(register_message_types(cfg), cfg)} {}

  tool_request request(std::string id, std::string tool, nlohmann::json args) {
    return tool_request{"episode-7", 3, tool_call{std::move(id), std::move(tool), args.dump()}};
  }

  caf::actor_system_config cfg;
  caf::actor_system system;
};

TEST_F(tool_call_actor, answers_once_and_quits) {
  caf::scoped_actor self{system};
  auto call = spawn_tool_call(system, session);
  self->monitor(call);
  tool_result result;
  self->request(call, 30s, request("c1", "Bash", {{"command", "echo hello from $PWD"}}))
      .receive([&](const tool_result& r) { result = r; },
               [&](const caf::error& e) { FAIL() << system.render(e); });
  EXPECT_EQ(result.call_id, "c1");
  EXPECT_EQ(result.episode_id, "episode-7");
  EXPECT_EQ(result.tool, "Bash");
  EXPECT_EQ(result.output, "hello from /workdir");
  EXPECT_GT(result.duration_ms, 0);
  bool down = false;
  self->receive([&](const caf::down_msg& m) { down = m.source == call.address(); },
                caf::after(10s) >> [] {});
  EXPECT_TRUE(down) << "the tool-call actor did not quit after answering";
}

TEST_F(tool_call_actor, bad_calls_come_back_as_error_results_not_dead_actors) {
  caf::scoped_actor self{system};
  tool_result result;
  self->request(spawn_tool_call(system, session), 30s, request("c2", "Edit", {{"old_string", 1}}))
      .receive([&](const tool_result& r) { result = r; },
               [&](const caf::error& e) { FAIL() << system.render(e); });
  EXPECT_TRUE(result.is_error);
  EXPECT_EQ(result.output, "Error: missing required argument 'file_path' (a string)");
}

TEST_F(tool_call_actor, concurrent_calls_do_not_wait_for_each_other) {
  caf::scoped_actor self{system};
  const auto start = std::chrono::steady_clock::now();
  // A slow command and a quick one at once: the quick one answers first, the slow one later.
  // A plain send: the result comes back to the sender as an ordinary message, in the order
  // the answers are given.
  std::vector<std::string> order;
  self->send(spawn_tool_call(system, session),
             request("slow", "Bash", {{"command", "sleep 1; echo slow"}}));
  self->send(spawn_tool_call(system, session),
             request("quick", "Write", {{"file_path", "q.txt"}, {"content", "q"}}));
  for (int i = 0; i < 2; ++i)
    self->receive([&](const tool_result& r) { order.push_back(r.call_id); },
                  caf::after(30s) >> [] {});
  ASSERT_EQ(order.size(), 2u);
  EXPECT_EQ(order[0], "quick");
  EXPECT_EQ(order[1], "slow");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

}  // namespace
}  // namespace cuda_agent::tools::testing
