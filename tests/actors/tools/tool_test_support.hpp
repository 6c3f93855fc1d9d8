// Helpers shared by the sandbox and tool tests: a scratch workdir under /tmp (reachable by the
// unprivileged user sandboxed commands run as when the tests run as root), and a session.
#pragma once

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/tools/tools.hpp"

namespace cuda_agent::tools::testing {

namespace fs = std::filesystem;

class scratch_workdir {
 public:
  scratch_workdir() {
    std::string pattern = "/tmp/ca-tools-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
    ::chmod(path_.c_str(), 0755);
  }
  ~scratch_workdir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  scratch_workdir(const scratch_workdir&) = delete;
  scratch_workdir& operator=(const scratch_workdir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline sandbox_settings test_sandbox_settings() {
  auto s = sandbox_settings::from(settings{});
  s.default_timeout = std::chrono::seconds{20};
  return s;
}

// A workdir with a session over it; call() runs a tool as the episode would.
class tool_fixture : public ::testing::Test {
 protected:
  tool_fixture() { make_session(test_sandbox_settings()); }

  void make_session(sandbox_settings s, tool_limits limits = {}) {
    sandbox box{work.path(), std::move(s)};
    box.prepare_workdir();
    session = std::make_shared<tool_session>(std::move(box), limits);
  }

  tool_result call(const std::string& tool, const nlohmann::json& args) {
    return run_tool(*session, tool_call{"call-1", tool, args.dump()}, "episode-1");
  }
  tool_result call_raw(const std::string& tool, const std::string& arguments_json) {
    return run_tool(*session, tool_call{"call-1", tool, arguments_json}, "episode-1");
  }
  fs::path host(const std::string& rel) const { return work.path() / rel; }

  scratch_workdir work;
  std::shared_ptr<tool_session> session;
};

}  // namespace cuda_agent::tools::testing
