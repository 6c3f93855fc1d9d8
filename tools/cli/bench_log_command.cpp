// `cuda-agent bench log`: message log throughput. For each payload size it appends N records to
// a fresh log, then reads them all back, then reads with an episode filter that passes one
// record in 16 (the cost of scanning and verifying, which filtering cannot skip).
//
// Reads come from the page cache (the log was just written), so they measure the format and the
// code, not the disk. Appends go through write(2) per record and the chosen fsync policy.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "actors/message_log/reader.hpp"
#include "actors/message_log/writer.hpp"
#include "messages/roles.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/scratch_dir.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;
namespace ml = message_log;
using clock_type = std::chrono::steady_clock;

constexpr int kEpisodes = 16;
// Without --records, each payload size writes about this much (bounded below and above), which
// keeps the whole run to seconds on a small machine.
constexpr uint64_t kDefaultBytesPerSize = uint64_t{48} << 20;
constexpr uint64_t kDefaultMinRecords = 2'000;
constexpr uint64_t kDefaultMaxRecords = 200'000;
constexpr uint64_t kDefaultRecordsAlwaysSync = 300;  // fsync=always pays a disk flush per record

struct bench_options {
  std::optional<uint64_t> records;
  std::vector<uint64_t> payload_bytes;
  std::string fsync;  // empty: the log.fsync setting
  std::string dir;    // parent of the scratch log; empty: the system temp directory
};


struct throughput {
  double seconds = 0;
  uint64_t records = 0;  // appended, or scanned (verified) by a read
  uint64_t bytes = 0;    // frame bytes
  uint64_t matched = 0;  // reads: records the filter passed
  double mb_per_s() const { return seconds > 0 ? bytes / seconds / 1e6 : 0; }
  double records_per_s() const { return seconds > 0 ? records / seconds : 0; }
};

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

throughput time_append(ml::writer_options options, uint64_t records, uint64_t payload_bytes) {
  std::string payload(payload_bytes, '\0');
  std::mt19937_64 rng(payload_bytes);
  for (char& c : payload) c = static_cast<char>(rng());
  std::vector<std::string> episodes;
  for (int i = 0; i < kEpisodes; ++i) episodes.push_back(fmt::format("episode-{:02}", i));
  const char* types[] = {"task_assigned", "completion", "tool_result", "reward"};

  ml::writer log = ml::writer::open(std::move(options));
  const auto start = clock_type::now();
  for (uint64_t i = 0; i < records; ++i)
    log.append(role::rollout, role::episode, types[i % 4], episodes[i % kEpisodes], payload);
  log.close();  // its final sync is part of the cost
  return {seconds_since(start), log.stats().records, log.stats().bytes, 0};
}

// Every record is checksummed whether or not the filter passes it, so every byte is touched.
throughput time_read(const fs::path& dir, const ml::record_filter& filter) {
  ml::reader log = ml::reader::open(dir, filter);
  ml::record_view rec;
  ml::read_status status;
  const auto start = clock_type::now();
  while ((status = log.next(rec)) == ml::read_status::record) {
  }
  const double seconds = seconds_since(start);
  if (status != ml::read_status::end)
    throw std::runtime_error(
        fmt::format("benchmark log did not read back cleanly: {}", log.problem().message()));
  return {seconds, log.stats().records_scanned, log.stats().bytes_scanned,
          log.stats().records_matched};
}

uint64_t default_records(ml::fsync_policy policy, uint64_t payload_bytes) {
  if (policy == ml::fsync_policy::always) return kDefaultRecordsAlwaysSync;
  const uint64_t approximate_record = payload_bytes + 64;
  return std::clamp(kDefaultBytesPerSize / approximate_record, kDefaultMinRecords,
                    kDefaultMaxRecords);
}

std::string size_label(uint64_t bytes) {
  if (bytes >= (1 << 20) && bytes % (1 << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= 1024 && bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} B", bytes);
}

int run_bench_log(const invocation& inv, const bench_options& options) {
  const std::string fsync_name =
      options.fsync.empty() ? inv.config.get_string("log.fsync") : options.fsync;
  const std::optional<ml::fsync_policy> policy = ml::parse_fsync_policy(fsync_name);
  if (!policy)
    throw usage_error(fmt::format("--fsync {}: choose never, interval or always", fsync_name));
  const std::vector<uint64_t> sizes = options.payload_bytes.empty()
                                          ? std::vector<uint64_t>{64, 1024, 16 * 1024}
                                          : options.payload_bytes;
  for (uint64_t size : sizes)
    if (size > ml::kMaxBodyBytes - 256)
      throw usage_error(fmt::format("--payload-bytes {}: a record holds at most about {} bytes",
                                    size, ml::kMaxBodyBytes));

  std::error_code ec;
  if (!options.dir.empty() && !fs::is_directory(options.dir, ec))
    throw usage_error(fmt::format("--dir {}: not a directory; give an existing directory for the scratch log", options.dir));
  const scratch_dir scratch("cuda-agent-bench-log", options.dir);
  ml::writer_options base;
  base.segment_bytes = static_cast<uint64_t>(inv.config.get_int("log.segment_bytes"));
  base.fsync = *policy;
  base.fsync_interval = std::chrono::milliseconds(inv.config.get_int("log.fsync_interval_ms"));

  std::cout << fmt::format(
      "message log: fsync={}{}, segments of {} bytes, in {}\n"
      "append = write(2) per record incl. fsync policy; reads from the page cache; the filtered "
      "read passes 1 record in {} but verifies all\n\n",
      fsync_name,
      *policy == ml::fsync_policy::interval ? fmt::format(" ({} ms)", base.fsync_interval.count())
                                            : std::string(),
      base.segment_bytes, scratch.path().string(), kEpisodes);
  std::cout << fmt::format("{:>9} {:>8} | {:>10} {:>11} | {:>10} {:>11} | {:>10} {:>11} {:>8}\n",
                           "payload", "records", "append", "", "read", "", "filtered", "",
                           "matched");
  std::cout << fmt::format("{:>9} {:>8} | {:>10} {:>11} | {:>10} {:>11} | {:>10} {:>11} {:>8}\n",
                           "", "", "MB/s", "records/s", "MB/s", "records/s", "MB/s", "records/s",
                           "");
  for (uint64_t payload_bytes : sizes) {
    const uint64_t records = options.records.value_or(default_records(*policy, payload_bytes));
    ml::writer_options writer_options = base;
    writer_options.dir = scratch.path() / fmt::format("payload-{}", payload_bytes);

    const throughput append = time_append(writer_options, records, payload_bytes);
    const throughput full = time_read(writer_options.dir, {});
    if (full.records != records)
      throw std::runtime_error(
          fmt::format("read back {} records of the {} appended", full.records, records));
    ml::record_filter one_episode;
    one_episode.episode = fmt::format("episode-{:02}", 3);
    const throughput filtered = time_read(writer_options.dir, one_episode);

    std::cout << fmt::format(
        "{:>9} {:>8} | {:>10.1f} {:>11.0f} | {:>10.1f} {:>11.0f} | {:>10.1f} {:>11.0f} {:>8}\n",
        size_label(payload_bytes), records, append.mb_per_s(), append.records_per_s(),
        full.mb_per_s(), full.records_per_s(), filtered.mb_per_s(), filtered.records_per_s(),
        filtered.matched);
    std::cout.flush();
    fs::remove_all(writer_options.dir);  // keep the disk footprint to one size at a time
  }
  return 0;
}

}  // namespace

void add_bench_log_command(CLI::App& bench, invocation& inv) {
  auto options = std::make_shared<bench_options>();
  auto* command = bench.add_subcommand(
      "log", "Message log throughput: append, full read and filtered read, per payload size");
  command
      ->add_option("--records", options->records,
                   "Records per payload size (default: about 48 MiB worth, 2000..200000; "
                   "300 with --fsync always)")
      ->type_name("N")
      ->check(CLI::PositiveNumber);
  command
      ->add_option("--payload-bytes", options->payload_bytes,
                   "Payload size to measure; repeat for several (default: 64, 1024, 16384)")
      ->type_name("B")
      ->take_all();
  command->add_option("--fsync", options->fsync, "never | interval | always (default: log.fsync)")
      ->check(CLI::IsMember({"never", "interval", "always"}));
  command
      ->add_option("--dir", options->dir,
                   "Where to create the scratch log (removed afterwards; default: the system "
                   "temp directory)")
      ->type_name("TMPDIR");
  command->callback(
      [&inv, options] { inv.action = [&inv, options] { return run_bench_log(inv, *options); }; });
}

}  // namespace cuda_agent::cli
