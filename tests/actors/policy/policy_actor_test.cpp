// The policy actor with a real actor system, a real backend and the test HTTP server: the
// concurrency credit, the bounded waiting queue and errors that reach the requester.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <caf/all.hpp>

#include "actors/policy/policy_actor.hpp"
#include "actors/policy/replay_backend.hpp"
#include "actors/recorder.hpp"
#include "messages/registry.hpp"
#include "tests/actors/message_log/test_support.hpp"
#include "tests/actors/policy/test_support.hpp"

namespace cuda_agent::policy {
namespace {

using namespace std::chrono_literals;
using namespace testing;

struct actor_system_fixture : ::testing::Test {
  actor_system_fixture() : system{(register_message_types(cfg), add_recorder_types(cfg), cfg)} {}
  caf::actor_system_config cfg;
  caf::actor_system system;
};

using policy_actor = actor_system_fixture;

TEST_F(policy_actor, grants_at_most_max_concurrency_and_rejects_past_the_queue) {
  openai_test_server server;
  server.set_fallback([](const auto& request) {
    const auto episode = request.json()["messages"][1]["content"].template get<std::string>();
    return reply_with(completion().content("answer to " + episode)).after(400ms);
  });
  auto policy = spawn_policy(system, make_policy_backend(settings_for(server)), {2, 2});

  caf::scoped_actor self{system};
  std::vector<decltype(self->request(policy, 20s, first_turn()))> pending;
  for (int i = 0; i < 5; ++i) {
    auto request = first_turn("ep-" + std::to_string(i));
    request.messages[1].content = "ep-" + std::to_string(i);
    pending.push_back(self->request(policy, 20s, request));
  }
  // Two run, two wait, the fifth was turned away at once.
  self->request(policy, 5s, policy_stats_atom::value)
      .receive(
          [&](const policy_stats& s) {
            EXPECT_EQ(s.running, 2);
            EXPECT_EQ(s.waiting, 2);
            EXPECT_EQ(s.peak_running, 2);
            EXPECT_EQ(s.rejected, 1);
          },
          [](caf::error& e) { FAIL() << caf::to_string(e); });

  for (int i = 0; i < 5; ++i)
    pending[i].receive(
        [&](policy_response& response) {
          EXPECT_LT(i, 4);
          EXPECT_EQ(response.episode_id, "ep-" + std::to_string(i));
          EXPECT_EQ(response.content, "answer to ep-" + std::to_string(i));
        },
        [&](caf::error& e) {
          EXPECT_EQ(i, 4) << system.render(e);
          EXPECT_NE(system.render(e).find("rejected, 2 requests running and 2 waiting"),
                    std::string::npos)
              << system.render(e);
        });
  EXPECT_EQ(server.request_count(), 4u);
  EXPECT_EQ(server.peak_in_flight(), 2);  // the server never saw more than the credit allows
  self->send_exit(policy, caf::exit_reason::user_shutdown);
}

TEST_F(policy_actor, a_request_that_waits_past_max_wait_is_rejected_saying_so) {
  openai_test_server server;
  server.set_fallback([](const auto&) { return reply_with(completion().content("slow")).after(1500ms); });
  auto policy = spawn_policy(system, make_policy_backend(settings_for(server)), {1, 4, 200ms});
  caf::scoped_actor self{system};
  auto running = self->request(policy, 20s, first_turn("ep-run"));
  auto waiting = self->request(policy, 20s, first_turn("ep-wait"));
  waiting.receive([](policy_response&) { FAIL() << "expected the wait to run out"; },
                  [&](caf::error& e) {
                    EXPECT_NE(system.render(e).find("policy.max_wait_s"), std::string::npos)
                        << system.render(e);
                  });
  running.receive([](policy_response& r) { EXPECT_EQ(r.content, "slow"); },
                  [&](caf::error& e) { FAIL() << system.render(e); });
  EXPECT_EQ(server.request_count(), 1u);  // the expired request never reached the backend
  self->send_exit(policy, caf::exit_reason::user_shutdown);
}

TEST_F(policy_actor, a_waiting_request_whose_episode_died_is_never_sent) {
  openai_test_server server;
  server.set_fallback([](const auto&) { return reply_with(completion().content("ok")).after(800ms); });
  auto policy = spawn_policy(system, make_policy_backend(settings_for(server)), {1, 4});
  caf::scoped_actor self{system};
  auto running = self->request(policy, 20s, first_turn("ep-run"));
  // An episode that asks and then dies while its request waits for the one credit.
  auto episode = system.spawn([policy](caf::event_based_actor* ep) {
    ep->request(policy, std::chrono::seconds{20}, first_turn("ep-dead")).then([](policy_response&) {});
    return caf::behavior{[](int) {}};
  });
  int32_t waiting = 0;
  for (int i = 0; i < 200 && waiting == 0; ++i) {
    self->request(policy, 5s, policy_stats_atom::value)
        .receive([&](const policy_stats& s) { waiting = s.waiting; },
                 [](caf::error& e) { FAIL() << caf::to_string(e); });
    if (waiting == 0) std::this_thread::sleep_for(5ms);
  }
  ASSERT_EQ(waiting, 1);  // its request waits behind ep-run
  self->send_exit(episode, caf::exit_reason::kill);
  self->wait_for(episode);
  running.receive([](policy_response& r) { EXPECT_EQ(r.content, "ok"); },
                  [&](caf::error& e) { FAIL() << system.render(e); });
  self->request(policy, 5s, policy_stats_atom::value)
      .receive([](const policy_stats& s) { EXPECT_EQ(s.waiting, 0); },
               [](caf::error& e) { FAIL() << caf::to_string(e); });
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(server.request_count(), 1u);
  self->send_exit(policy, caf::exit_reason::user_shutdown);
}

TEST_F(policy_actor, passes_a_backend_failure_to_the_requester_and_keeps_serving) {
  openai_test_server server;
  server.push(scripted_reply::error(401, "invalid API key"));
  server.push(reply_with(completion().content("after the failure")));
  auto policy = spawn_policy(system, make_policy_backend(settings_for(server)), {4, 4});
  caf::scoped_actor self{system};
  self->request(policy, 20s, first_turn())
      .receive([](policy_response&) { FAIL() << "expected an error"; },
               [&](caf::error& e) {
                 EXPECT_NE(system.render(e).find("HTTP 401: invalid API key"), std::string::npos)
                     << system.render(e);
               });
  self->request(policy, 20s, first_turn())
      .receive([](policy_response& r) { EXPECT_EQ(r.content, "after the failure"); },
               [&](caf::error& e) { FAIL() << system.render(e); });
  self->send_exit(policy, caf::exit_reason::user_shutdown);
}

TEST_F(policy_actor, serves_the_backend_the_settings_name) {
  settings config;
  config.apply_override("policy.backend=demo");
  config.apply_override(std::string{"policy.demo_dir="} + CUDA_AGENT_SOURCE_DIR "/tests/actors/policy/demos");
  auto policy = spawn_policy(system, policy_settings::from(config));
  caf::scoped_actor self{system};
  self->request(policy, 20s, first_turn())
      .receive([](policy_response& r) { EXPECT_EQ(r.tool_calls.at(0).tool, "Read"); },
               [&](caf::error& e) { FAIL() << system.render(e); });
  self->send_exit(policy, caf::exit_reason::user_shutdown);
}

TEST_F(policy_actor, records_its_answers_so_that_replay_gives_them_back) {
  message_log::testing::scratch_dir dir;
  openai_test_server server;
  server.push(reply_with(completion()
                             .content("look first")
                             .tool_call("c1", "Read", R"({"file_path":"model.py"})")
                             .tokens({{11, -0.5f}, {12, -0.25f}})
                             .usage(300, 2)));
  server.push(reply_with(completion()
                             .tool_call("c2", "Write", R"({"file_path":"k.cu"})")  // malformed
                             .tokens({{13, -1.0f}})
                             .usage(340, 1)));
  server.push(reply_with(completion().content("done").tokens({{14, 0.0f}}).usage(380, 1)));

  std::vector<policy_response> live;
  {
    auto recorder = spawn_recorder(
        system, message_log::writer::open(message_log::testing::options_for(dir.log())));
    auto policy = spawn_policy(system, make_policy_backend(settings_for(server)), {4, 4}, recorder);
    caf::scoped_actor self{system};
    auto request = first_turn("ep-R");
    for (int32_t turn = 1; turn <= 3; ++turn) {
      request.turn = turn;
      self->request(policy, 20s, request)
          .receive([&](policy_response& r) { live.push_back(r); },
                   [&](caf::error& e) { FAIL() << system.render(e); });
      request.messages.push_back({"assistant", live.back().content, "", live.back().tool_calls});
    }
    self->request(recorder, 20s, flush_atom::value)
        .receive([] {}, [&](caf::error& e) { FAIL() << system.render(e); });
    self->send_exit(policy, caf::exit_reason::user_shutdown);
    self->send_exit(recorder, caf::exit_reason::user_shutdown);
    self->wait_for(recorder);
  }
  ASSERT_EQ(live.size(), 3u);
  EXPECT_EQ(live[1].tool_calls.at(0).parse_error, "Write needs the argument 'content'");

  replay_backend replay{dir.log(), ""};
  auto request = first_turn("ep-R");
  for (int32_t turn = 1; turn <= 3; ++turn) {
    request.turn = turn;
    EXPECT_EQ(replay.complete(request), live[turn - 1]) << "turn " << turn;
  }
  EXPECT_EQ(replay.complete(request).token_ids, (std::vector<int32_t>{14}));
}

}  // namespace
}  // namespace cuda_agent::policy
