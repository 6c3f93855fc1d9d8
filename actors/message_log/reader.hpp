// Reads a message log in sequence order, across segments, verifying as it goes.
//
//   record_filter filter;
//   filter.episode = "ep-7";
//   reader log = reader::open(dir, filter);
//   record_view rec;
//   while (log.next(rec) == read_status::record) use(rec);
//
// next() verifies every record it passes over, filtered out or not: checksum, length limit,
// segment headers and that sequence numbers rise by exactly one across the whole log. It stops
// in one of three ways:
//   end              the log ends at a record boundary;
//   incomplete_tail  the last segment ends inside a record (or inside its header): a writer is
//                    mid-append, or a crash tore the tail. Not an error: call next() again later
//                    and the record is returned once it is complete (this is how a reader follows
//                    a live log). A writer reopening the log cuts a torn tail off; a
//                    follower then carries on with the records appended in its place.
//   corrupt          anything else that is not a valid record; problem() says where and why.
//                    Sticky: no record after a corruption is ever returned.
// After end, a later next() also picks up records appended since (and new segments).
//
// Not thread-safe; one reader per thread. Any number of readers may follow one writer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/message_log/format.hpp"

namespace cuda_agent::message_log {

enum class read_status { record, end, incomplete_tail, corrupt };
std::string_view to_string(read_status status);

// Records pass when every field that is set matches; times are inclusive bounds on ts_ns.
struct record_filter {
  std::optional<std::string> episode;
  std::optional<std::string> type;
  std::optional<int64_t> from_ns;
  std::optional<int64_t> to_ns;

  bool matches(const record_view& rec) const;
};

// Where and why reading stopped, for incomplete_tail and corrupt.
struct read_problem {
  std::filesystem::path segment;
  uint64_t offset = 0;  // byte offset in the segment of the frame (or header) that failed
  std::string reason;

  std::string message() const;  // "<segment> at offset <offset>: <reason>"
};

struct reader_stats {
  uint64_t records_scanned = 0;  // verified, whether or not the filter passed them
  uint64_t records_matched = 0;
  uint64_t bytes_scanned = 0;  // frame bytes of the scanned records
  uint64_t segments_opened = 0;
};

class reader {
 public:
  // Throws log_error if `dir` does not exist or is not a directory. A directory without
  // segments is an empty log (a writer may not have started yet).
  static reader open(std::filesystem::path dir, record_filter filter = {});

  reader(reader&&) noexcept;  // a moved-from reader may only be destroyed or assigned to
  reader& operator=(reader&&) noexcept;
  ~reader();

  // On read_status::record, `out` holds the next matching record; its strings point into the
  // reader's buffer and stay valid until the next call.
  read_status next(record_view& out);

  // Details of the last incomplete_tail or corrupt result.
  const read_problem& problem() const;
  // The sequence number the next record in the log must carry (0 before the first segment).
  uint64_t next_seq() const;
  const reader_stats& stats() const;

 private:
  struct impl;
  explicit reader(std::unique_ptr<impl> state);
  std::unique_ptr<impl> impl_;
};

// Reads every matching record into memory; for tests, tools and small logs.
struct read_all_result {
  std::vector<record> records;
  read_status status = read_status::end;  // end, incomplete_tail or corrupt
  read_problem problem;
};
read_all_result read_all(const std::filesystem::path& dir, const record_filter& filter = {});

}  // namespace cuda_agent::message_log
