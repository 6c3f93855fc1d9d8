#include "actors/message_log/file_io.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cuda_agent::message_log {
namespace {

// Reads are issued in chunks of at least this size so that scanning small records costs few
// system calls.
constexpr size_t kReadChunkBytes = size_t{1} << 20;

[[noreturn]] void throw_errno(std::string_view what, const std::filesystem::path& path) {
  throw log_error(fmt::format("{} {}: {}", what, path.string(), std::strerror(errno)));
}

}  // namespace

void unique_fd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // close(2) errors are not actionable here; data syncs are explicit
  fd_ = fd;
}

unique_fd open_file(const std::filesystem::path& path, int flags, unsigned mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno("cannot open", path);
  return unique_fd(fd);
}

void write_all(int fd, std::string_view bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write to", path);
    }
    bytes.remove_prefix(static_cast<size_t>(written));
  }
}

uint64_t file_size(int fd, const std::filesystem::path& path) {
  struct stat st;
  if (::fstat(fd, &st) != 0) throw_errno("cannot stat", path);
  return static_cast<uint64_t>(st.st_size);
}

void sync_data(int fd, const std::filesystem::path& path) {
  if (::fdatasync(fd) != 0) throw_errno("cannot fdatasync", path);
}

void sync_directory(const std::filesystem::path& dir) {
  unique_fd fd = open_file(dir, O_RDONLY | O_DIRECTORY);
  if (::fsync(fd.get()) != 0) throw_errno("cannot fsync directory", dir);
}

segment_file::segment_file(unique_fd fd, std::filesystem::path path)
    : fd_(std::move(fd)), path_(std::move(path)) {}

size_t segment_file::ensure(uint64_t offset, size_t size) {
  const uint64_t buffered_end = buffer_offset_ + buffered_;
  if (offset >= buffer_offset_ && offset + size <= buffered_end) return size;

  // Keep the bytes from `offset` on, move them to the front, and read after them.
  if (offset >= buffer_offset_ && offset < buffered_end) {
    const size_t keep = static_cast<size_t>(buffered_end - offset);
    std::memmove(buffer_.data(), buffer_.data() + (offset - buffer_offset_), keep);
    buffered_ = keep;
  } else {
    buffered_ = 0;
  }
  buffer_offset_ = offset;
  buffer_.resize(std::max({buffer_.size(), size, kReadChunkBytes}));

  while (buffered_ < size) {
    const ssize_t got = ::pread(fd_.get(), buffer_.data() + buffered_, buffer_.size() - buffered_,
                                static_cast<off_t>(buffer_offset_ + buffered_));
    if (got < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot read", path_);
    }
    if (got == 0) break;  // end of the file as it is now
    buffered_ += static_cast<size_t>(got);
  }
  return std::min(size, buffered_);
}

void segment_file::forget_from(uint64_t offset) {
  if (offset < buffer_offset_) {
    buffered_ = 0;
  } else if (offset - buffer_offset_ < buffered_) {
    buffered_ = static_cast<size_t>(offset - buffer_offset_);
  }
}

frame_parse segment_file::read_frame(uint64_t offset, record_view& out) {
  size_t available = ensure(offset, kFrameHeaderBytes);
  frame_parse frame = parse_frame(data(offset), available, out);
  // parse_frame vets the length against kMaxBodyBytes before asking for that many bytes.
  if (frame.status == frame_status::incomplete && available == kFrameHeaderBytes) {
    available = ensure(offset, frame.frame_bytes);
    frame = parse_frame(data(offset), available, out);
  }
  return frame;
}

}  // namespace cuda_agent::message_log
