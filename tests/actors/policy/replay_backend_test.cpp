// The replay backend on a real message log written by the log's writer.
#include <gtest/gtest.h>

#include "actors/message_log/writer.hpp"
#include "actors/policy/replay_backend.hpp"
#include "messages/codec.hpp"
#include "tests/actors/message_log/test_support.hpp"
#include "tests/actors/policy/test_support.hpp"

namespace cuda_agent::policy {
namespace {

using message_log::testing::flip_byte;
using message_log::testing::options_for;
using message_log::testing::scratch_dir;
using message_log::testing::segment_paths;

policy_response recorded(const std::string& episode, int32_t turn) {
  policy_response r;
  r.episode_id = episode;
  r.turn = turn;
  r.content = episode + " says turn " + std::to_string(turn);
  r.tool_calls = {{"call-" + std::to_string(turn), "Bash", R"({"command":"build"})", ""}};
  r.token_ids = {turn, turn + 1};
  r.logprobs = {-0.5f, -0.25f};
  r.finish_reason = "tool_calls";
  r.prompt_tokens = 100 * turn;
  r.completion_tokens = 7;
  r.context_action = "none";
  return r;
}

// Episode ep-A turns 1..3 and ep-B turn 1, with tool results in between; turn 2 of ep-A was
// answered twice (a retried turn): the later answer counts.
void write_log(const std::filesystem::path& dir) {
  auto log = message_log::writer::open(options_for(dir));
  const auto put = [&](const policy_response& r) {
    log.append("policy", "episode", "policy_response", r.episode_id, encode(r));
  };
  put(recorded("ep-A", 1));
  tool_result result;
  result.episode_id = "ep-A";
  log.append("tool", "episode", "tool_result", "ep-A", encode(result));
  auto stale = recorded("ep-A", 2);
  stale.content = "stale";
  put(stale);
  put(recorded("ep-B", 1));
  put(recorded("ep-A", 2));
  put(recorded("ep-A", 3));
}

policy_request turn(const std::string& episode, int32_t number) {
  auto request = testing::first_turn(episode);
  request.turn = number;
  return request;
}

TEST(replay_backend, answers_each_turn_with_what_the_log_recorded) {
  scratch_dir dir;
  write_log(dir.log());
  replay_backend backend{dir.log(), ""};
  EXPECT_EQ(backend.complete(turn("ep-A", 1)), recorded("ep-A", 1));
  EXPECT_EQ(backend.complete(turn("ep-A", 2)), recorded("ep-A", 2));
  EXPECT_EQ(backend.complete(turn("ep-A", 3)), recorded("ep-A", 3));
  EXPECT_EQ(backend.complete(turn("ep-B", 1)), recorded("ep-B", 1));
}

TEST(replay_backend, a_turn_the_log_lacks_is_a_clear_error) {
  scratch_dir dir;
  write_log(dir.log());
  replay_backend backend{dir.log(), ""};
  try {
    backend.complete(turn("ep-A", 4));
    FAIL() << "no policy_error";
  } catch (const policy_error& e) {
    EXPECT_NE(std::string{e.what()}.find("no policy_response for episode 'ep-A' turn 4 (turns it "
                                         "holds: 1..3)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(backend.complete(turn("ep-unknown", 1)), policy_error);
}

TEST(replay_backend, replays_a_named_episode_under_a_new_id) {
  scratch_dir dir;
  write_log(dir.log());
  settings config;
  config.apply_override("policy.backend=replay");
  config.apply_override("policy.replay_log=" + dir.log().string());
  config.apply_override("policy.replay_episode=ep-A");
  const auto backend = make_policy_backend(policy_settings::from(config));
  EXPECT_EQ(backend->name(), "replay");
  auto expected = recorded("ep-A", 3);
  expected.episode_id = "ep-rerun";
  EXPECT_EQ(backend->complete(turn("ep-rerun", 3)), expected);
}

TEST(replay_backend, refuses_a_missing_or_corrupt_log) {
  scratch_dir dir;
  EXPECT_THROW((replay_backend{dir.path() / "absent", ""}), config_error);
  write_log(dir.log());
  flip_byte(segment_paths(dir.log()).at(0), 60);  // inside the first record
  replay_backend backend{dir.log(), ""};
  try {
    backend.complete(turn("ep-A", 1));
    FAIL() << "no policy_error";
  } catch (const policy_error& e) {
    EXPECT_NE(std::string{e.what()}.find("is corrupt"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cuda_agent::policy
