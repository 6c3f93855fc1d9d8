#include "actors/message_log/reader.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <optional>
#include <system_error>

#include "actors/message_log/file_io.hpp"

namespace cuda_agent::message_log {
namespace fs = std::filesystem;

std::string_view to_string(read_status status) {
  switch (status) {
    case read_status::record: return "record";
    case read_status::end: return "end";
    case read_status::incomplete_tail: return "incomplete_tail";
    case read_status::corrupt: return "corrupt";
  }
  return "?";
}

bool record_filter::matches(const record_view& rec) const {
  if (episode && rec.episode != *episode) return false;
  if (type && rec.type != *type) return false;
  if (from_ns && rec.ts_ns < *from_ns) return false;
  if (to_ns && rec.ts_ns > *to_ns) return false;
  return true;
}

std::string read_problem::message() const {
  return fmt::format("{} at offset {}: {}", segment.string(), offset, reason);
}

struct reader::impl {
  fs::path dir;
  record_filter filter;
  std::vector<segment_info> segments;  // segments[index] is the one being read
  size_t index = 0;
  segment_file file;
  uint64_t offset = 0;  // of the next frame in `file`
  bool header_checked = false;
  uint64_t segment_records = 0;
  uint64_t expected_seq = 0;
  bool corrupt = false;
  read_problem problem;
  reader_stats stats;

  read_status fail(uint64_t at, std::string reason) {
    corrupt = true;
    problem = {file.path(), at, std::move(reason)};
    return read_status::corrupt;
  }

  // Stopping at the end of the data: keep no bytes past `at`, so that the next call sees the
  // file as it is then, even if a writer's recovery replaced a torn tail.
  read_status end_of_data(uint64_t at) {
    file.forget_from(at);
    return read_status::end;
  }

  read_status incomplete(uint64_t at, std::string reason) {
    file.forget_from(at);
    problem = {file.path(), at, std::move(reason)};
    return read_status::incomplete_tail;
  }

  void open_segment(size_t i) {
    index = i;
    file = segment_file(open_file(segments[i].path, O_RDONLY), segments[i].path);
    offset = 0;
    header_checked = false;
    segment_records = 0;
    ++stats.segments_opened;
  }

  // Looks for segments newer than the current one, listing the directory again if needed.
  bool later_segment_exists() {
    if (index + 1 < segments.size()) return true;
    const uint64_t current = segments[index].first_seq;
    std::vector<segment_info> fresh{segments[index]};
    for (auto& segment : list_segments(dir))
      if (segment.first_seq > current) fresh.push_back(std::move(segment));
    segments = std::move(fresh);
    index = 0;
    return segments.size() > 1;
  }

  // Verifies the current segment's header; returns a status only when reading must stop.
  std::optional<read_status> check_header() {
    const size_t available = file.ensure(0, kSegmentHeaderBytes);
    if (available < kSegmentHeaderBytes) {
      // Segments are renamed into place with their header written, so only a crash leaves a
      // short one; if it is the last, a reopening writer repairs it.
      const std::string reason = fmt::format("segment header is incomplete ({} of {} bytes)",
                                             available, kSegmentHeaderBytes);
      if (!later_segment_exists()) return incomplete(0, reason);
      if (file.ensure(0, kSegmentHeaderBytes) < kSegmentHeaderBytes)
        return fail(0, reason + " and a later segment exists");
    }
    const segment_header_parse header = decode_segment_header(file.data(0));
    if (!header.error.empty()) return fail(0, header.error);
    const uint64_t named_seq = segments[index].first_seq;
    if (header.first_seq != named_seq)
      return fail(0, fmt::format("header says the segment starts at sequence {}, its name says {}",
                                 header.first_seq, named_seq));
    if (header.first_seq != expected_seq)
      return fail(
          0, fmt::format("sequence gap: the segment starts at {} but the previous one ended "
                         "at {} (records {}..{} are missing)",
                         header.first_seq, expected_seq - 1, expected_seq, header.first_seq - 1));
    header_checked = true;
    offset = kSegmentHeaderBytes;
    return std::nullopt;
  }

  read_status next(record_view& out) {
    if (corrupt) return read_status::corrupt;
    for (;;) {
      if (!file) {
        segments = list_segments(dir);
        if (segments.empty()) return read_status::end;
        open_segment(0);
        expected_seq = segments[0].first_seq;  // older segments may have been deleted
      }
      if (!header_checked)
        if (const std::optional<read_status> stop = check_header()) return *stop;

      const frame_parse frame = file.read_frame(offset, out);
      switch (frame.status) {
        case frame_status::ok:
          if (out.seq != expected_seq)
            return fail(offset, fmt::format("sequence number {} where {} was expected", out.seq,
                                            expected_seq));
          offset += frame.frame_bytes;
          ++expected_seq;
          ++segment_records;
          ++stats.records_scanned;
          stats.bytes_scanned += frame.frame_bytes;
          if (filter.matches(out)) {
            ++stats.records_matched;
            return read_status::record;
          }
          continue;

        case frame_status::incomplete: {
          if (frame.available == 0) {  // at a record boundary
            if (!later_segment_exists()) return end_of_data(offset);
            // The writer may have appended here just before it rotated: look again.
            if (file.ensure(offset, 1) > 0) continue;
            if (segment_records == 0)
              return fail(offset, "segment holds no records but a later segment exists");
            open_segment(index + 1);
            continue;
          }
          const std::string reason = fmt::format("incomplete record ({} of {} bytes present)",
                                                 frame.available, frame.frame_bytes);
          if (!later_segment_exists())
            return incomplete(offset, reason + ": a writer is mid-append or the tail is torn");
          // The writer finishes a segment before it starts the next, so if the record is still
          // short now, it always will be.
          if (file.read_frame(offset, out).status == frame_status::incomplete)
            return fail(offset, reason + " and a later segment exists");
          continue;
        }

        case frame_status::bad_length:
        case frame_status::bad_checksum:
        case frame_status::bad_body: return fail(offset, frame.detail);
      }
    }
  }
};

reader::reader(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
reader::reader(reader&&) noexcept = default;
reader& reader::operator=(reader&&) noexcept = default;
reader::~reader() = default;

reader reader::open(fs::path dir, record_filter filter) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw log_error(fmt::format("message log directory {} does not exist{}", dir.string(),
                                fs::exists(dir, ec) ? " (it is not a directory)" : ""));
  auto state = std::make_unique<impl>();
  state->dir = std::move(dir);
  state->filter = std::move(filter);
  return reader(std::move(state));
}

read_status reader::next(record_view& out) { return impl_->next(out); }
const read_problem& reader::problem() const { return impl_->problem; }
uint64_t reader::next_seq() const { return impl_->expected_seq; }
const reader_stats& reader::stats() const { return impl_->stats; }

read_all_result read_all(const fs::path& dir, const record_filter& filter) {
  reader log = reader::open(dir, filter);
  read_all_result result;
  record_view rec;
  while ((result.status = log.next(rec)) == read_status::record)
    result.records.push_back(record::from(rec));
  if (result.status != read_status::end) result.problem = log.problem();
  return result;
}

}  // namespace cuda_agent::message_log
