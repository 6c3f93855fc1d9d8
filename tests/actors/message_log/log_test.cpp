// Writer and reader on healthy logs: round trips, filters, rotation, reopening, fsync policies.
#include <gtest/gtest.h>

#include "actors/message_log/reader.hpp"
#include "actors/message_log/writer.hpp"
#include "tests/actors/message_log/test_support.hpp"

namespace cuda_agent::message_log {
namespace {

using testing::append_numbered;
using testing::expect_numbered;
using testing::options_for;
using testing::scratch_dir;

// A clock the test moves by hand.
struct manual_clock {
  std::shared_ptr<int64_t> now = std::make_shared<int64_t>(1'000);
  std::function<int64_t()> function() const {
    return [now = now] { return *now; };
  }
};

TEST(MessageLog, RoundTripKeepsEveryField) {
  scratch_dir dir;
  manual_clock clock;
  writer_options options = options_for(dir.log());
  options.clock = clock.function();
  const std::string binary("\x00\xff\x01msgpack\x00", 11);
  {
    writer log = writer::open(options);
    EXPECT_TRUE(log.recovery().created);
    EXPECT_EQ(log.append("rollout", "episode/1", "task_assigned", "ep-1", binary), 1u);
    *clock.now = 2'000;
    EXPECT_EQ(log.append("policy", "episode/1", "completion", "", ""),
              2u);  // empty episode, payload
    *clock.now = -3;
    EXPECT_EQ(log.append("", "", "t", "ep-2", std::string(100'000, 'x')), 3u);
    EXPECT_EQ(log.next_seq(), 4u);
  }
  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.status, read_status::end) << all.problem.message();
  ASSERT_EQ(all.records.size(), 3u);
  EXPECT_EQ(all.records[0],
            (record{1, 1'000, "rollout", "episode/1", "task_assigned", "ep-1", binary}));
  EXPECT_EQ(all.records[1], (record{2, 2'000, "policy", "episode/1", "completion", "", ""}));
  EXPECT_EQ(all.records[2], (record{3, -3, "", "", "t", "ep-2", std::string(100'000, 'x')}));
}

TEST(MessageLog, TimestampsComeFromTheSystemClockByDefault) {
  scratch_dir dir;
  const auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  const int64_t before = now_ns();
  {
    writer log = writer::open(options_for(dir.log()));
    log.append("a", "b", "c", "", "");
  }
  const int64_t after = now_ns();
  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.records.size(), 1u);
  EXPECT_GE(all.records[0].ts_ns, before);
  EXPECT_LE(all.records[0].ts_ns, after);
}

TEST(MessageLog, FiltersOnEpisodeTypeAndTimeRange) {
  scratch_dir dir;
  manual_clock clock;
  writer_options options = options_for(dir.log());
  options.clock = clock.function();
  {
    writer log = writer::open(options);
    for (int i = 0; i < 20; ++i) {
      *clock.now = 100 * i;  // record i has ts 100*i and seq i+1
      log.append("s", "r", i % 2 ? "odd" : "even", "ep-" + std::to_string(i % 3), "");
    }
  }
  const auto seqs = [&](const record_filter& filter) {
    std::vector<uint64_t> out;
    const read_all_result all = read_all(dir.log(), filter);
    EXPECT_EQ(all.status, read_status::end) << all.problem.message();
    for (const auto& rec : all.records) out.push_back(rec.seq);
    return out;
  };
  record_filter by_episode;
  by_episode.episode = "ep-1";
  EXPECT_EQ(seqs(by_episode), (std::vector<uint64_t>{2, 5, 8, 11, 14, 17, 20}));

  record_filter by_type;
  by_type.type = "odd";
  EXPECT_EQ(seqs(by_type), (std::vector<uint64_t>{2, 4, 6, 8, 10, 12, 14, 16, 18, 20}));

  record_filter by_time;  // inclusive bounds
  by_time.from_ns = 500;
  by_time.to_ns = 800;
  EXPECT_EQ(seqs(by_time), (std::vector<uint64_t>{6, 7, 8, 9}));

  record_filter combined = by_time;
  combined.type = "even";
  combined.episode = "ep-0";
  EXPECT_EQ(seqs(combined), (std::vector<uint64_t>{7}));  // i = 6: ts 600, even, ep-0

  record_filter none;
  none.episode = "no-such-episode";
  EXPECT_TRUE(seqs(none).empty());

  // Records filtered out are still verified and counted.
  reader log = reader::open(dir.log(), by_episode);
  record_view rec;
  while (log.next(rec) == read_status::record) {
  }
  EXPECT_EQ(log.stats().records_scanned, 20u);
  EXPECT_EQ(log.stats().records_matched, 7u);
}

TEST(MessageLog, RotatesSegmentsAndReadsAcrossThem) {
  scratch_dir dir;
  writer_options options = options_for(dir.log());
  options.segment_bytes = 1024;
  {
    writer log = writer::open(options);
    append_numbered(log, 200);
    EXPECT_GT(log.stats().segments_created, 5u);
  }
  const auto segments = list_segments(dir.log());
  ASSERT_GT(segments.size(), 5u);
  uint64_t expected_first = 1;
  for (const auto& segment : segments) {
    EXPECT_LE(std::filesystem::file_size(segment.path), 1024u) << segment.path;
    // Each segment is named by the sequence number of its first record.
    EXPECT_EQ(segment.first_seq, expected_first);
    record_view rec;
    std::string first_in_file = testing::read_bytes(segment.path).substr(kSegmentHeaderBytes);
    ASSERT_EQ(parse_frame(first_in_file.data(), first_in_file.size(), rec).status,
              frame_status::ok);
    EXPECT_EQ(rec.seq, segment.first_seq);
    expected_first += testing::frame_offsets(segment.path).size() - 1;
  }
  EXPECT_EQ(expected_first, 201u);

  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.status, read_status::end) << all.problem.message();
  ASSERT_EQ(all.records.size(), 200u);
  for (size_t i = 0; i < all.records.size(); ++i) {
    EXPECT_EQ(all.records[i].seq, i + 1);
    expect_numbered(all.records[i]);
  }
}

TEST(MessageLog, RecordLargerThanASegmentGetsItsOwn) {
  scratch_dir dir;
  writer_options options = options_for(dir.log());
  options.segment_bytes = 256;
  {
    writer log = writer::open(options);
    log.append("s", "r", "small", "", "x");
    log.append("s", "r", "big", "", std::string(1000, 'b'));
    log.append("s", "r", "small", "", "y");
  }
  EXPECT_EQ(list_segments(dir.log()).size(), 3u);
  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.records.size(), 3u);
  EXPECT_EQ(all.records[1].payload, std::string(1000, 'b'));
}

TEST(MessageLog, ReopenContinuesTheSequence) {
  scratch_dir dir;
  writer_options options = options_for(dir.log());
  options.segment_bytes = 2048;
  for (int round = 0; round < 3; ++round) {
    writer log = writer::open(options);
    EXPECT_FALSE(log.recovery().truncated());
    EXPECT_EQ(log.recovery().next_seq, 1u + 50u * round);
    EXPECT_EQ(append_numbered(log, 50), 50u * (round + 1));
  }
  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.status, read_status::end) << all.problem.message();
  ASSERT_EQ(all.records.size(), 150u);
  for (size_t i = 0; i < all.records.size(); ++i) EXPECT_EQ(all.records[i].seq, i + 1);
}

TEST(MessageLog, EmptyLogReadsAsEnd) {
  scratch_dir dir;
  writer::open(options_for(dir.log())).close();
  EXPECT_EQ(list_segments(dir.log()).size(), 1u);
  const read_all_result all = read_all(dir.log());
  EXPECT_EQ(all.status, read_status::end);
  EXPECT_TRUE(all.records.empty());
  // And a reopened empty log starts at 1 in the same segment.
  writer log = writer::open(options_for(dir.log()));
  EXPECT_EQ(log.append("a", "b", "c", "", ""), 1u);
  EXPECT_EQ(list_segments(dir.log()).size(), 1u);
}

TEST(MessageLog, MissingDirectoryIsAnErrorForReaders) {
  scratch_dir dir;
  EXPECT_THROW(reader::open(dir.path() / "absent"), log_error);
  testing::write_bytes(dir.path() / "file", "x");
  EXPECT_THROW(reader::open(dir.path() / "file"), log_error);
}

TEST(MessageLog, SecondWriterIsRefused) {
  scratch_dir dir;
  writer first = writer::open(options_for(dir.log()));
  try {
    writer::open(options_for(dir.log()));
    FAIL() << "a second writer opened the same log";
  } catch (const log_error& e) {
    EXPECT_NE(std::string(e.what()).find("already open for writing"), std::string::npos)
        << e.what();
  }
  first.close();
  EXPECT_NO_THROW(writer::open(options_for(dir.log())));  // the lock goes with close()
}

TEST(MessageLog, AppendAfterCloseThrows) {
  scratch_dir dir;
  writer log = writer::open(options_for(dir.log()));
  log.close();
  log.close();  // idempotent
  EXPECT_THROW(log.append("a", "b", "c", "", ""), log_error);
}

TEST(MessageLog, MovedWriterKeepsWriting) {
  scratch_dir dir;
  writer first = writer::open(options_for(dir.log()));
  first.append("a", "b", "c", "", "");
  writer second = std::move(first);
  EXPECT_EQ(second.append("a", "b", "c", "", ""), 2u);
  EXPECT_THROW(first.append("a", "b", "c", "", ""), log_error);  // NOLINT(bugprone-use-after-move)
}

TEST(MessageLog, OversizedRecordIsRefusedAndTheLogStaysUsable) {
  scratch_dir dir;
  writer log = writer::open(options_for(dir.log()));
  log.append("a", "b", "c", "", "first");
  EXPECT_THROW(log.append("a", "b", "c", "", std::string(kMaxBodyBytes, 'x')),
               std::invalid_argument);
  EXPECT_THROW(log.append(std::string(kMaxFieldBytes + 1, 's'), "b", "c", "", ""),
               std::invalid_argument);
  EXPECT_EQ(log.append("a", "b", "c", "", "second"), 2u);
  log.close();
  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.records[1].payload, "second");
}

TEST(MessageLog, FsyncPolicies) {
  const auto syncs_after = [](fsync_policy policy, std::chrono::milliseconds interval,
                              int appends) {
    scratch_dir dir;
    writer_options options = options_for(dir.log());
    options.fsync = policy;
    options.fsync_interval = interval;
    writer log = writer::open(options);
    append_numbered(log, appends);
    const uint64_t during = log.stats().syncs;
    log.close();
    return std::make_pair(during, log.stats().syncs);
  };
  EXPECT_EQ(syncs_after(fsync_policy::never, std::chrono::milliseconds(0), 10),
            std::make_pair(uint64_t{0}, uint64_t{0}));
  EXPECT_EQ(syncs_after(fsync_policy::always, std::chrono::milliseconds(0), 10),
            std::make_pair(uint64_t{10}, uint64_t{10}));
  // An interval that never elapses: one sync, on close.
  EXPECT_EQ(syncs_after(fsync_policy::interval, std::chrono::hours(1), 10),
            std::make_pair(uint64_t{0}, uint64_t{1}));
  // An interval that always elapses: a sync per append, nothing left for close.
  EXPECT_EQ(syncs_after(fsync_policy::interval, std::chrono::milliseconds(0), 10),
            std::make_pair(uint64_t{10}, uint64_t{10}));
}

TEST(MessageLog, FsyncPolicyNames) {
  for (auto policy : {fsync_policy::never, fsync_policy::interval, fsync_policy::always})
    EXPECT_EQ(parse_fsync_policy(to_string(policy)), policy);
  EXPECT_FALSE(parse_fsync_policy("sometimes"));
}

}  // namespace
}  // namespace cuda_agent::message_log
