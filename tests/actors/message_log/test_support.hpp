// Helpers shared by the message log tests: scratch directories, raw file surgery, and a fixed
// way of producing distinguishable records.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "actors/message_log/format.hpp"
#include "actors/message_log/writer.hpp"

namespace cuda_agent::message_log::testing {

namespace fs = std::filesystem;

// A fresh directory removed when the test ends.
class scratch_dir {
 public:
  scratch_dir() {
    std::string pattern = (fs::temp_directory_path() / "ca-message-log-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~scratch_dir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;

  const fs::path& path() const { return path_; }
  fs::path log() const { return path_ / "log"; }

 private:
  fs::path path_;
};

inline std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void append_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::app);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void flip_byte(const fs::path& path, uint64_t offset) {
  std::string bytes = read_bytes(path);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x5A);
  write_bytes(path, bytes);
}

inline std::vector<fs::path> segment_paths(const fs::path& dir) {
  std::vector<fs::path> paths;
  for (const auto& segment : list_segments(dir)) paths.push_back(segment.path);
  return paths;
}

// Files in `dir` whose name contains `.torn-` (recovery side files).
inline std::vector<fs::path> side_files(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().find(".torn-") != std::string::npos)
      found.push_back(entry.path());
  return found;
}

// A payload that says which record it belongs to, of a size that varies with it.
inline std::string payload_for(uint64_t seq) {
  std::string payload = "payload-" + std::to_string(seq) + ":";
  payload.append(seq % 37, static_cast<char>('a' + seq % 26));
  payload.push_back('\0');  // payloads are bytes, not C strings
  return payload;
}

inline writer_options options_for(const fs::path& dir) {
  writer_options options;
  options.dir = dir;
  options.fsync = fsync_policy::never;  // tests check visibility, not durability
  return options;
}

// Appends records whose fields follow from their sequence number; returns the last seq.
inline uint64_t append_numbered(writer& log, int count) {
  uint64_t seq = 0;
  for (int i = 0; i < count; ++i) {
    const uint64_t next = log.next_seq();
    seq = log.append("sender-" + std::to_string(next % 3), "receiver",
                     "type-" + std::to_string(next % 2), "episode-" + std::to_string(next % 4),
                     payload_for(next));
  }
  return seq;
}

// Checks that `rec` is what append_numbered wrote for its sequence number.
inline void expect_numbered(const record& rec) {
  EXPECT_EQ(rec.sender, "sender-" + std::to_string(rec.seq % 3)) << "seq " << rec.seq;
  EXPECT_EQ(rec.type, "type-" + std::to_string(rec.seq % 2)) << "seq " << rec.seq;
  EXPECT_EQ(rec.episode, "episode-" + std::to_string(rec.seq % 4)) << "seq " << rec.seq;
  EXPECT_EQ(rec.payload, payload_for(rec.seq)) << "seq " << rec.seq;
}

// The byte offsets at which each record frame of a segment starts, plus its end.
inline std::vector<uint64_t> frame_offsets(const fs::path& segment) {
  const std::string bytes = read_bytes(segment);
  std::vector<uint64_t> offsets;
  uint64_t at = kSegmentHeaderBytes;
  while (at + kFrameHeaderBytes <= bytes.size()) {
    offsets.push_back(at);
    at += kFrameHeaderBytes + decode_frame_header(bytes.data() + at).body_bytes;
  }
  offsets.push_back(at);
  return offsets;
}

}  // namespace cuda_agent::message_log::testing
