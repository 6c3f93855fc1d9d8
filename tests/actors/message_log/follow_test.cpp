// Reading while writing: a reader that reached the end picks up what is appended later, and
// never returns a record before it is complete.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "actors/message_log/reader.hpp"
#include "actors/message_log/writer.hpp"
#include "tests/actors/message_log/test_support.hpp"

namespace cuda_agent::message_log {
namespace {

using testing::append_numbered;
using testing::expect_numbered;
using testing::options_for;
using testing::scratch_dir;

// Reads until the reader stops; returns the records and the status it stopped with.
std::pair<std::vector<record>, read_status> drain(reader& log) {
  std::vector<record> records;
  record_view rec;
  read_status status;
  while ((status = log.next(rec)) == read_status::record) records.push_back(record::from(rec));
  return {std::move(records), status};
}

TEST(Follow, SameReaderGetsExactlyTheNewRecords) {
  scratch_dir dir;
  writer_options options = options_for(dir.log());
  options.segment_bytes = 2048;
  writer log = writer::open(options);
  append_numbered(log, 10);

  reader follower = reader::open(dir.log());
  auto [first, status] = drain(follower);
  EXPECT_EQ(status, read_status::end);
  ASSERT_EQ(first.size(), 10u);
  EXPECT_EQ(drain(follower).first.size(), 0u);  // nothing new, still at the end

  append_numbered(log, 7);
  auto [second, status2] = drain(follower);
  EXPECT_EQ(status2, read_status::end);
  ASSERT_EQ(second.size(), 7u);
  for (size_t i = 0; i < second.size(); ++i) {
    EXPECT_EQ(second[i].seq, 11 + i);
    expect_numbered(second[i]);
  }

  // Across rotations too: the follower finds the new segments.
  const uint64_t segments_before = list_segments(dir.log()).size();
  append_numbered(log, 100);
  EXPECT_GT(list_segments(dir.log()).size(), segments_before + 2);
  auto [third, status3] = drain(follower);
  EXPECT_EQ(status3, read_status::end);
  ASSERT_EQ(third.size(), 100u);
  for (size_t i = 0; i < third.size(); ++i) EXPECT_EQ(third[i].seq, 18 + i);
  EXPECT_EQ(follower.next_seq(), 118u);
}

TEST(Follow, ReaderOpenedBeforeTheWriterCreatesTheLog) {
  scratch_dir dir;
  std::filesystem::create_directories(dir.log());
  reader follower = reader::open(dir.log());
  record_view rec;
  EXPECT_EQ(follower.next(rec), read_status::end);
  writer log = writer::open(options_for(dir.log()));
  append_numbered(log, 3);
  EXPECT_EQ(drain(follower).first.size(), 3u);
}

TEST(Follow, HalfWrittenRecordIsNotReturnedUntilComplete) {
  scratch_dir dir;
  {
    writer log = writer::open(options_for(dir.log()));
    append_numbered(log, 5);
  }
  const auto segment = list_segments(dir.log()).back().path;
  const uint64_t tail = std::filesystem::file_size(segment);

  reader follower = reader::open(dir.log());
  ASSERT_EQ(drain(follower).first.size(), 5u);

  // Write the sixth frame by hand, a few bytes at a time, as a slow writer would.
  record_view sixth;
  sixth.seq = 6;
  sixth.ts_ns = 42;
  sixth.sender = "hand";
  sixth.type = "slow";
  sixth.payload = "arrives in pieces";
  std::string frame;
  encode_frame(sixth, frame);
  const size_t pieces[] = {3, kFrameHeaderBytes, kFrameHeaderBytes + 10, frame.size() - 1};
  size_t written = 0;
  record_view rec;
  for (size_t upto : pieces) {
    testing::append_bytes(segment, frame.substr(written, upto - written));
    written = upto;
    EXPECT_EQ(follower.next(rec), read_status::incomplete_tail) << "after " << upto << " bytes";
    EXPECT_EQ(follower.problem().offset, tail);
    EXPECT_EQ(follower.problem().segment, segment);
  }
  testing::append_bytes(segment, frame.substr(written));
  ASSERT_EQ(follower.next(rec), read_status::record);
  EXPECT_EQ(record::from(rec), record::from(sixth));
  EXPECT_EQ(follower.next(rec), read_status::end);
}

// A follower stopped at a torn tail, whose bytes it has read, must not mix them with the records
// a reopening writer appends after cutting that tail off.
TEST(Follow, FollowerCarriesOnAfterRecoveryReplacesATornTail) {
  scratch_dir dir;
  {
    writer log = writer::open(options_for(dir.log()));
    append_numbered(log, 5);
  }
  const auto segment = list_segments(dir.log()).back().path;
  const std::string doomed_payload(500, 'd');
  record_view doomed;
  doomed.seq = 6;
  doomed.type = "never-finished";
  doomed.payload = doomed_payload;
  std::string frame;
  encode_frame(doomed, frame);
  testing::append_bytes(segment, frame.substr(0, 300));  // the crash: a torn sixth record

  reader follower = reader::open(dir.log());
  ASSERT_EQ(drain(follower).second, read_status::incomplete_tail);
  EXPECT_EQ(follower.next_seq(), 6u);

  writer log = writer::open(options_for(dir.log()));
  ASSERT_TRUE(log.recovery().truncated());
  append_numbered(log, 3);
  auto [after, status] = drain(follower);
  EXPECT_EQ(status, read_status::end) << follower.problem().message();
  ASSERT_EQ(after.size(), 3u);
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].seq, 6 + i);
    expect_numbered(after[i]);
  }
}

// A writer thread and a following reader at full speed, with frequent rotation: the reader may
// see incomplete tails but never corruption, and ends with every record in order.
TEST(Follow, ConcurrentWriterAndReader) {
  scratch_dir dir;
  writer_options options = options_for(dir.log());
  options.segment_bytes = 4096;
  constexpr int kRecords = 3000;
  writer log = writer::open(options);
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (int i = 0; i < kRecords; ++i) {
      const uint64_t seq = log.next_seq();
      // Some records straddle page boundaries, so a reader can catch one half copied.
      std::string payload = testing::payload_for(seq);
      if (seq % 10 == 0) payload.append(3000, 'w');
      log.append("sender-" + std::to_string(seq % 3), "receiver", "type-" + std::to_string(seq % 2),
                 "episode-" + std::to_string(seq % 4), payload);
    }
    done = true;
  });

  reader follower = reader::open(dir.log());
  uint64_t expected = 1;
  record_view rec;
  for (;;) {
    const read_status status = follower.next(rec);
    if (status == read_status::record) {
      ASSERT_EQ(rec.seq, expected);
      ++expected;
      continue;
    }
    ASSERT_NE(status, read_status::corrupt) << follower.problem().message();
    if (done && expected > kRecords) break;
    std::this_thread::yield();
  }
  producer.join();
  EXPECT_EQ(expected, kRecords + 1u);
}

}  // namespace
}  // namespace cuda_agent::message_log
