#include "actors/message_log/format.hpp"

#include <gtest/gtest.h>

#include <string>

#include "actors/message_log/crc32c.hpp"

namespace cuda_agent::message_log {
namespace {

record_view sample() {
  record_view rec;
  rec.seq = 0x0102030405060708;
  rec.ts_ns = -5;  // before the epoch: the timestamp is signed
  rec.sender = "rollout";
  rec.receiver = "episode/7";
  rec.type = "task_assigned";
  rec.episode = "ep-7";
  rec.payload = std::string_view("\x81\xa1x\x01\x00", 5);
  return rec;
}

TEST(Format, FrameRoundTrip) {
  std::string bytes = "prefix";  // encode_frame appends
  encode_frame(sample(), bytes);
  ASSERT_EQ(bytes.size(), 6 + frame_size(sample()));
  record_view out;
  const frame_parse frame = parse_frame(bytes.data() + 6, bytes.size() - 6, out);
  ASSERT_EQ(frame.status, frame_status::ok) << frame.detail;
  EXPECT_EQ(frame.frame_bytes, bytes.size() - 6);
  EXPECT_EQ(record::from(out), record::from(sample()));
}

// The layout FORMAT.md documents, checked byte by byte.
TEST(Format, FrameLayoutIsLittleEndianAndDocumented) {
  record_view rec;
  rec.seq = 1;
  rec.ts_ns = 2;
  rec.sender = "s";
  rec.type = "tt";
  rec.payload = "P";
  std::string bytes;
  encode_frame(rec, bytes);
  const std::string body = bytes.substr(kFrameHeaderBytes);
  ASSERT_EQ(body.size(), 24u + 1 + 2 + 1);
  EXPECT_EQ(bytes.substr(0, 4), std::string("\x1c\x00\x00\x00", 4));
  EXPECT_EQ(body.substr(0, 8), std::string("\x01\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(body.substr(8, 8), std::string("\x02\0\0\0\0\0\0\0", 8));
  EXPECT_EQ(body.substr(16, 8), std::string("\x01\0\0\0\x02\0\0\0", 8));  // lengths: s, r, t, e
  EXPECT_EQ(body.substr(24), "sttP");
}

// The example in FORMAT.md, byte for byte.
TEST(Format, DocumentedExample) {
  record_view rec;
  rec.seq = 1;
  rec.ts_ns = 1764504000000000000;  // 2025-11-30T12:00:00Z
  rec.sender = "a";
  rec.receiver = "b";
  rec.type = "t";
  rec.episode = "e1";
  rec.payload = "\x81\xa1k\x01";
  std::string bytes = encode_segment_header(1);
  encode_frame(rec, bytes);
  constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes) {
    hex.push_back(kDigits[c >> 4]);
    hex.push_back(kDigits[c & 15]);
  }
  EXPECT_EQ(hex,
            "43414d53474c4f470100000020000000"
            "01000000000000000000000027481136"
            "21000000c4b351b10100000000000000"
            "0080c10c0ac77c180100010001000200"
            "6162746531"
            "81a16b01");
}

TEST(Format, ParseFrameReportsIncompleteWithBytesNeeded) {
  std::string bytes;
  encode_frame(sample(), bytes);
  record_view out;
  for (size_t cut : {size_t{0}, size_t{3}, kFrameHeaderBytes, bytes.size() - 1}) {
    const frame_parse frame = parse_frame(bytes.data(), cut, out);
    EXPECT_EQ(frame.status, frame_status::incomplete) << cut;
    EXPECT_EQ(frame.available, cut);
    EXPECT_EQ(frame.frame_bytes, cut < kFrameHeaderBytes ? kFrameHeaderBytes : bytes.size());
  }
}

TEST(Format, ParseFrameRejectsBadLengthChecksumAndBody) {
  std::string good;
  encode_frame(sample(), good);
  record_view out;

  std::string too_long = good;
  too_long.replace(0, 4, std::string("\xff\xff\xff\x7f", 4));
  EXPECT_EQ(parse_frame(too_long.data(), too_long.size(), out).status, frame_status::bad_length);
  std::string too_short = good;
  too_short.replace(0, 4, std::string("\x05\0\0\0", 4));
  EXPECT_EQ(parse_frame(too_short.data(), too_short.size(), out).status, frame_status::bad_length);

  std::string flipped = good;
  flipped.back() ^= 1;
  EXPECT_EQ(parse_frame(flipped.data(), flipped.size(), out).status, frame_status::bad_checksum);

  // A body whose string lengths overrun it, under a checksum that matches.
  record_view short_one = sample();
  short_one.payload = {};
  std::string liar;
  encode_frame(short_one, liar);
  liar[kFrameHeaderBytes + 16] = '\x7f';  // sender length 127 > the whole body
  const uint32_t crc = crc32c(std::string_view(liar).substr(kFrameHeaderBytes));
  for (int i = 0; i < 4; ++i) liar[4 + i] = static_cast<char>((crc >> (8 * i)) & 0xFF);
  const frame_parse frame = parse_frame(liar.data(), liar.size(), out);
  EXPECT_EQ(frame.status, frame_status::bad_body) << frame.detail;
}

TEST(Format, SegmentHeaderRoundTripAndRejections) {
  const std::string header = encode_segment_header(12345);
  ASSERT_EQ(header.size(), kSegmentHeaderBytes);
  EXPECT_EQ(header.substr(0, 8), "CAMSGLOG");
  const segment_header_parse parsed = decode_segment_header(header.data());
  EXPECT_TRUE(parsed.error.empty()) << parsed.error;
  EXPECT_EQ(parsed.first_seq, 12345u);

  std::string bad_magic = header;
  bad_magic[0] = 'X';
  EXPECT_NE(decode_segment_header(bad_magic.data()).error.find("magic"), std::string::npos);
  std::string bad_seq = header;
  bad_seq[16] ^= 1;
  EXPECT_NE(decode_segment_header(bad_seq.data()).error.find("checksum"), std::string::npos);
}

TEST(Format, SegmentFileNames) {
  EXPECT_EQ(segment_file_name(1), "00000000000000000001.seg");
  EXPECT_EQ(parse_segment_file_name("00000000000000000042.seg"), 42u);
  EXPECT_EQ(parse_segment_file_name(segment_file_name(UINT64_MAX)), UINT64_MAX);
  EXPECT_FALSE(parse_segment_file_name("00000000000000000042.seg.tmp"));
  EXPECT_FALSE(parse_segment_file_name("00000000000000000042.seg.torn-32"));
  EXPECT_FALSE(parse_segment_file_name("0000000000000000004x.seg"));
  EXPECT_FALSE(parse_segment_file_name("99999999999999999999.seg"));  // overflows u64
  EXPECT_FALSE(parse_segment_file_name("LOCK"));
}

TEST(Format, OversizedFieldsAreRefused) {
  record_view rec = sample();
  const std::string long_type(kMaxFieldBytes + 1, 't');
  rec.type = long_type;
  std::string out;
  EXPECT_THROW(encode_frame(rec, out), std::invalid_argument);
  EXPECT_TRUE(out.empty());
}

}  // namespace
}  // namespace cuda_agent::message_log
