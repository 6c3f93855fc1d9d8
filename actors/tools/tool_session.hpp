// What the nine agent tools share within one episode: the sandbox (and through it the workdir),
// the files the agent has read (so that an edit of a file it never saw, or that changed since it
// saw it, is refused), and its background shells.
//
// The session's end is the end of every process its commands started: close() (called when the
// episode's tools actor ends, however it ends, while tool calls may still hold the session) and
// the destructor stop the sandbox, which ends running commands and any that a call still in
// flight starts afterwards. When this process dies, the sandbox's lifeline ends them as well.
//
// Every path an agent names goes through resolve(): absolute paths under the visible workdir
// (/workdir) or paths relative to it are mapped to the host, every symlink on the way is followed
// by hand, and anything that ends up outside the workdir is refused. The file tools run in this
// process, not in the sandbox, so this check is what keeps them inside. The check and the open
// are two steps, so the file tools also check what they actually opened (file_tools.cpp).
//
// Thread safety: tool calls of one episode may run concurrently; every member is guarded.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/process/background_process.hpp"
#include "actors/sandbox/sandbox.hpp"
#include "config/settings.hpp"

namespace cuda_agent::tools {

// A tool call that cannot be carried out as asked; the message goes back to the agent as an
// error tool_result. One line, naming the argument or the problem and what to do instead.
struct tool_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct tool_limits {
  std::size_t read_lines = 2000;  // Read without a limit
  std::size_t line_chars = 2000;  // longer lines are cut in Read and Grep output
  static tool_limits from(const settings& config);
};

// What the agent last saw of a file: a later edit is refused when the file has changed since.
struct read_record {
  uint64_t content_hash = 0;
  std::filesystem::file_time_type mtime;
};

struct background_shell {
  std::string id;       // "bash_1", ...
  std::string command;  // as the agent wrote it
  std::shared_ptr<background_process> process;
};

uint64_t content_hash(std::string_view bytes);  // FNV-1a, 64 bits

class tool_session {
 public:
  tool_session(sandbox box, tool_limits limits);
  ~tool_session();  // closes, then waits for the background shells to be reaped

  // Ends every command of the session, running or started from now on; no background shell
  // can be added afterwards. Returns at once; thread-safe, and a second call does nothing.
  void close();

  const sandbox& box() const { return box_; }
  const tool_limits& limits() const { return limits_; }
  std::size_t output_limit() const { return box_.settings().output_limit_bytes; }

  // The host path an agent's path names; throws tool_error (naming `argument`) when it is
  // empty or resolves outside the workdir. The file need not exist.
  std::filesystem::path resolve(const std::string& agent_path, const char* argument) const;
  // Whether a host path (already free of symlinks) lies in the workdir.
  bool contains(const std::filesystem::path& host_path) const;
  // A host path inside the workdir as the agent sees it (/workdir/...).
  std::string visible(const std::filesystem::path& host_path) const;

  void remember_read(const std::filesystem::path& host_path, std::string_view content);
  std::optional<read_record> last_read(const std::filesystem::path& host_path) const;

  // Background shells: the id of the new one; throws tool_error past sandbox.max_background or
  // once the session is closed (the process is killed then).
  std::string add_background(std::string command, std::shared_ptr<background_process> process);
  std::shared_ptr<background_process> background(const std::string& id) const;
  std::vector<std::string> background_ids() const;
  void remove_background(const std::string& id);

  // File-tool operations of one session are serialised: an edit reads, checks and writes
  // without another tool of the same episode changing the file in between.
  std::mutex& file_mutex() { return file_mutex_; }

 private:
  sandbox box_;
  tool_limits limits_;
  std::filesystem::path root_;  // canonical host workdir

  mutable std::mutex mutex_;
  std::map<std::string, read_record> reads_;
  std::map<std::string, background_shell> shells_;
  int next_shell_ = 1;
  bool closed_ = false;
  std::mutex file_mutex_;
};

}  // namespace cuda_agent::tools
