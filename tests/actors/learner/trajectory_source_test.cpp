#include "actors/learner/trajectory_source.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "actors/message_log/format.hpp"
#include "actors/message_log/writer.hpp"
#include "messages/codec.hpp"
#include "tests/actors/learner/trajectory_builders.hpp"
#include "tests/actors/message_log/test_support.hpp"

namespace cuda_agent::learner {
namespace {

namespace fs = std::filesystem;
using message_log::testing::scratch_dir;
using testing::call;
using testing::episode;
using testing::good_episode;
using testing::turn;

// The message of the learner_error that f throws, or a note that it threw none.
template <class F>
std::string learner_error_of(F f) {
  try {
    f();
  } catch (const learner_error& e) {
    return e.what();
  }
  return "<no learner_error>";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// --- sample_of ---------------------------------------------------------------------------------

TEST(sample_of, concatenates_the_turns_prompt_then_sampled_tokens) {
  const auto s = sample_of(good_episode("ep-1", 3));
  EXPECT_EQ(s.episode_id, "ep-1");
  EXPECT_EQ(s.task_id, "L1-19");
  EXPECT_EQ(s.tokens, (std::vector<int64_t>{100, 101, 102, 200, 201, 103, 202, 203, 104, 204}));
  EXPECT_EQ(s.loss_mask, (std::vector<uint8_t>{0, 0, 0, 1, 1, 0, 1, 1, 0, 1}));
  EXPECT_EQ(s.rollout_logprobs,
            (std::vector<float>{0, 0, 0, -0.5f, -0.25f, 0, -1.0f, -0.125f, 0, -0.0625f}));
  EXPECT_EQ(s.turn_versions, (std::vector<int64_t>{7, 8, 8}));
  EXPECT_EQ(s.reward, 3);
  EXPECT_EQ(s.reason, termination::agent_done);
  EXPECT_EQ(s.turns, 3);
  EXPECT_EQ(s.size(), 10);
  EXPECT_EQ(s.policy_tokens(), 5);
  EXPECT_EQ(s.min_version(), 7);
}

TEST(sample_of, keeps_reason_and_gives_prompt_tokens_no_logprob) {
  auto t = episode("ep-2", {turn(1, {5, 6}, {7}, {-2.0f}, 3)}, 0, termination::turn_budget);
  t.turns[0].logprobs[1] = -9.0f;  // a prompt token's log-prob is not the policy's
  const auto s = sample_of(t);
  EXPECT_EQ(s.rollout_logprobs, (std::vector<float>{0, 0, -2.0f}));
  EXPECT_EQ(s.reason, termination::turn_budget);
  EXPECT_EQ(s.reward, 0);
}

TEST(sample_of, a_trajectory_without_tokens_names_the_episode_and_the_fix) {
  // What an OpenAI-compatible server without token ids leaves: turns, calls, no tokens.
  trajectory_turn empty;
  empty.turn = 1;
  empty.tool_calls = {call("Bash", R"({"command":"ls"})")};
  for (const auto& t : {episode("ep-none", {empty, empty}, 2), episode("ep-none", {}, 2)}) {
    const auto message = learner_error_of([&] { sample_of(t); });
    EXPECT_TRUE(contains(message, "episode ep-none holds no tokens")) << message;
    EXPECT_TRUE(contains(message, "--policy torch")) << message;
    EXPECT_TRUE(contains(message, "policy.model_dir")) << message;
  }
}

TEST(sample_of, sampled_tokens_without_their_prompt_are_an_error) {
  const auto t = episode("ep-noprompt", {turn(1, {}, {200, 201}, {-0.5f, -0.5f}, 1)}, 2);
  const auto message = learner_error_of([&] { sample_of(t); });
  EXPECT_TRUE(contains(message, "episode ep-noprompt starts without its prompt")) << message;
  EXPECT_TRUE(contains(message, "--policy torch")) << message;
}

TEST(sample_of, a_turn_whose_arrays_disagree_in_length_is_an_error) {
  auto short_logprobs = good_episode("ep-bad");
  short_logprobs.turns[1].logprobs.pop_back();
  EXPECT_EQ(learner_error_of([&] { sample_of(short_logprobs); }).rfind(
                "episode ep-bad turn 2: 3 token ids, 2 log-probabilities and 3 loss-mask entries",
                0),
            0u);
  auto long_mask = good_episode("ep-bad");
  long_mask.turns[2].loss_mask.push_back(1);
  EXPECT_TRUE(contains(learner_error_of([&] { sample_of(long_mask); }),
                       "episode ep-bad turn 3: 2 token ids, 2 log-probabilities and 3 loss-mask"));
}

// --- read_trajectories -------------------------------------------------------------------------

// A log written the way the recorder writes it (make_record: type name, episode, encoded message).
class log_file {
 public:
  explicit log_file(fs::path dir) {
    message_log::writer_options options;
    options.dir = std::move(dir);
    writer_.emplace(message_log::writer::open(options));
  }
  template <class T>
  void record(const std::string& sender, const std::string& receiver, const std::string& episode,
              const T& message) {
    writer_->append(sender, receiver, type_name_of<T>(), episode, encode(message));
  }
  void trajectory_for_learner(const trajectory& t) { record("episode", "learner", t.episode_id, t); }
  void close() { writer_->close(); }

 private:
  std::optional<message_log::writer> writer_;
};

std::vector<std::string> ids_of(const std::vector<trajectory>& ts) {
  std::vector<std::string> ids;
  for (const auto& t : ts) ids.push_back(t.episode_id);
  return ids;
}

TEST(read_trajectories, reads_the_learners_records_in_log_order) {
  scratch_dir scratch;
  log_file log{scratch.log()};
  const auto retried_failure = good_episode("ep-2", -1);
  auto failure = retried_failure;
  failure.reason = termination::infrastructure_failure;
  log.record("episode", "policy", "ep-1", policy_request{});
  log.trajectory_for_learner(good_episode("ep-1", 0));
  log.record("policy", "episode", "ep-1", policy_response{});
  log.trajectory_for_learner(failure);
  log.trajectory_for_learner(good_episode("ep-3", 1));
  log.trajectory_for_learner(good_episode("ep-1", 2));  // a resumed run recorded ep-1 again
  log.trajectory_for_learner(good_episode("ep-4", 3));
  auto late_failure = good_episode("ep-4", -1);           // its retry then lost its node
  late_failure.reason = termination::infrastructure_failure;
  log.trajectory_for_learner(late_failure);
  log.record("episode", "rollout", "ep-5", good_episode("ep-5"));  // not addressed to the learner
  log.close();

  const auto read = read_trajectories({scratch.log()});
  ASSERT_EQ(ids_of(read.trajectories), (std::vector<std::string>{"ep-3", "ep-1", "ep-4"}));
  EXPECT_EQ(read.trajectories[1], good_episode("ep-1", 2));
  EXPECT_EQ(read.trajectories[2].reward, 3);
  ASSERT_EQ(read.skipped.size(), 3u);
  EXPECT_TRUE(contains(read.skipped[0], "episode ep-2 ended in an infrastructure failure"))
      << read.skipped[0];
  EXPECT_TRUE(contains(read.skipped[0], scratch.log().string() + " record 4")) << read.skipped[0];
  EXPECT_TRUE(contains(read.skipped[1], "episode ep-4 ended in an infrastructure failure"))
      << read.skipped[1];
  EXPECT_TRUE(contains(read.skipped[2], "record 2: episode ep-1 is recorded again at")) << read.skipped[2];
}

TEST(read_trajectories, several_logs_in_the_order_given) {
  scratch_dir scratch;
  const auto first = scratch.path() / "run-1";
  const auto second = scratch.path() / "run-2";
  {
    log_file log{first};
    log.trajectory_for_learner(good_episode("ep-1", 0));
    log.trajectory_for_learner(good_episode("ep-2", 1));
  }
  {
    log_file log{second};
    log.trajectory_for_learner(good_episode("ep-1", 3));
  }
  const auto read = read_trajectories({first, second});
  ASSERT_EQ(ids_of(read.trajectories), (std::vector<std::string>{"ep-2", "ep-1"}));
  EXPECT_EQ(read.trajectories[1].reward, 3);
  const auto reversed = read_trajectories({second, first});
  ASSERT_EQ(ids_of(reversed.trajectories), (std::vector<std::string>{"ep-1", "ep-2"}));
  EXPECT_EQ(reversed.trajectories[0].reward, 0);
}

TEST(read_trajectories, an_empty_log_has_no_trajectories) {
  scratch_dir scratch;
  fs::create_directories(scratch.log());
  const auto read = read_trajectories({scratch.log()});
  EXPECT_TRUE(read.trajectories.empty());
  EXPECT_TRUE(read.skipped.empty());
}

TEST(read_trajectories, a_missing_log_dir_is_an_error_naming_it) {
  scratch_dir scratch;
  log_file{scratch.log()}.trajectory_for_learner(good_episode("ep-1"));
  const auto missing = scratch.path() / "no-such-log";
  const auto message = learner_error_of([&] { read_trajectories({scratch.log(), missing}); });
  EXPECT_EQ(message.rfind("message log " + missing.string() + " is not a directory", 0), 0u)
      << message;
  const auto file = scratch.path() / "a-file";
  message_log::testing::write_bytes(file, "x");
  EXPECT_TRUE(contains(learner_error_of([&] { read_trajectories({file}); }),
                       file.string() + " is not a directory"));
}

TEST(read_trajectories, a_torn_tail_is_read_up_to_the_tear) {
  scratch_dir scratch;
  {
    log_file log{scratch.log()};
    log.trajectory_for_learner(good_episode("ep-1"));
    log.trajectory_for_learner(good_episode("ep-2"));
  }
  // Half of a third record, as a crash mid-append leaves it.
  const auto payload = encode(good_episode("ep-3"));
  message_log::record_view rec{3, 0, "episode", "learner", type_name_of<trajectory>(), "ep-3",
                               payload};
  std::string frame;
  message_log::encode_frame(rec, frame);
  const auto segments = message_log::testing::segment_paths(scratch.log());
  ASSERT_EQ(segments.size(), 1u);
  message_log::testing::append_bytes(segments.back(), frame.substr(0, frame.size() / 2));

  const auto read = read_trajectories({scratch.log()});
  EXPECT_EQ(ids_of(read.trajectories), (std::vector<std::string>{"ep-1", "ep-2"}));
  ASSERT_EQ(read.skipped.size(), 1u);
  EXPECT_TRUE(contains(read.skipped[0], "ends inside a record")) << read.skipped[0];
}

TEST(read_trajectories, a_corrupt_log_is_an_error_naming_it) {
  scratch_dir scratch;
  {
    log_file log{scratch.log()};
    log.trajectory_for_learner(good_episode("ep-1"));
    log.trajectory_for_learner(good_episode("ep-2"));
  }
  const auto segment = message_log::testing::segment_paths(scratch.log()).front();
  // A byte inside the first record's payload: its checksum no longer matches.
  message_log::testing::flip_byte(segment, message_log::kSegmentHeaderBytes + 60);
  const auto message = learner_error_of([&] { read_trajectories({scratch.log()}); });
  EXPECT_EQ(message.rfind("message log " + scratch.log().string() + " is corrupt", 0), 0u)
      << message;
}

TEST(read_trajectories, a_payload_that_is_no_trajectory_is_an_error_naming_the_record) {
  scratch_dir scratch;
  {
    log_file log{scratch.log()};
    log.trajectory_for_learner(good_episode("ep-1"));
  }
  {
    message_log::writer_options options;
    options.dir = scratch.log();
    auto writer = message_log::writer::open(options);
    writer.append("episode", "learner", type_name_of<trajectory>(), "ep-2",
                  encode(episode_ended{}));
  }
  const auto message = learner_error_of([&] { read_trajectories({scratch.log()}); });
  EXPECT_TRUE(contains(message, scratch.log().string() + " record 2 (episode ep-2)")) << message;
  EXPECT_TRUE(contains(message, "does not decode")) << message;
}

}  // namespace
}  // namespace cuda_agent::learner
