// Appends records to a message log directory.
//
// Every append is one write(2) of a whole frame, so a record is visible to readers (including a
// reader following the log) as soon as append() returns and survives a crash of this process;
// how soon it survives a crash of the machine is the fsync policy. On open, the last segment is
// checked and a torn or corrupt tail is cut off and kept in a side file (see recovery_report).
//
// Not thread-safe by design: the recorder actor owns the one writer of a log and serialises
// appends through its mailbox. A second writer on the same directory, in this process or
// another, is refused (an flock on <dir>/LOCK).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "actors/message_log/format.hpp"

namespace cuda_agent::message_log {

enum class fsync_policy {
  never,     // the kernel writes back when it likes; a machine crash may lose recent records
  interval,  // fdatasync on an append at least `fsync_interval` after the previous one, when
             // switching segments, and on close
  always,    // fdatasync after every append
};

// "never" | "interval" | "always" (the values of the log.fsync setting).
std::optional<fsync_policy> parse_fsync_policy(std::string_view name);
std::string_view to_string(fsync_policy policy);

struct writer_options {
  std::filesystem::path dir;  // created if absent
  uint64_t segment_bytes = uint64_t{64} << 20;
  fsync_policy fsync = fsync_policy::interval;
  std::chrono::milliseconds fsync_interval{1000};
  // Record timestamps, ns since the Unix epoch; the system clock when empty. Tests inject one.
  std::function<int64_t()> clock;
};

// What open() found at the end of the log and did about it.
struct recovery_report {
  std::filesystem::path segment;    // the last segment (created if the log was new)
  bool created = false;             // the log had no segment; a first one was started
  uint64_t records_kept = 0;        // valid records in the last segment
  uint64_t valid_bytes = 0;         // the last segment's size after recovery
  uint64_t cut_bytes = 0;           // bytes removed from its end (0: the tail was clean)
  std::filesystem::path side_file;  // where the cut bytes were saved, when cut_bytes > 0
  std::string reason;               // why the valid prefix ended, when cut_bytes > 0
  uint64_t next_seq = 0;            // the sequence number the next append gets

  bool truncated() const { return cut_bytes > 0; }
};

struct writer_stats {
  uint64_t records = 0;  // appended by this writer
  uint64_t bytes = 0;    // frame bytes appended by this writer
  uint64_t syncs = 0;    // fdatasync calls on segment files
  uint64_t segments_created = 0;
};

class writer {
 public:
  // Opens (creating if needed) the log in options.dir and recovers its last segment. Throws
  // log_error if the directory cannot be used, another writer holds it, or the last segment's
  // header is not a valid header (which no crash produces: the log needs a person's look).
  static writer open(writer_options options);

  writer(writer&&) noexcept;
  writer& operator=(writer&&) noexcept;
  ~writer();  // close(); errors are logged, not thrown (call close() to see them)

  // Appends one record and returns its sequence number. Throws std::invalid_argument if a field
  // is too large (format.hpp limits) and log_error on I/O failure (after removing any partial
  // frame, so the log stays valid).
  uint64_t append(std::string_view sender, std::string_view receiver, std::string_view type,
                  std::string_view episode, std::string_view payload);

  // Forces what was appended to stable storage now, whatever the policy.
  void flush();
  // Syncs (unless the policy is never) and releases the log; later appends throw. Idempotent.
  void close();

  uint64_t next_seq() const;
  const recovery_report& recovery() const;
  const writer_stats& stats() const;
  const std::filesystem::path& dir() const;
  const std::filesystem::path& current_segment() const;

 private:
  struct impl;
  explicit writer(std::unique_ptr<impl> state);
  impl& state() const;

  std::unique_ptr<impl> impl_;
};

}  // namespace cuda_agent::message_log
