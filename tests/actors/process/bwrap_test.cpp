// The one bubblewrap command line (actors/process/bwrap.hpp): its protections do not depend on
// what the caller asks, the writable directory is the only writable bind and comes before the
// root is remounted read-only, and the harness's candidate isolation (Python, its own command
// line) keeps the same namespace and capability flags.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/process/bwrap.hpp"
#include "tests/support/skills_python.hpp"

namespace cuda_agent {
namespace {

namespace fs = std::filesystem;
using argv_t = std::vector<std::string>;

// The flags that take away the host: namespaces, capabilities, the way back to privilege, the
// caller's session. Spelled out here so that a weakened skills/harness/sandbox_protections.json
// fails this test.
const argv_t kProtections = {"--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
                             "--die-with-parent", "--new-session"};

std::ptrdiff_t index_of(const argv_t& argv, const argv_t& words) {
  const auto it = std::search(argv.begin(), argv.end(), words.begin(), words.end());
  return it == argv.end() ? -1 : it - argv.begin();
}

bool contains_all(const argv_t& argv, const argv_t& flags) {
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] == "--cap-drop") {
      if (index_of(argv, {"--cap-drop", "ALL"}) < 0) return false;
      ++i;
    } else if (std::find(argv.begin(), argv.end(), flags[i]) == argv.end()) {
      return false;
    }
  }
  return true;
}

TEST(Bwrap, ProtectionsHoldWhateverTheCallerAsks) {
  for (const bwrap_spec& spec : {bwrap_spec{"/usr/bin/bwrap", {}, {}, "/tmp/w", {}, {}, 0},
                                 bwrap_spec{"/usr/bin/bwrap", {{"PATH", "/usr/bin"}}, {"/opt"}, "/tmp/w",
                                            "/workdir", "/workdir", int64_t{1} << 20}}) {
    const auto argv = bwrap_argv(spec, {"true"});
    EXPECT_EQ(argv.front(), "/usr/bin/bwrap");
    EXPECT_TRUE(contains_all(argv, kProtections));
    EXPECT_GE(index_of(argv, {"--new-session"}), 0);
    EXPECT_GE(index_of(argv, {"--clearenv"}), 0);
    EXPECT_GE(index_of(argv, {"--ro-bind", "/usr", "/usr"}), 0);
    // The command comes last, after "--".
    EXPECT_EQ(argv.back(), "true");
    EXPECT_EQ(argv[argv.size() - 2], "--");
    // One read-write bind, then the root read-only: nothing bound after it is writable.
    const auto writable_at = spec.writable_at.empty() ? spec.writable : spec.writable_at;
    const auto bind = index_of(argv, {"--bind", spec.writable.string(), writable_at.string()});
    const auto remount = index_of(argv, {"--remount-ro", "/"});
    ASSERT_GE(bind, 0);
    EXPECT_GT(remount, bind);
    EXPECT_EQ(std::count(argv.begin(), argv.end(), "--bind"), 1);
    EXPECT_EQ(std::count(argv.begin(), argv.end(), "--dev-bind"), 0);
  }
}

TEST(Bwrap, EnvironmentIsOnlyTheCallersAfterClearenv) {
  const auto argv = bwrap_argv({"bwrap", {{"HOME", "/w"}, {"LC_ALL", "C"}}, {}, "/tmp/w", {}, {}, 0}, {"x"});
  const auto clear = index_of(argv, {"--clearenv"});
  EXPECT_GT(index_of(argv, {"--setenv", "HOME", "/w"}), clear);
  EXPECT_GT(index_of(argv, {"--setenv", "LC_ALL", "C"}), clear);
  EXPECT_EQ(std::count(argv.begin(), argv.end(), "--setenv"), 2);
}

TEST(Bwrap, ReadOnlyPathsAreBoundAtTheirRealAndTheirGivenPath) {
  const fs::path root = fs::temp_directory_path() / ("ca-bwrap-test-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "real");
  fs::create_directory_symlink(root / "real", root / "link");
  const auto argv = bwrap_argv({"bwrap", {}, {root / "link", root / "missing", "/usr/lib"}, "/tmp/w", {}, {}, 0},
                               {"x"});
  const auto real = (root / "real").string(), link = (root / "link").string();
  const auto tmpfs = index_of(argv, {"--tmpfs", "/tmp"});
  EXPECT_GT(index_of(argv, {"--ro-bind", real, real}), tmpfs);  // after the private /tmp
  EXPECT_GT(index_of(argv, {"--ro-bind", real, link}), tmpfs);
  EXPECT_LT(index_of(argv, {"--ro-bind", real, link}), index_of(argv, {"--remount-ro", "/"}));
  EXPECT_EQ(index_of(argv, {(root / "missing").string()}), -1);  // a missing path is skipped
  EXPECT_EQ(index_of(argv, {"--ro-bind", "/usr/lib", "/usr/lib"}), -1);  // already under /usr
  fs::remove_all(root);
}

TEST(Bwrap, EverySandboxStartsWithTheSharedProtections) {
  EXPECT_TRUE(contains_all(bwrap_protections(), kProtections));
  // The C++ sandboxes: the protections right after the program, before anything a caller adds.
  const auto argv = bwrap_argv(bwrap_spec{"/usr/bin/bwrap", {}, {}, "/tmp/w", {}, {}, 0}, {"true"});
  EXPECT_EQ(index_of(argv, bwrap_protections()), 1);
  // The candidate's sandbox, as the harness's Python builds it.
  const auto python = testing_support::skills_python_json(
                          "import json\nfrom harness import candidate_process\n"
                          "print(json.dumps(candidate_process.sandbox_command('/tmp/x', '/tmp/y', ['true'])))")
                          .get<argv_t>();
  EXPECT_EQ(index_of(python, bwrap_protections()), 1) << nlohmann::json(python).dump();
}

}  // namespace
}  // namespace cuda_agent
