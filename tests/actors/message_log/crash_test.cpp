// A real crash: a child process appends as fast as it can and is killed with SIGKILL, several
// times over the same log. Every record that was ever visible must survive, intact and in
// sequence, and the log must reopen and carry on each time.
//
// The child is this test binary itself, started again with kCrashChildEnv set: a static
// initializer below turns it into the appending child before GoogleTest's main() runs.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <thread>

#include "actors/message_log/reader.hpp"
#include "actors/message_log/writer.hpp"
#include "tests/actors/message_log/test_support.hpp"

extern char** environ;

namespace cuda_agent::message_log {
namespace {

constexpr const char* kCrashChildEnv = "CUDA_AGENT_MESSAGE_LOG_CRASH_CHILD";

// Every third record is large (many pages), so that a kill often lands inside its write(2).
std::string crash_payload(uint64_t seq) {
  std::string payload = testing::payload_for(seq);
  if (seq % 3 == 0) payload.append(60'000 + seq % 1000, static_cast<char>('A' + seq % 26));
  return payload;
}

[[noreturn]] void run_crash_child(const char* dir) {
  try {
    writer_options options = testing::options_for(dir);
    options.segment_bytes = 256 * 1024;
    writer log = writer::open(options);
    for (;;) {
      const uint64_t seq = log.next_seq();
      log.append("child", "log", "type-" + std::to_string(seq % 2),
                 "episode-" + std::to_string(seq % 4), crash_payload(seq));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "crash child: %s\n", e.what());
  }
  std::_Exit(3);
}

const bool kIsCrashChild = [] {
  if (const char* dir = std::getenv(kCrashChildEnv)) run_crash_child(dir);
  return false;
}();

pid_t spawn_child(const std::filesystem::path& dir) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kCrashChildEnv) + "=" + dir.string());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string arg0 = self;
  char* argv[] = {arg0.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, self.c_str(), nullptr, nullptr, argv, envp.data());
  if (rc != 0) throw std::runtime_error("posix_spawn failed: " + std::to_string(rc));
  return pid;
}

TEST(Crash, SigkillMidAppendLosesNothingThatWasVisible) {
  ASSERT_FALSE(kIsCrashChild);
  testing::scratch_dir dir;
  std::filesystem::create_directories(dir.log());
  reader follower = reader::open(dir.log());  // follows across every crash and recovery
  std::mt19937 rng(7);
  uint64_t seen = 0;  // records the follower has returned
  record_view rec;

  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const pid_t child = spawn_child(dir.log());
    // Follow the child until it has appended a while, then on for a random moment more (so the
    // follower may hold part of the record being written), then kill it.
    const uint64_t target = seen + 300;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    std::optional<std::chrono::steady_clock::time_point> kill_at;
    for (;;) {
      const auto now = std::chrono::steady_clock::now();
      if (now > deadline || (kill_at && now >= *kill_at)) break;
      if (!kill_at && seen >= target) kill_at = now + std::chrono::microseconds(rng() % 3000);
      const read_status status = follower.next(rec);
      if (status == read_status::record) {
        ASSERT_EQ(rec.seq, seen + 1);
        ASSERT_EQ(rec.payload, crash_payload(rec.seq));
        ++seen;
      } else {
        ASSERT_NE(status, read_status::corrupt) << follower.problem().message();
      }
    }
    ASSERT_EQ(::kill(child, SIGKILL), 0);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(child, &wstatus, 0), child);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "the child ended on its own (status " << wstatus << "); see its stderr above";
    ASSERT_GE(seen, target) << "the child did not append fast enough";
  }

  // A last recovery, then every record must read back intact and in sequence.
  writer final_writer = writer::open(testing::options_for(dir.log()));
  const uint64_t last_seq = final_writer.next_seq() - 1;
  final_writer.close();
  const read_all_result all = read_all(dir.log());
  ASSERT_EQ(all.status, read_status::end) << all.problem.message();
  ASSERT_EQ(all.records.size(), last_seq);
  ASSERT_GE(all.records.size(), seen);  // nothing the follower saw was lost
  for (size_t i = 0; i < all.records.size(); ++i) {
    ASSERT_EQ(all.records[i].seq, i + 1);
    ASSERT_EQ(all.records[i].payload, crash_payload(i + 1)) << "seq " << i + 1;
    ASSERT_EQ(all.records[i].episode, "episode-" + std::to_string((i + 1) % 4));
  }
  // And the follower, which lived through all of it, agrees.
  read_status status;
  while ((status = follower.next(rec)) == read_status::record) {
    ASSERT_EQ(rec.seq, seen + 1);
    ++seen;
  }
  EXPECT_EQ(status, read_status::end) << follower.problem().message();
  EXPECT_EQ(seen, last_seq);
  // How many kills tore a record (informative: it depends on timing).
  RecordProperty("torn_tails_cut", static_cast<int>(testing::side_files(dir.log()).size()));
}

}  // namespace
}  // namespace cuda_agent::message_log
