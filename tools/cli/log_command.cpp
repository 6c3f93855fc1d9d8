// `cuda-agent log show|stats|export`: read a message log (actors/message_log/FORMAT.md).
//
// All three read through message_log::reader, so they verify every record they pass. A log that
// ends inside a record (a writer mid-append, or a torn tail) is reported as a warning; a corrupt
// log gets its good records printed, then one error line, and exit status 1.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/message_log/reader.hpp"
#include "messages/codec.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;
namespace ml = message_log;

constexpr int64_t kNanosPerSecond = 1'000'000'000;

// --- Time --------------------------------------------------------------------------------------

// "2026-11-30T12:34:56.123456789Z": UTC with nanoseconds, so that no two records print alike.
std::string format_time(int64_t ns) {
  int64_t seconds = ns / kNanosPerSecond;
  int64_t fraction = ns % kNanosPerSecond;
  if (fraction < 0) {
    fraction += kNanosPerSecond;
    --seconds;
  }
  const auto t = static_cast<time_t>(seconds);
  struct tm utc;
  if (gmtime_r(&t, &utc) == nullptr) return fmt::format("{}ns", ns);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:09}Z", utc.tm_year + 1900,
                     utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, fraction);
}

// Parses nanoseconds since the epoch ("1764505200000000000") or ISO 8601:
// YYYY-MM-DD[(T| )hh:mm[:ss[.fraction]]][Z|+hh:mm|-hh:mm|+hhmm|-hhmm]; no zone means UTC.
std::optional<int64_t> parse_time(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) {
    int64_t ns = 0;
    for (char c : text) {
      if (ns > (INT64_MAX - (c - '0')) / 10) return std::nullopt;  // past the year 2262
      ns = ns * 10 + (c - '0');
    }
    return ns;
  }
  size_t at = 0;
  const auto number = [&](size_t width, int& out) {
    if (at + width > text.size()) return false;
    out = 0;
    for (size_t i = 0; i < width; ++i) {
      const char c = text[at + i];
      if (c < '0' || c > '9') return false;
      out = out * 10 + (c - '0');
    }
    at += width;
    return true;
  };
  const auto literal = [&](char c) {
    if (at < text.size() && text[at] == c) {
      ++at;
      return true;
    }
    return false;
  };

  int year, month, day, hour = 0, minute = 0, second = 0;
  if (!number(4, year) || !literal('-') || !number(2, month) || !literal('-') || !number(2, day))
    return std::nullopt;
  int64_t fraction_ns = 0;
  if (literal('T') || literal('t') || literal(' ')) {
    if (!number(2, hour) || !literal(':') || !number(2, minute)) return std::nullopt;
    if (literal(':')) {
      if (!number(2, second)) return std::nullopt;
      if (literal('.') || literal(',')) {
        int64_t scale = kNanosPerSecond;
        const size_t start = at;
        while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
          scale /= 10;
          fraction_ns += (text[at] - '0') * scale;  // digits past nanoseconds add 0
          ++at;
        }
        if (at == start) return std::nullopt;
      }
    }
  }
  int64_t offset_seconds = 0;
  if (literal('Z') || literal('z')) {
  } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    const int sign = text[at++] == '-' ? -1 : 1;
    int offset_hours, offset_minutes;
    if (!number(2, offset_hours)) return std::nullopt;
    literal(':');
    if (!number(2, offset_minutes) || offset_hours > 23 || offset_minutes > 59) return std::nullopt;
    offset_seconds = sign * (offset_hours * 3600 + offset_minutes * 60);
  }
  if (at != text.size()) return std::nullopt;

  struct tm fields {};
  fields.tm_year = year - 1900;
  fields.tm_mon = month - 1;
  fields.tm_mday = day;
  fields.tm_hour = hour;
  fields.tm_min = minute;
  fields.tm_sec = second;
  const time_t seconds = timegm(&fields);
  // timegm normalises 2026-02-31 into March; a date that does not survive the trip is invalid.
  if (fields.tm_year != year - 1900 || fields.tm_mon != month - 1 || fields.tm_mday != day ||
      fields.tm_hour != hour || fields.tm_min != minute || fields.tm_sec != second)
    return std::nullopt;
  return (static_cast<int64_t>(seconds) - offset_seconds) * kNanosPerSecond + fraction_ns;
}

// --- Options shared by the subcommands ---------------------------------------------------------

struct log_options {
  std::string dir;  // empty: the log.dir setting
  std::optional<std::string> episode;
  std::optional<std::string> type;
  std::optional<std::string> since;
  std::optional<std::string> until;
  uint64_t limit = 0;  // 0: no limit
  bool payload = false;
  std::string out;  // export: empty or "-" for standard output
  size_t top = 10;  // stats
};

void add_dir_option(CLI::App& command, log_options& options) {
  command.add_option("dir", options.dir, "Log directory (default: the log.dir setting)")
      ->type_name("DIR");
}

void add_filter_options(CLI::App& command, log_options& options) {
  command.add_option("--episode", options.episode, "Only records of this episode id");
  command.add_option("--type", options.type, "Only records of this message type");
  command
      .add_option("--since", options.since,
                  "Only records at or after this time: ISO 8601 (UTC unless a zone is given, "
                  "e.g. 2026-11-30T12:00:00Z) or nanoseconds since the epoch")
      ->type_name("TIME");
  command.add_option("--until", options.until, "Only records at or before this time (as --since)")
      ->type_name("TIME");
}

fs::path log_dir(const invocation& inv, const log_options& options) {
  const fs::path dir =
      options.dir.empty() ? fs::path(inv.config.get_string("log.dir")) : fs::path(options.dir);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw usage_error(
        fmt::format("message log directory {} does not exist (give DIR, or set log.dir with --set)",
                    dir.string()));
  if (ml::list_segments(dir).empty())
    throw usage_error(fmt::format("{} holds no message log segments (*{} files)", dir.string(),
                                  ml::kSegmentSuffix));
  return dir;
}

int64_t time_bound(const std::optional<std::string>& text, const char* option) {
  const std::optional<int64_t> ns = parse_time(*text);
  if (!ns)
    throw usage_error(
        fmt::format("{} {}: not a time; write ISO 8601 like 2026-11-30T12:00:00Z "
                    "or nanoseconds since the epoch",
                    option, *text));
  return *ns;
}

ml::record_filter make_filter(const log_options& options) {
  ml::record_filter filter;
  filter.episode = options.episode;
  filter.type = options.type;
  if (options.since) filter.from_ns = time_bound(options.since, "--since");
  if (options.until) filter.to_ns = time_bound(options.until, "--until");
  if (filter.from_ns && filter.to_ns && *filter.from_ns > *filter.to_ns)
    throw usage_error(
        fmt::format("--since {} is after --until {}", *options.since, *options.until));
  return filter;
}

// The payload as JSON, or why it could not be: a log must stay readable whatever a payload holds.
nlohmann::json payload_json(std::string_view payload, std::string& error) {
  try {
    return msgpack_to_json(payload);
  } catch (const std::exception& e) {
    error = e.what();
    return nullptr;
  }
}

std::string hex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) fmt::format_to(std::back_inserter(out), "{:02x}", c);
  return out;
}

std::string dump(const nlohmann::ordered_json& value) {
  // Strings in a log are bytes; invalid UTF-8 must not stop an export.
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// How a read ended, for the commands that print records: 0, or 1 after an error line.
int finish(const fs::path& dir, ml::read_status status, const ml::reader& log) {
  switch (status) {
    case ml::read_status::incomplete_tail:
      spdlog::warn(
          "message log {} ends inside a record ({}); records up to it were read. Not an error "
          "while a writer is appending; otherwise the next writer to open the log cuts it off",
          dir.string(), log.problem().message());
      return 0;
    case ml::read_status::corrupt:
      std::cout.flush();
      std::cerr << "cuda-agent: error: message log " << dir.string()
                << " is corrupt: " << log.problem().message()
                << " (records before it were read; nothing after it is trusted)\n";
      return 1;
    default: return 0;
  }
}

// --- Subcommands -------------------------------------------------------------------------------

int run_show(const invocation& inv, const log_options& options) {
  const fs::path dir = log_dir(inv, options);
  ml::reader log = ml::reader::open(dir, make_filter(options));
  ml::record_view rec;
  ml::read_status status = ml::read_status::end;
  uint64_t shown = 0;
  while ((options.limit == 0 || shown < options.limit) &&
         (status = log.next(rec)) == ml::read_status::record) {
    std::string line = fmt::format("{:>8}  {}  {} -> {}  {}  {}  {} B", rec.seq,
                                   format_time(rec.ts_ns), rec.sender, rec.receiver, rec.type,
                                   rec.episode.empty() ? "-" : rec.episode, rec.payload.size());
    if (options.payload) {
      std::string error;
      const nlohmann::json json = payload_json(rec.payload, error);
      line += "  ";
      line +=
          error.empty() ? dump(json) : fmt::format("<not msgpack: {}> {}", error, hex(rec.payload));
    }
    line += '\n';
    std::cout << line;
    ++shown;
  }
  if (options.limit != 0 && shown == options.limit) return 0;  // stopped by --limit, not the log
  return finish(dir, status, log);
}

int run_export(const invocation& inv, const log_options& options) {
  const fs::path dir = log_dir(inv, options);
  ml::reader log = ml::reader::open(dir, make_filter(options));
  std::ofstream file;
  if (!options.out.empty() && options.out != "-") {
    file.open(options.out, std::ios::binary | std::ios::trunc);
    if (!file) throw usage_error(fmt::format("cannot write {}", options.out));
  }
  std::ostream& out = file.is_open() ? static_cast<std::ostream&>(file) : std::cout;

  ml::record_view rec;
  ml::read_status status;
  uint64_t exported = 0;
  while ((status = log.next(rec)) == ml::read_status::record) {
    nlohmann::ordered_json line;
    line["seq"] = rec.seq;
    line["ts_ns"] = rec.ts_ns;
    line["time"] = format_time(rec.ts_ns);
    line["sender"] = rec.sender;
    line["receiver"] = rec.receiver;
    line["type"] = rec.type;
    line["episode"] = rec.episode;
    std::string error;
    line["payload"] = nlohmann::ordered_json(payload_json(rec.payload, error));
    if (!error.empty()) {
      line["payload_error"] = error;
      line["payload_hex"] = hex(rec.payload);
    }
    out << dump(line) << '\n';
    ++exported;
  }
  out.flush();
  if (!out) throw std::runtime_error(fmt::format("writing {} failed", options.out));
  if (file.is_open()) spdlog::info("exported {} records to {}", exported, options.out);
  return finish(dir, status, log);
}

// Counts, sorted by count (then name), at most `top` of them.
std::vector<std::pair<std::string, uint64_t>> top_counts(
    const std::map<std::string, uint64_t>& counts, size_t top) {
  std::vector<std::pair<std::string, uint64_t>> sorted(counts.begin(), counts.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (sorted.size() > top) sorted.resize(top);
  return sorted;
}

int run_stats(const invocation& inv, const log_options& options) {
  const fs::path dir = log_dir(inv, options);
  const std::vector<ml::segment_info> segments = ml::list_segments(dir);
  uint64_t segment_bytes = 0;
  for (const auto& segment : segments) {
    std::error_code ec;
    const auto size = fs::file_size(segment.path, ec);
    if (!ec) segment_bytes += size;
  }

  ml::reader log = ml::reader::open(dir, make_filter(options));
  std::map<std::string, uint64_t> per_type;
  std::map<std::string, uint64_t> per_episode;
  uint64_t count = 0;
  uint64_t payload_bytes = 0;
  ml::record_view first;  // only seq and ts_ns are kept: the strings would dangle
  ml::record_view last;
  ml::record_view rec;
  ml::read_status status;
  while ((status = log.next(rec)) == ml::read_status::record) {
    if (count == 0) {
      first.seq = rec.seq;
      first.ts_ns = rec.ts_ns;
    }
    last.seq = rec.seq;
    last.ts_ns = rec.ts_ns;
    ++per_type[std::string(rec.type)];
    ++per_episode[rec.episode.empty() ? std::string("(none)") : std::string(rec.episode)];
    ++count;
    payload_bytes += rec.payload.size();
  }

  std::cout << fmt::format("log         {}\n", dir.string());
  std::cout << fmt::format("segments    {}  ({} .. {}, {} bytes)\n", segments.size(),
                           segments.front().path.filename().string(),
                           segments.back().path.filename().string(), segment_bytes);
  std::cout << fmt::format("records     {}  ({} bytes framed, {} bytes of payload)\n", count,
                           log.stats().bytes_scanned, payload_bytes);
  if (count > 0) {
    std::cout << fmt::format("first       seq {}  {}\n", first.seq, format_time(first.ts_ns));
    std::cout << fmt::format("last        seq {}  {}\n", last.seq, format_time(last.ts_ns));
  }
  switch (status) {
    case ml::read_status::incomplete_tail:
      std::cout << fmt::format("tail        incomplete record: {}\n", log.problem().message());
      break;
    case ml::read_status::corrupt:
      std::cout << fmt::format("tail        CORRUPT: {}\n", log.problem().message());
      break;
    default: std::cout << "tail        clean\n";
  }
  const auto print_counts = [&](const char* title, const std::map<std::string, uint64_t>& counts) {
    std::cout << fmt::format(
        "{:<12}{}{}\n", title, counts.size(),
        counts.size() > options.top ? fmt::format("  (top {})", options.top) : std::string());
    for (const auto& [name, n] : top_counts(counts, options.top))
      std::cout << fmt::format("  {:>10}  {}\n", n, name);
  };
  print_counts("types", per_type);
  print_counts("episodes", per_episode);
  return status == ml::read_status::corrupt ? finish(dir, status, log) : 0;
}

}  // namespace

void add_log_command(CLI::App& app, invocation& inv) {
  auto* log = app.add_subcommand("log", "Inspect a message log: show, stats, export");
  log->require_subcommand(1);

  auto show_options = std::make_shared<log_options>();
  auto* show = log->add_subcommand("show",
                                   "Print one line per record (seq, time, sender -> "
                                   "receiver, type, episode, payload size)");
  add_dir_option(*show, *show_options);
  add_filter_options(*show, *show_options);
  show->add_option("--limit", show_options->limit, "Print at most N records")->type_name("N");
  show->add_flag("--payload", show_options->payload, "Also print each payload as JSON");
  show->callback([&inv, show_options] {
    inv.action = [&inv, show_options] { return run_show(inv, *show_options); };
  });

  auto stats_options = std::make_shared<log_options>();
  auto* stats = log->add_subcommand("stats",
                                    "Summarise a log: records, segments, time span, "
                                    "counts per type and episode, tail state");
  add_dir_option(*stats, *stats_options);
  add_filter_options(*stats, *stats_options);
  stats->add_option("--top", stats_options->top, "List at most N types and episodes")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  stats->callback([&inv, stats_options] {
    inv.action = [&inv, stats_options] { return run_stats(inv, *stats_options); };
  });

  auto export_options = std::make_shared<log_options>();
  auto* exporter =
      log->add_subcommand("export",
                          "Write records as JSON lines: {seq, ts_ns, time, sender, receiver, type, "
                          "episode, payload}");
  add_dir_option(*exporter, *export_options);
  add_filter_options(*exporter, *export_options);
  exporter->add_option("--out", export_options->out, "Output file (default: standard output)")
      ->type_name("FILE.jsonl");
  exporter->callback([&inv, export_options] {
    inv.action = [&inv, export_options] { return run_export(inv, *export_options); };
  });
}

}  // namespace cuda_agent::cli
