// The sandbox, attacked from inside: every test runs a real command under bubblewrap and checks
// on the host that it could not get out.
#include <random>

#include "tests/actors/process/survivors.hpp"
#include "tests/actors/tools/tool_test_support.hpp"

namespace cuda_agent::tools::testing {
namespace {

using namespace std::chrono_literals;

std::string unique_token() {
  std::random_device rd;
  return std::to_string(rd()) + std::to_string(rd());
}

int host_processes_with(const std::string& needle) {
  return static_cast<int>(cuda_agent::testing::processes_with({needle}).size());
}

class sandbox_test : public ::testing::Test {
 protected:
  sandbox make(sandbox_settings s = test_sandbox_settings()) {
    sandbox box{work.path(), std::move(s)};
    box.prepare_workdir();
    return box;
  }
  scratch_workdir work;
};

TEST_F(sandbox_test, runs_in_the_workdir_mounted_at_workdir) {
  const auto box = make();
  box.probe();
  const auto r = box.run("pwd; echo \"$HOME\"; echo made > here.txt; hostname", 20s);
  ASSERT_TRUE(r.ok()) << r.describe() << r.err;
  EXPECT_EQ(r.out, "/workdir\n/workdir\nsandbox\n");
  EXPECT_EQ(read_text(work.path() / "here.txt"), "made\n");
}

TEST_F(sandbox_test, nothing_outside_the_workdir_can_be_written) {
  const auto box = make();
  const auto token = unique_token();
  const auto r = box.run("touch /work/escape-" + token + " 2>/dev/null && echo wrote-work; "
                         "touch /usr/escape-" + token + " 2>/dev/null && echo wrote-usr; "
                         "touch /escape-" + token + " 2>/dev/null && echo wrote-root; "
                         "echo secret > /tmp/escape-" + token + " && echo wrote-private-tmp; "
                         "ls /work /root /home 2>/dev/null | head -1",
                         20s);
  EXPECT_EQ(r.out, "wrote-private-tmp\n");
  EXPECT_FALSE(fs::exists("/work/escape-" + token));
  EXPECT_FALSE(fs::exists("/usr/escape-" + token));
  EXPECT_FALSE(fs::exists("/escape-" + token));
  // /tmp inside is a private tmpfs: the file never reaches the host's /tmp.
  EXPECT_FALSE(fs::exists("/tmp/escape-" + token));
}

TEST_F(sandbox_test, the_environment_is_clean_and_no_gpu_device_is_visible) {
  ::setenv("CUDA_AGENT_TEST_SECRET", "do-not-leak", 1);
  const auto box = make();
  const auto r = box.run("env; ls /dev", 20s);
  ASSERT_TRUE(r.ok()) << r.err;
  EXPECT_EQ(r.out.find("do-not-leak"), std::string::npos);
  EXPECT_EQ(r.out.find("nvidia"), std::string::npos);
  EXPECT_NE(r.out.find("PATH=/usr/local/bin:/usr/bin:/bin"), std::string::npos);
}

TEST_F(sandbox_test, there_is_no_network_but_loopback) {
  const auto box = make();
  const auto outside = box.run(
      "python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 53), timeout=3)'", 20s);
  EXPECT_TRUE(outside.exited);
  EXPECT_NE(outside.exit_code, 0);
  EXPECT_NE(outside.err.find("unreachable"), std::string::npos) << outside.err;
  const auto loopback = box.run(
      "python3 -c 'import socket\n"
      "s = socket.socket(); s.bind((\"127.0.0.1\", 0)); s.listen(1)\n"
      "c = socket.create_connection(s.getsockname()); a, _ = s.accept()\n"
      "c.sendall(b\"ping\"); print(a.recv(4).decode())'",
      20s);
  ASSERT_TRUE(loopback.ok()) << loopback.err;
  EXPECT_EQ(loopback.out, "ping\n");
}

TEST_F(sandbox_test, a_fork_bomb_stops_at_the_process_limit) {
  auto s = test_sandbox_settings();
  s.max_processes = 32;
  const auto box = make(s);
  // Fork until the kernel refuses: the count stops at the limit, not at the 500 asked for.
  const auto r = box.run("python3 -c 'import os, time\n"
                         "n = 0\n"
                         "try:\n"
                         "    while n < 500:\n"
                         "        if os.fork() == 0:\n"
                         "            time.sleep(5); os._exit(0)\n"
                         "        n += 1\n"
                         "except OSError as e:\n"
                         "    print(n, e.errno, flush=True)\n"
                         "os.killpg(0, 9)'",
                         20s);
  ASSERT_FALSE(r.out.empty()) << r.describe() << r.err;
  const auto forked = std::stoi(r.out);
  EXPECT_LT(forked, 32);
  EXPECT_GE(forked, 8);
  EXPECT_NE(r.out.find(" 11"), std::string::npos) << r.out;  // EAGAIN
  // The classic bomb: bounded, and gone at the time limit.
  const auto bomb = box.run("bomb() { bomb | bomb & }; bomb; sleep 30", 3s);
  EXPECT_TRUE(bomb.timed_out || bomb.exited);
  EXPECT_LT(bomb.elapsed, 15s);
}

TEST_F(sandbox_test, a_memory_hog_fails_at_the_address_space_limit) {
  auto s = test_sandbox_settings();
  s.memory_mb = 512;
  const auto box = make(s);
  const auto r = box.run("python3 -c 'x = bytearray(1024 * 1024 * 1024); print(len(x))'", 20s);
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.err.find("MemoryError"), std::string::npos) << r.err;
  const auto small = box.run("python3 -c 'x = bytearray(64 * 1024 * 1024); print(len(x))'", 20s);
  EXPECT_TRUE(small.ok()) << small.err;
}

TEST_F(sandbox_test, a_file_cannot_grow_past_the_file_size_limit) {
  auto s = test_sandbox_settings();
  s.max_file_mb = 1;
  const auto box = make(s);
  const auto r = box.run("head -c 3000000 /dev/zero > big.bin", 20s);
  EXPECT_FALSE(r.ok());
  EXPECT_LE(fs::file_size(work.path() / "big.bin"), 1024u * 1024u);
}

TEST_F(sandbox_test, a_command_past_its_time_limit_is_killed_with_everything_it_started) {
  const auto box = make();
  const auto token = std::to_string(100000 + std::random_device{}() % 800000);
  const auto r = box.run("sleep 1" + token + " & sleep 2" + token, 500ms);
  EXPECT_TRUE(r.timed_out);
  EXPECT_LT(r.elapsed, 5s);
  // run() returns once the command's PID namespace is empty: no survivor, at once.
  EXPECT_EQ(host_processes_with("1" + token), 0);
  EXPECT_EQ(host_processes_with("2" + token), 0);
}

TEST_F(sandbox_test, a_background_command_is_polled_and_killed) {
  const auto box = make();
  const auto token = std::to_string(100000 + std::random_device{}() % 800000);
  auto process = box.start("echo first; sleep 0.3; echo second; sleep 3" + token, 30s);
  // Each take brings only what is new since the last one.
  std::vector<std::string> takes;
  std::string all;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (all != "first\nsecond\n" && std::chrono::steady_clock::now() < deadline) {
    auto snap = process->take_output();
    EXPECT_TRUE(snap.running);
    if (!snap.output.empty()) takes.push_back(snap.output);
    all += snap.output;
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(all, "first\nsecond\n");
  EXPECT_EQ(takes.size(), 2u);  // 0.3 s apart: two separate arrivals
  for (int i = 0; i < 100 && host_processes_with("3" + token) == 0; ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(host_processes_with("3" + token), 1);
  process->kill();
  const auto c = process->take_output();
  EXPECT_FALSE(c.running);
  EXPECT_TRUE(c.killed);
  EXPECT_EQ(host_processes_with("3" + token), 0);
}

TEST_F(sandbox_test, extra_read_only_paths_are_visible_but_not_writable) {
  scratch_workdir toolchain;
  write_text(toolchain.path() / "tool.sh", "echo from-toolchain\n");
  auto s = test_sandbox_settings();
  s.ro_paths = {toolchain.path()};
  const auto box = make(s);
  const auto r = box.run("sh " + (toolchain.path() / "tool.sh").string() + "; touch " +
                             (toolchain.path() / "x").string() + " 2>/dev/null || echo refused",
                         20s);
  EXPECT_EQ(r.out, "from-toolchain\nrefused\n");
  EXPECT_FALSE(fs::exists(toolchain.path() / "x"));
}

TEST_F(sandbox_test, a_missing_bwrap_is_one_clear_error) {
  auto s = test_sandbox_settings();
  s.bwrap = "/nonexistent/bwrap";
  try {
    sandbox box{work.path(), s};
    FAIL() << "expected a sandbox_error";
  } catch (const sandbox_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("/nonexistent/bwrap"), std::string::npos);
    EXPECT_NE(message.find("sandbox.mode = none"), std::string::npos);
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  EXPECT_THROW((sandbox{work.path() / "missing", test_sandbox_settings()}), sandbox_error);
}

TEST_F(sandbox_test, a_bwrap_that_may_not_create_namespaces_is_one_clear_error) {
  // A stand-in for bwrap on a host that forbids user namespaces: it fails the way bwrap does.
  scratch_workdir bin;
  write_text(bin.path() / "bwrap",
             "#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n");
  fs::permissions(bin.path() / "bwrap", fs::perms::all);
  auto s = test_sandbox_settings();
  s.bwrap = (bin.path() / "bwrap").string();
  const auto box = make(s);
  try {
    box.probe();
    FAIL() << "expected a sandbox_error";
  } catch (const sandbox_error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("No permissions to create new namespace"), std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

TEST_F(sandbox_test, mode_none_keeps_the_limits_but_shows_the_host_path) {
  auto s = test_sandbox_settings();
  s.isolate = false;
  s.memory_mb = 512;
  const auto box = make(s);
  EXPECT_EQ(box.visible_workdir(), fs::canonical(work.path()));
  const auto r = box.run("pwd; python3 -c 'bytearray(1024 * 1024 * 1024)' 2>&1 | tail -1", 20s);
  EXPECT_EQ(r.out, fs::canonical(work.path()).string() + "\nMemoryError\n");
}

TEST(sandbox_settings, come_from_the_sandbox_section) {
  settings config;
  config.apply_override("sandbox.ro_paths=/opt/a:/opt/b");
  config.apply_override("sandbox.memory_mb=1000");
  const auto s = sandbox_settings::from(config);
  ASSERT_EQ(s.ro_paths.size(), 2u);
  EXPECT_EQ(s.ro_paths[1], "/opt/b");
  EXPECT_EQ(s.memory_mb, 1000);
  config.apply_override("sandbox.ro_paths=relative/path");
  EXPECT_THROW(sandbox_settings::from(config), config_error);
}

}  // namespace
}  // namespace cuda_agent::tools::testing
