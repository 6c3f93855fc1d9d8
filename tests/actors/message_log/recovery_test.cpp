// Damaged logs: torn tails, flipped bytes, gaps, absurd lengths. The writer cuts a damaged tail
// of the last segment off (keeping the bytes in a side file); the reader never returns a damaged
// record and says where the damage is.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "actors/message_log/reader.hpp"
#include "actors/message_log/writer.hpp"
#include "tests/actors/message_log/test_support.hpp"

namespace cuda_agent::message_log {
namespace {

namespace fs = std::filesystem;
using testing::append_numbered;
using testing::expect_numbered;
using testing::frame_offsets;
using testing::options_for;
using testing::read_bytes;
using testing::scratch_dir;
using testing::side_files;
using testing::write_bytes;

void make_log(const fs::path& dir, int records, uint64_t segment_bytes = uint64_t{1} << 30) {
  writer_options options = options_for(dir);
  options.segment_bytes = segment_bytes;
  writer log = writer::open(options);
  append_numbered(log, records);
}

void resize(const fs::path& path, uint64_t size) { fs::resize_file(path, size); }

void overwrite(const fs::path& path, uint64_t offset, const std::string& bytes) {
  std::string content = read_bytes(path);
  ASSERT_LE(offset + bytes.size(), content.size());
  content.replace(offset, bytes.size(), bytes);
  write_bytes(path, content);
}

// Checks that a log reads as records 1..count, all intact, then `status`.
void expect_records(const fs::path& dir, uint64_t count, read_status status) {
  const read_all_result all = read_all(dir);
  EXPECT_EQ(all.status, status) << all.problem.message();
  ASSERT_EQ(all.records.size(), count);
  for (uint64_t i = 0; i < count; ++i) {
    EXPECT_EQ(all.records[i].seq, i + 1);
    expect_numbered(all.records[i]);
  }
}

// Reopens the writer on a log whose last segment is damaged from `damage_at` on, and checks the
// whole recovery contract: the cut, the side file, the sequence, and that appends carry on.
void expect_recovery(const fs::path& dir, uint64_t damage_at, uint64_t records_before) {
  const fs::path segment = list_segments(dir).back().path;
  const std::string before = read_bytes(segment);
  ASSERT_LT(damage_at, before.size());

  writer log = writer::open(options_for(dir));
  const recovery_report& report = log.recovery();
  EXPECT_TRUE(report.truncated());
  EXPECT_FALSE(report.reason.empty());
  EXPECT_EQ(report.segment, segment);
  EXPECT_EQ(report.valid_bytes, damage_at);
  EXPECT_EQ(report.cut_bytes, before.size() - damage_at);
  EXPECT_EQ(report.next_seq, records_before + 1);
  EXPECT_EQ(fs::file_size(segment), damage_at);
  // Nothing is destroyed: the side file holds exactly the bytes that were cut.
  ASSERT_TRUE(fs::exists(report.side_file));
  EXPECT_EQ(report.side_file.filename().string(),
            segment.filename().string() + ".torn-" + std::to_string(damage_at));
  EXPECT_EQ(read_bytes(report.side_file), before.substr(damage_at));

  EXPECT_EQ(append_numbered(log, 3), records_before + 3);
  log.close();
  expect_records(dir, records_before + 3, read_status::end);
}

TEST(Recovery, TornTailAtEveryKindOfOffset) {
  scratch_dir original;
  make_log(original.log(), 10);
  const fs::path segment = list_segments(original.log()).back().path;
  const std::vector<uint64_t> offsets = frame_offsets(segment);
  const uint64_t last_frame = offsets[9];
  const uint64_t end = offsets[10];
  ASSERT_EQ(end, fs::file_size(segment));

  const std::pair<const char*, uint64_t> cuts[] = {
      {"inside the length", last_frame + 1},
      {"inside the length", last_frame + 3},
      {"inside the checksum", last_frame + 6},
      {"after the frame header", last_frame + kFrameHeaderBytes},
      {"inside the fixed body", last_frame + kFrameHeaderBytes + 5},
      {"one byte short", end - 1},
  };
  for (const auto& [where, cut] : cuts) {
    SCOPED_TRACE(std::string(where) + " at " + std::to_string(cut));
    scratch_dir dir;
    fs::copy(original.log(), dir.log());
    resize(list_segments(dir.log()).back().path, cut);

    // Before any writer repairs it, the reader stops at the torn record without returning it.
    const read_all_result torn = read_all(dir.log());
    EXPECT_EQ(torn.status, read_status::incomplete_tail);
    EXPECT_EQ(torn.records.size(), 9u);
    EXPECT_EQ(torn.problem.offset, last_frame);

    expect_recovery(dir.log(), last_frame, 9);
  }
}

TEST(Recovery, CleanLogIsNotTouched) {
  scratch_dir dir;
  make_log(dir.log(), 10);
  const std::string before = read_bytes(list_segments(dir.log()).back().path);
  writer log = writer::open(options_for(dir.log()));
  EXPECT_FALSE(log.recovery().truncated());
  EXPECT_EQ(log.recovery().records_kept, 10u);
  EXPECT_EQ(read_bytes(list_segments(dir.log()).back().path), before);
  EXPECT_TRUE(side_files(dir.log()).empty());
}

TEST(Recovery, FlippedByteInTheLastSegmentCutsFromThatRecordOn) {
  scratch_dir dir;
  make_log(dir.log(), 10);
  const fs::path segment = list_segments(dir.log()).back().path;
  const uint64_t fifth = frame_offsets(segment)[4];
  testing::flip_byte(segment, fifth + kFrameHeaderBytes + 30);

  const read_all_result damaged = read_all(dir.log());
  EXPECT_EQ(damaged.status, read_status::corrupt);
  EXPECT_EQ(damaged.records.size(), 4u);
  EXPECT_EQ(damaged.problem.segment, segment);
  EXPECT_EQ(damaged.problem.offset, fifth);
  EXPECT_NE(damaged.problem.reason.find("checksum mismatch"), std::string::npos);

  expect_recovery(dir.log(), fifth, 4);
}

TEST(Recovery, CorruptionInAnEarlierSegmentIsReportedNotSkipped) {
  scratch_dir dir;
  make_log(dir.log(), 100, 1024);
  const auto segments = list_segments(dir.log());
  ASSERT_GE(segments.size(), 3u);
  const fs::path second = segments[1].path;
  const std::vector<uint64_t> offsets = frame_offsets(second);
  testing::flip_byte(second, offsets[2] + kFrameHeaderBytes + 1);  // third record's seq

  // The reader returns everything before the damage, then stops for good.
  reader log = reader::open(dir.log());
  record_view rec;
  uint64_t returned = 0;
  read_status status;
  while ((status = log.next(rec)) == read_status::record) {
    ++returned;
    EXPECT_EQ(rec.seq, returned);
  }
  EXPECT_EQ(status, read_status::corrupt);
  EXPECT_EQ(returned, segments[1].first_seq + 1);  // first segment + two records of the second
  EXPECT_EQ(log.problem().segment, second);
  EXPECT_EQ(log.problem().offset, offsets[2]);
  EXPECT_NE(log.problem().message().find(second.string()), std::string::npos);
  EXPECT_EQ(log.next(rec), read_status::corrupt);  // sticky: nothing after it is replayed

  // The writer only repairs the last segment; an earlier one needs a person.
  writer reopened = writer::open(options_for(dir.log()));
  EXPECT_FALSE(reopened.recovery().truncated());
  reopened.close();
  EXPECT_EQ(read_all(dir.log()).status, read_status::corrupt);
}

TEST(Recovery, TornRecordInAnEarlierSegmentIsCorruption) {
  scratch_dir dir;
  make_log(dir.log(), 100, 1024);
  const auto segments = list_segments(dir.log());
  ASSERT_GE(segments.size(), 3u);
  const std::vector<uint64_t> offsets = frame_offsets(segments[0].path);
  resize(segments[0].path, offsets[offsets.size() - 2] + 5);

  const read_all_result all = read_all(dir.log());
  EXPECT_EQ(all.status, read_status::corrupt);
  EXPECT_EQ(all.records.size(), offsets.size() - 2);
  EXPECT_EQ(all.problem.segment, segments[0].path);
  EXPECT_NE(all.problem.reason.find("later segment exists"), std::string::npos)
      << all.problem.reason;
}

TEST(Recovery, MissingSegmentIsASequenceGap) {
  scratch_dir dir;
  make_log(dir.log(), 100, 1024);
  const auto segments = list_segments(dir.log());
  ASSERT_GE(segments.size(), 4u);
  fs::remove(segments[1].path);

  const read_all_result all = read_all(dir.log());
  EXPECT_EQ(all.status, read_status::corrupt);
  EXPECT_EQ(all.records.size(), segments[1].first_seq - 1);
  EXPECT_EQ(all.problem.segment, segments[2].path);
  EXPECT_NE(all.problem.reason.find("sequence gap"), std::string::npos) << all.problem.reason;
}

TEST(Recovery, SequenceGapInsideASegment) {
  scratch_dir dir;
  fs::create_directories(dir.log());
  const fs::path segment = dir.log() / segment_file_name(1);
  std::string bytes = encode_segment_header(1);
  uint64_t gap_offset = 0;
  for (uint64_t seq : {1, 2, 4, 5}) {
    if (seq == 4) gap_offset = bytes.size();
    record_view rec;
    rec.seq = seq;
    rec.type = "t";
    encode_frame(rec, bytes);
  }
  write_bytes(segment, bytes);

  const read_all_result all = read_all(dir.log());
  EXPECT_EQ(all.status, read_status::corrupt);
  EXPECT_EQ(all.records.size(), 2u);
  EXPECT_EQ(all.problem.offset, gap_offset);
  EXPECT_NE(all.problem.reason.find("sequence number 4 where 3 was expected"), std::string::npos)
      << all.problem.reason;

  // The writer does not continue a log with a hole in it: it cuts at the hole.
  writer log = writer::open(options_for(dir.log()));
  EXPECT_EQ(log.recovery().valid_bytes, gap_offset);
  EXPECT_EQ(log.next_seq(), 3u);
}

TEST(Recovery, LengthAboveTheCapIsCorruptionNotAnAllocation) {
  const uint32_t absurd_lengths[] = {0xFFFFFFFFu, static_cast<uint32_t>(kMaxBodyBytes + 1)};
  for (uint32_t length : absurd_lengths) {
    for (int victim : {3, 9}) {  // a middle record, and the very last one
      SCOPED_TRACE("length " + std::to_string(length) + " in record " + std::to_string(victim + 1));
      scratch_dir dir;
      make_log(dir.log(), 10);
      const fs::path segment = list_segments(dir.log()).back().path;
      const uint64_t at = frame_offsets(segment)[victim];
      std::string le(4, '\0');
      for (int i = 0; i < 4; ++i) le[i] = static_cast<char>((length >> (8 * i)) & 0xFF);
      overwrite(segment, at, le);

      // Even at the tail, where the "record" would run past the end of the file, an impossible
      // length is damage, not a write in progress.
      const read_all_result all = read_all(dir.log());
      EXPECT_EQ(all.status, read_status::corrupt);
      EXPECT_EQ(all.records.size(), static_cast<size_t>(victim));
      EXPECT_EQ(all.problem.offset, at);
      EXPECT_NE(all.problem.reason.find("record length"), std::string::npos) << all.problem.reason;

      expect_recovery(dir.log(), at, victim);
    }
  }
}

TEST(Recovery, ZeroFilledTailIsCut) {
  // What a file system may leave after a power cut: the size grew, the data never arrived.
  scratch_dir dir;
  make_log(dir.log(), 5);
  const fs::path segment = list_segments(dir.log()).back().path;
  const uint64_t end = fs::file_size(segment);
  testing::append_bytes(segment, std::string(4096, '\0'));
  EXPECT_EQ(read_all(dir.log()).status, read_status::corrupt);
  expect_recovery(dir.log(), end, 5);
}

TEST(Recovery, TornSegmentHeaderIsRebuilt) {
  scratch_dir dir;
  make_log(dir.log(), 100, 1024);
  const segment_info last = list_segments(dir.log()).back();
  const std::string before = read_bytes(last.path);
  resize(last.path, 10);  // a crash right after the segment was created, header half written

  const read_all_result torn = read_all(dir.log());
  EXPECT_EQ(torn.status, read_status::incomplete_tail);
  EXPECT_EQ(torn.records.size(), last.first_seq - 1);
  EXPECT_EQ(torn.problem.segment, last.path);
  EXPECT_EQ(torn.problem.offset, 0u);

  writer log = writer::open(options_for(dir.log()));
  EXPECT_EQ(log.recovery().cut_bytes, 10u);
  EXPECT_EQ(read_bytes(log.recovery().side_file), before.substr(0, 10));
  EXPECT_EQ(log.next_seq(), last.first_seq);
  append_numbered(log, 5);
  log.close();
  expect_records(dir.log(), last.first_seq + 4, read_status::end);
}

TEST(Recovery, ForeignFileAsLastSegmentIsRefused) {
  scratch_dir dir;
  make_log(dir.log(), 3);
  overwrite(list_segments(dir.log()).back().path, 0, "NOTALOG!");
  try {
    writer::open(options_for(dir.log()));
    FAIL() << "opened a log whose last segment has a foreign header";
  } catch (const log_error& e) {
    EXPECT_NE(std::string(e.what()).find("magic"), std::string::npos) << e.what();
  }
  const read_all_result all = read_all(dir.log());
  EXPECT_EQ(all.status, read_status::corrupt);
  EXPECT_EQ(all.problem.offset, 0u);
}

TEST(Recovery, RepeatedRecoveriesKeepEarlierSideFiles) {
  scratch_dir dir;
  make_log(dir.log(), 5);
  const fs::path segment = list_segments(dir.log()).back().path;
  const uint64_t end = fs::file_size(segment);
  for (int round = 0; round < 3; ++round) {
    testing::append_bytes(segment, "torn" + std::to_string(round));
    writer log = writer::open(options_for(dir.log()));
    EXPECT_EQ(log.recovery().valid_bytes, end);
  }
  const auto kept = side_files(dir.log());
  ASSERT_EQ(kept.size(), 3u);
  std::set<std::string> contents;
  for (const auto& path : kept) contents.insert(read_bytes(path));
  EXPECT_EQ(contents, (std::set<std::string>{"torn0", "torn1", "torn2"}));
}

}  // namespace
}  // namespace cuda_agent::message_log
