#include "actors/message_log/writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "actors/message_log/file_io.hpp"

namespace cuda_agent::message_log {
namespace fs = std::filesystem;

std::optional<fsync_policy> parse_fsync_policy(std::string_view name) {
  if (name == "never") return fsync_policy::never;
  if (name == "interval") return fsync_policy::interval;
  if (name == "always") return fsync_policy::always;
  return std::nullopt;
}

std::string_view to_string(fsync_policy policy) {
  switch (policy) {
    case fsync_policy::never: return "never";
    case fsync_policy::interval: return "interval";
    case fsync_policy::always: return "always";
  }
  return "?";
}

namespace {

constexpr std::string_view kLockFileName = "LOCK";
constexpr std::string_view kTempSuffix = ".tmp";
constexpr size_t kCopyChunkBytes = size_t{1} << 20;

unique_fd lock_directory(const fs::path& dir) {
  const fs::path lock_path = dir / kLockFileName;
  unique_fd fd = open_file(lock_path, O_RDWR | O_CREAT);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      throw log_error(fmt::format(
          "message log {} is already open for writing (another writer holds {}); a log has one "
          "writer: stop the other cuda-agent or use a different log.dir",
          dir.string(), lock_path.string()));
    throw log_error(fmt::format("cannot lock {}: {}", lock_path.string(), std::strerror(errno)));
  }
  return fd;
}

// A temporary segment is a header that was never renamed into place: it holds no records.
void remove_stale_temporaries(const fs::path& dir) {
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() > kTempSuffix.size() &&
        name.compare(name.size() - kTempSuffix.size(), kTempSuffix.size(), kTempSuffix) == 0 &&
        parse_segment_file_name(name.substr(0, name.size() - kTempSuffix.size()))) {
      spdlog::info("message log {}: removing unfinished segment {}", dir.string(), name);
      fs::remove(it->path(), ec);
    }
  }
}

// Creates `<segment>.torn-<offset>` (or `.torn-<offset>.<n>` if that exists) without replacing
// anything, so that repeated recoveries never overwrite earlier evidence.
std::pair<unique_fd, fs::path> create_side_file(const fs::path& segment, uint64_t offset) {
  const std::string base = fmt::format("{}.torn-{}", segment.string(), offset);
  for (int attempt = 0;; ++attempt) {
    fs::path candidate =
        attempt == 0 ? fs::path(base) : fs::path(fmt::format("{}.{}", base, attempt));
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) return {unique_fd(fd), std::move(candidate)};
    if (errno != EEXIST || attempt > 1000)
      throw log_error(
          fmt::format("cannot create side file {}: {}", candidate.string(), std::strerror(errno)));
  }
}

}  // namespace

struct writer::impl {
  writer_options options;
  unique_fd lock_fd;     // holds the flock; open while the writer is open
  unique_fd segment_fd;  // O_APPEND on the current (last) segment
  fs::path segment_path;
  uint64_t segment_size = 0;  // bytes in the current segment, header included
  uint64_t segment_records = 0;
  uint64_t next_seq = 1;
  bool unsynced = false;  // appended since the last fdatasync
  std::chrono::steady_clock::time_point last_sync;
  std::string frame;  // reused encode buffer
  recovery_report recovery;
  writer_stats stats;

  ~impl() {
    try {
      close();
    } catch (const std::exception& e) {
      spdlog::error("message log {}: closing failed: {}", options.dir.string(), e.what());
    }
  }

  void open() {
    if (options.dir.empty()) throw log_error("message log: no directory given (log.dir)");
    std::error_code ec;
    fs::create_directories(options.dir, ec);
    if (ec)
      throw log_error(fmt::format("cannot create message log directory {}: {}",
                                  options.dir.string(), ec.message()));
    lock_fd = lock_directory(options.dir);
    remove_stale_temporaries(options.dir);
    last_sync = std::chrono::steady_clock::now();

    const std::vector<segment_info> segments = list_segments(options.dir);
    if (segments.empty()) {
      start_segment(1);
      recovery.created = true;
    } else {
      recover(segments.back());
    }
    recovery.segment = segment_path;
    recovery.valid_bytes = segment_size;
    recovery.records_kept = segment_records;
    recovery.next_seq = next_seq;
  }

  // Finds the valid prefix of the last segment: whole frames with good checksums and the
  // expected sequence numbers. Whatever follows is what a crash (or a disk) left behind.
  void recover(const segment_info& last) {
    segment_path = last.path;
    segment_fd = open_file(last.path, O_RDWR | O_APPEND);
    const uint64_t size = file_size(segment_fd.get(), last.path);
    segment_file scan(open_file(last.path, O_RDONLY), last.path);

    uint64_t valid_end = 0;
    uint64_t expected_seq = last.first_seq;
    std::string reason;
    if (size < kSegmentHeaderBytes) {
      reason = fmt::format("segment header is torn ({} of {} bytes)", size, kSegmentHeaderBytes);
    } else {
      scan.ensure(0, kSegmentHeaderBytes);
      const segment_header_parse header = decode_segment_header(scan.data(0));
      if (!header.error.empty())
        throw log_error(fmt::format(
            "message log segment {}: {}. No crash produces this; move the file out of {} if it "
            "does not belong to this log, or restore it",
            last.path.string(), header.error, options.dir.string()));
      if (header.first_seq != last.first_seq)
        throw log_error(fmt::format(
            "message log segment {}: its header says it starts at sequence {}, its name says {}; "
            "the file was renamed or copied: restore its original name",
            last.path.string(), header.first_seq, last.first_seq));
      valid_end = kSegmentHeaderBytes;
      record_view rec;
      while (valid_end < size) {
        const frame_parse frame = scan.read_frame(valid_end, rec);
        if (frame.status == frame_status::incomplete) {
          reason =
              frame.available < kFrameHeaderBytes
                  ? fmt::format("torn length prefix ({} of {} bytes)", frame.available,
                                kFrameHeaderBytes)
                  : fmt::format("torn record ({} of {} bytes)", frame.available, frame.frame_bytes);
          break;
        }
        if (frame.status != frame_status::ok) {
          reason = frame.detail;
          break;
        }
        if (rec.seq != expected_seq) {
          reason = fmt::format("sequence number {} where {} was expected", rec.seq, expected_seq);
          break;
        }
        valid_end += frame.frame_bytes;
        ++expected_seq;
        ++segment_records;
      }
    }
    next_seq = expected_seq;
    segment_size = valid_end;
    if (valid_end < size) cut_tail(scan, valid_end, size, reason);
    if (valid_end < kSegmentHeaderBytes) {
      write_all(segment_fd.get(), encode_segment_header(last.first_seq), segment_path);
      sync_data(segment_fd.get(), segment_path);
      segment_size = kSegmentHeaderBytes;
    }
  }

  // Moves bytes [from, size) of the last segment into a side file, then truncates the segment.
  void cut_tail(segment_file& scan, uint64_t from, uint64_t size, const std::string& reason) {
    auto [side_fd, side_path] = create_side_file(segment_path, from);
    for (uint64_t offset = from; offset < size;) {
      const size_t want = static_cast<size_t>(std::min<uint64_t>(kCopyChunkBytes, size - offset));
      const size_t got = scan.ensure(offset, want);
      if (got == 0)
        throw log_error(
            fmt::format("{} shrank while it was being recovered; is another program "
                        "writing to it?",
                        segment_path.string()));
      write_all(side_fd.get(), std::string_view(scan.data(offset), got), side_path);
      offset += got;
    }
    // The evidence is durable before the segment loses it.
    sync_data(side_fd.get(), side_path);
    sync_directory(options.dir);
    if (::ftruncate(segment_fd.get(), static_cast<off_t>(from)) != 0)
      throw log_error(fmt::format("cannot truncate {} to {} bytes: {}", segment_path.string(), from,
                                  std::strerror(errno)));
    sync_data(segment_fd.get(), segment_path);

    recovery.cut_bytes = size - from;
    recovery.side_file = side_path;
    recovery.reason = reason;
    spdlog::warn(
        "message log {}: {} at offset {} of {}; cut {} bytes there (saved in {}); appends "
        "continue at sequence {}",
        options.dir.string(), reason, from, segment_path.filename().string(), size - from,
        side_path.string(), next_seq);
  }

  // A new segment appears under its final name only once its header is complete, so a reader
  // following the log never sees a half-written header.
  void start_segment(uint64_t first_seq) {
    const fs::path path = options.dir / segment_file_name(first_seq);
    const fs::path temporary = fs::path(path).concat(kTempSuffix);
    std::error_code ec;
    if (fs::exists(path, ec))
      throw log_error(
          fmt::format("cannot start segment {}: it already exists; the log directory "
                      "was changed behind the writer's back",
                      path.string()));
    fs::remove(temporary, ec);
    unique_fd fd = open_file(temporary, O_WRONLY | O_CREAT | O_EXCL | O_APPEND);
    write_all(fd.get(), encode_segment_header(first_seq), temporary);
    const bool durable = options.fsync != fsync_policy::never;
    if (durable) sync_data(fd.get(), temporary);
    if (::rename(temporary.c_str(), path.c_str()) != 0)
      throw log_error(fmt::format("cannot rename {} to {}: {}", temporary.string(), path.string(),
                                  std::strerror(errno)));
    if (durable) sync_directory(options.dir);

    segment_fd = std::move(fd);
    segment_path = path;
    segment_size = kSegmentHeaderBytes;
    segment_records = 0;
    ++stats.segments_created;
  }

  void rotate() {
    if (unsynced && options.fsync != fsync_policy::never) sync_segment();
    start_segment(next_seq);
  }

  void sync_segment() { sync(segment_fd); }

  void sync(const unique_fd& fd) {
    sync_data(fd.get(), segment_path);
    ++stats.syncs;
    unsynced = false;
    last_sync = std::chrono::steady_clock::now();
  }

  uint64_t append(const record_view& fields) {
    if (!segment_fd) throw log_error(fmt::format("message log {} is closed", options.dir.string()));
    record_view rec = fields;
    rec.seq = next_seq;
    rec.ts_ns = options.clock ? options.clock()
                              : std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    std::chrono::system_clock::now().time_since_epoch())
                                    .count();
    frame.clear();
    encode_frame(rec, frame);
    // A record larger than a segment gets a segment of its own rather than being refused.
    if (segment_records > 0 && segment_size + frame.size() > options.segment_bytes) rotate();

    try {
      write_all(segment_fd.get(), frame, segment_path);
    } catch (const log_error&) {
      // Leave no partial frame behind: the log must stay readable after a failed append.
      if (::ftruncate(segment_fd.get(), static_cast<off_t>(segment_size)) != 0)
        spdlog::error("message log {}: cannot remove a partial record after a failed write: {}",
                      segment_path.string(), std::strerror(errno));
      throw;
    }
    segment_size += frame.size();
    ++segment_records;
    ++next_seq;
    ++stats.records;
    stats.bytes += frame.size();
    unsynced = true;

    if (options.fsync == fsync_policy::always ||
        (options.fsync == fsync_policy::interval &&
         std::chrono::steady_clock::now() - last_sync >= options.fsync_interval))
      sync_segment();
    return rec.seq;
  }

  void close() {
    if (!lock_fd) return;
    // Closed even if the final sync throws: no append may follow a released lock.
    const unique_fd lock = std::move(lock_fd);
    const unique_fd segment = std::move(segment_fd);
    if (segment && unsynced && options.fsync != fsync_policy::never) sync(segment);
  }
};

writer::writer(std::unique_ptr<impl> state) : impl_(std::move(state)) {}
writer::writer(writer&&) noexcept = default;
writer& writer::operator=(writer&&) noexcept = default;
writer::~writer() = default;

writer writer::open(writer_options options) {
  auto state = std::make_unique<impl>();
  state->options = std::move(options);
  state->open();
  return writer(std::move(state));
}

writer::impl& writer::state() const {
  if (!impl_) throw log_error("message log writer used after it was moved from");
  return *impl_;
}

uint64_t writer::append(std::string_view sender, std::string_view receiver, std::string_view type,
                        std::string_view episode, std::string_view payload) {
  record_view rec;
  rec.sender = sender;
  rec.receiver = receiver;
  rec.type = type;
  rec.episode = episode;
  rec.payload = payload;
  return state().append(rec);
}

void writer::flush() {
  impl& s = state();
  if (!s.segment_fd)
    throw log_error(fmt::format("message log {} is closed", s.options.dir.string()));
  s.sync_segment();
}

void writer::close() {
  if (impl_) impl_->close();
}

uint64_t writer::next_seq() const { return state().next_seq; }
const recovery_report& writer::recovery() const { return state().recovery; }
const writer_stats& writer::stats() const { return state().stats; }
const fs::path& writer::dir() const { return state().options.dir; }
const fs::path& writer::current_segment() const { return state().segment_path; }

}  // namespace cuda_agent::message_log
