// POSIX file plumbing shared by the writer and the reader: an owning descriptor, loops around
// write(2)/pread(2) that handle short transfers and EINTR, and a read buffer over a segment file
// that may still be growing. Internal to the message log.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>

#include "actors/message_log/format.hpp"

namespace cuda_agent::message_log {

class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  unique_fd& operator=(unique_fd&& other) noexcept {
    if (this != &other) reset(std::exchange(other.fd_, -1));
    return *this;
  }
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd() { reset(); }

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// Each throws log_error naming `path` and the errno text.
unique_fd open_file(const std::filesystem::path& path, int flags, unsigned mode = 0644);
void write_all(int fd, std::string_view bytes, const std::filesystem::path& path);
uint64_t file_size(int fd, const std::filesystem::path& path);
void sync_data(int fd, const std::filesystem::path& path);  // fdatasync
// Makes a file creation, rename or removal in `dir` durable.
void sync_directory(const std::filesystem::path& dir);

// Reads a segment file through a buffer, by absolute offset. Bytes once read are kept, so the
// file may grow (a writer appending) but must not change below what has been read (except
// through forget_from).
class segment_file {
 public:
  segment_file() = default;
  segment_file(unique_fd fd, std::filesystem::path path);

  // Makes [offset, offset + size) readable through data(offset) if the file holds it, reading
  // from the file as needed (the caller never moves `offset` backwards). Returns how many of
  // those bytes are available: `size`, or fewer at the current end of the file.
  size_t ensure(uint64_t offset, size_t size);
  const char* data(uint64_t offset) const { return buffer_.data() + (offset - buffer_offset_); }

  // Forgets buffered bytes from `offset` on. A reader calls it when it stops at the end of the
  // data, so that what it reads next comes from the file even if a reopening writer cut a torn
  // tail off and appended new records in its place.
  void forget_from(uint64_t offset);

  // Parses the frame at `offset`, reading as much of the file as the frame's length asks for
  // (never more than kMaxBodyBytes, whatever the length field says). `out` points into the
  // buffer until the next call.
  frame_parse read_frame(uint64_t offset, record_view& out);

  const std::filesystem::path& path() const { return path_; }
  explicit operator bool() const { return static_cast<bool>(fd_); }

 private:
  unique_fd fd_;
  std::filesystem::path path_;
  std::string buffer_;  // buffer_[0] is the byte at file offset buffer_offset_
  uint64_t buffer_offset_ = 0;
  size_t buffered_ = 0;  // valid bytes in buffer_
};

}  // namespace cuda_agent::message_log
