// The recorder actor with a real actor system and a real log on disk.
#include <gtest/gtest.h>

#include <caf/all.hpp>

#include "actors/message_log/reader.hpp"
#include "actors/recorder.hpp"
#include "messages/registry.hpp"
#include "tests/actors/message_log/test_support.hpp"

namespace cuda_agent {
namespace {

namespace fs = std::filesystem;

using message_log::testing::scratch_dir;

TEST(recorder, keeps_every_message_of_concurrent_senders_in_each_sender_order) {
  scratch_dir dir;
  message_log::writer_options options;
  options.dir = dir.log();
  constexpr int senders = 4, per_sender = 250;
  {
    caf::actor_system_config cfg;
    register_message_types(cfg);
    add_recorder_types(cfg);
    caf::actor_system system{cfg};
    auto recorder = spawn_recorder(system, message_log::writer::open(options));
    std::vector<caf::actor> producers;
    for (int s = 0; s < senders; ++s)
      producers.push_back(system.spawn([=](caf::event_based_actor* self) {
        for (int i = 0; i < per_sender; ++i) {
          tool_result result;
          result.episode_id = "ep-" + std::to_string(s);
          result.call_id = std::to_string(i);
          self->send(recorder, record_atom::value,
                     make_record("tool-" + std::to_string(s), "episode", result.episode_id, result));
        }
      }));
    caf::scoped_actor self{system};
    self->wait_for(producers);
    // The flush is answered after every record sent before it has been appended.
    bool flushed = false;
    self->request(recorder, std::chrono::seconds{10}, flush_atom::value)
        .receive([&] { flushed = true; }, [](caf::error& e) { FAIL() << caf::to_string(e); });
    EXPECT_TRUE(flushed);
    self->send_exit(recorder, caf::exit_reason::user_shutdown);
  }
  auto log = message_log::read_all(options.dir);
  ASSERT_EQ(log.status, message_log::read_status::end) << log.problem.message();
  ASSERT_EQ(log.records.size(), static_cast<size_t>(senders * per_sender));
  std::vector<int> next(senders, 0);
  for (const auto& rec : log.records) {
    ASSERT_EQ(rec.type, "tool_result");
    const auto result = decode<tool_result>(rec.payload);
    const int s = std::stoi(result.episode_id.substr(3));
    EXPECT_EQ(rec.sender, "tool-" + std::to_string(s));
    EXPECT_EQ(rec.episode, result.episode_id);
    EXPECT_EQ(std::stoi(result.call_id), next[s]++) << "out of order for sender " << s;
  }
}

TEST(recorder, writer_options_follow_the_settings) {
  settings config;
  config.apply_override("log.fsync=always");
  config.apply_override("log.segment_bytes=8192");
  config.apply_override("log.fsync_interval_ms=25");
  auto options = log_writer_options(config);
  EXPECT_EQ(options.dir, fs::path{"runs/log"});
  EXPECT_EQ(options.fsync, message_log::fsync_policy::always);
  EXPECT_EQ(options.segment_bytes, 8192u);
  EXPECT_EQ(options.fsync_interval, std::chrono::milliseconds{25});
  EXPECT_EQ(log_writer_options(config, "/tmp/x").dir, fs::path{"/tmp/x"});
}

}  // namespace
}  // namespace cuda_agent
