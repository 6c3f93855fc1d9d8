// `cuda-agent log show|stats|export` and `cuda-agent bench log`, run as the built binary on logs
// these tests write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <msgpack.hpp>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "actors/message_log/writer.hpp"
#include "tests/actors/message_log/test_support.hpp"

extern char** environ;

namespace cuda_agent::message_log {
namespace {

namespace fs = std::filesystem;
using testing::scratch_dir;

struct run_result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// Runs cuda-agent with `args`, capturing standard output and error in files (no pipe deadlock).
run_result run_cli(const std::vector<std::string>& args, const fs::path& scratch) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  std::vector<std::string> argv_strings{binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);

  const fs::path out_path = scratch / "stdout.txt";
  const fs::path err_path = scratch / "stderr.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                   0644);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, binary, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  run_result result;
  if (rc != 0) {
    result.err = "posix_spawn failed: " + std::to_string(rc);
    return result;
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  result.out = testing::read_bytes(out_path);
  result.err = testing::read_bytes(err_path);
  return result;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string msgpack_of(int n, const std::string& text) {
  msgpack::sbuffer buffer;
  msgpack::packer<msgpack::sbuffer> packer(buffer);
  packer.pack_map(2);
  packer.pack(std::string("n"));
  packer.pack(n);
  packer.pack(std::string("text"));
  packer.pack(text);
  return std::string(buffer.data(), buffer.size());
}

constexpr int64_t kBaseNs = 1'764'504'000'000'000'000;  // 2025-11-30T12:00:00Z

class LogCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::getenv("CUDA_AGENT_BINARY") == nullptr)
      GTEST_SKIP() << "CUDA_AGENT_BINARY is not set (run through ctest)";
    if (!fs::exists(std::getenv("CUDA_AGENT_BINARY")))
      GTEST_SKIP() << "cuda-agent is not built: " << std::getenv("CUDA_AGENT_BINARY");
  }

  // Twelve records, one a minute from kBaseNs, over three episodes and two types, rotated over
  // several segments; payloads are msgpack maps {"n": i, "text": ...}.
  void write_log(const fs::path& dir) {
    writer_options options = testing::options_for(dir);
    options.segment_bytes = 256;
    auto now = std::make_shared<int64_t>(kBaseNs);
    options.clock = [now] { return *now; };
    writer log = writer::open(options);
    for (int i = 0; i < 12; ++i) {
      *now = kBaseNs + int64_t{i} * 60'000'000'000;
      log.append("rollout", "episode", i % 2 ? "completion" : "task_assigned",
                 i % 4 == 3 ? "" : "ep-" + std::to_string(i % 3),
                 msgpack_of(i, "record \"" + std::to_string(i) + "\""));
    }
  }

  scratch_dir scratch_;
};

TEST_F(LogCli, ExportWritesOneJsonObjectPerRecord) {
  write_log(scratch_.log());
  const fs::path out = scratch_.path() / "all.jsonl";
  const run_result run =
      run_cli({"log", "export", scratch_.log().string(), "--out", out.string()}, scratch_.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(testing::read_bytes(out));
  ASSERT_EQ(lines.size(), 12u);
  for (size_t i = 0; i < lines.size(); ++i) {
    const auto json = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(json["seq"], i + 1);
    EXPECT_EQ(json["ts_ns"], kBaseNs + int64_t(i) * 60'000'000'000);
    EXPECT_EQ(json["sender"], "rollout");
    EXPECT_EQ(json["receiver"], "episode");
    EXPECT_EQ(json["type"], i % 2 ? "completion" : "task_assigned");
    EXPECT_EQ(json["episode"], i % 4 == 3 ? "" : "ep-" + std::to_string(i % 3));
    EXPECT_EQ(json["payload"],
              (nlohmann::json{{"n", i}, {"text", "record \"" + std::to_string(i) + "\""}}));
  }
  EXPECT_EQ(nlohmann::json::parse(lines[1])["time"], "2025-11-30T12:01:00.000000000Z");
  // Keys come in the documented order.
  EXPECT_EQ(lines[0].rfind("{\"seq\":1,\"ts_ns\":", 0), 0u) << lines[0];
}

TEST_F(LogCli, ExportFiltersAndWritesToStandardOutput) {
  write_log(scratch_.log());
  const auto exported_seqs = [&](std::vector<std::string> filters) {
    std::vector<std::string> args{"log", "export", scratch_.log().string()};
    args.insert(args.end(), filters.begin(), filters.end());
    const run_result run = run_cli(args, scratch_.path());
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::vector<uint64_t> seqs;
    for (const auto& line : lines_of(run.out)) seqs.push_back(nlohmann::json::parse(line)["seq"]);
    return seqs;
  };
  // Record i (seq i+1) is episode ep-(i%3) unless i%4 == 3, completion when i is odd.
  EXPECT_EQ(exported_seqs({"--episode", "ep-2"}), (std::vector<uint64_t>{3, 6, 9}));
  EXPECT_EQ(exported_seqs({"--episode", "ep-2", "--type", "task_assigned"}),
            (std::vector<uint64_t>{3, 9}));
  EXPECT_EQ(exported_seqs({"--since", "2025-11-30T12:03:00Z", "--until", "2025-11-30T12:05:30Z"}),
            (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_EQ(exported_seqs({"--since", "2025-11-30T13:03:00+01:00", "--until",
                           std::to_string(kBaseNs + 5 * 60'000'000'000)}),
            (std::vector<uint64_t>{4, 5, 6}));
  EXPECT_EQ(exported_seqs({"--since", "2025-11-30 12:10:00.5"}), (std::vector<uint64_t>{12}));
}

TEST_F(LogCli, ShowPrintsOneLinePerRecord) {
  write_log(scratch_.log());
  const run_result run = run_cli(
      {"log", "show", scratch_.log().string(), "--limit", "3", "--payload"}, scratch_.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto lines = lines_of(run.out);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find("2025-11-30T12:00:00.000000000Z"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("rollout -> episode"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("task_assigned"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("ep-0"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find(R"({"n":1,"text":"record \"1\""})"), std::string::npos) << lines[1];
}

TEST_F(LogCli, DirectoryDefaultsToTheLogDirSetting) {
  write_log(scratch_.log());
  const run_result run =
      run_cli({"--set", "log.dir=" + scratch_.log().string(), "log", "show"}, scratch_.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(lines_of(run.out).size(), 12u);
}

TEST_F(LogCli, StatsSummarisesTheLog) {
  write_log(scratch_.log());
  const run_result run = run_cli({"log", "stats", scratch_.log().string()}, scratch_.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string& out = run.out;
  EXPECT_NE(out.find("records     12 "), std::string::npos) << out;
  EXPECT_NE(out.find("segments    " + std::to_string(list_segments(scratch_.log()).size())),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("first       seq 1  2025-11-30T12:00:00.000000000Z"), std::string::npos)
      << out;
  EXPECT_NE(out.find("last        seq 12  2025-11-30T12:11:00.000000000Z"), std::string::npos)
      << out;
  EXPECT_NE(out.find("tail        clean"), std::string::npos) << out;
  EXPECT_NE(out.find("           6  completion"), std::string::npos) << out;
  EXPECT_NE(out.find("           3  (none)"), std::string::npos) << out;  // i = 3, 7, 11
}

TEST_F(LogCli, StatsReportsATornTail) {
  write_log(scratch_.log());
  const fs::path last = list_segments(scratch_.log()).back().path;
  testing::append_bytes(last, std::string("\x40\x00\x00\x00\x01\x02", 6));
  const run_result run = run_cli({"log", "stats", scratch_.log().string()}, scratch_.path());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("records     12 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("tail        incomplete record: " + last.string()), std::string::npos)
      << run.out;
}

TEST_F(LogCli, CorruptLogPrintsGoodRecordsThenOneErrorLine) {
  write_log(scratch_.log());
  const auto segments = list_segments(scratch_.log());
  ASSERT_GE(segments.size(), 3u);
  const uint64_t damaged_offset = testing::frame_offsets(segments[1].path)[0];
  testing::flip_byte(segments[1].path, damaged_offset + kFrameHeaderBytes + 40);

  for (const char* command : {"show", "export"}) {
    SCOPED_TRACE(command);
    const run_result run = run_cli({"log", command, scratch_.log().string()}, scratch_.path());
    EXPECT_EQ(run.exit_code, 1);
    EXPECT_EQ(lines_of(run.out).size(), segments[1].first_seq - 1);
    const auto errors = lines_of(run.err);
    ASSERT_EQ(errors.size(), 1u) << run.err;
    EXPECT_EQ(errors[0].rfind("cuda-agent: error: ", 0), 0u) << errors[0];
    EXPECT_NE(
        errors[0].find(segments[1].path.string() + " at offset " + std::to_string(damaged_offset)),
        std::string::npos)
        << errors[0];
  }
  const run_result stats = run_cli({"log", "stats", scratch_.log().string()}, scratch_.path());
  EXPECT_EQ(stats.exit_code, 1);
  EXPECT_NE(stats.out.find("tail        CORRUPT: " + segments[1].path.string()), std::string::npos)
      << stats.out;
}

TEST_F(LogCli, UsageErrorsExitWithStatusTwo) {
  write_log(scratch_.log());
  const std::vector<std::vector<std::string>> bad = {
      {"log", "show", (scratch_.path() / "absent").string()},
      {"log", "stats", scratch_.path().string()},  // a directory, but no segments in it
      {"log", "export", scratch_.log().string(), "--since", "yesterday"},
      {"log", "export", scratch_.log().string(), "--since", "2025-02-30"},
      {"log", "show", scratch_.log().string(), "--since", "2025-12-01", "--until", "2025-11-01"},
  };
  for (const auto& args : bad) {
    const run_result run = run_cli(args, scratch_.path());
    EXPECT_EQ(run.exit_code, 2) << args.back() << ": " << run.err;
    const auto errors = lines_of(run.err);
    ASSERT_EQ(errors.size(), 1u) << run.err;
    EXPECT_EQ(errors[0].rfind("cuda-agent: error: ", 0), 0u) << errors[0];
  }
}

TEST_F(LogCli, BenchLogPrintsATableAndCleansUp) {
  const fs::path parent = scratch_.path() / "bench";
  fs::create_directories(parent);
  const run_result run =
      run_cli({"bench", "log", "--records", "500", "--payload-bytes", "64", "--payload-bytes",
               "4096", "--fsync", "never", "--dir", parent.string()},
              scratch_.path());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("fsync=never"), std::string::npos) << run.out;
  int rows = 0;
  for (const auto& line : lines_of(run.out))
    if (line.find("     500 |") != std::string::npos) ++rows;
  EXPECT_EQ(rows, 2) << run.out;
  EXPECT_TRUE(fs::is_empty(parent));  // the scratch log is gone
}

}  // namespace
}  // namespace cuda_agent::message_log
