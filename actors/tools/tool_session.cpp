#include "actors/tools/tool_session.hpp"

#include <sys/stat.h>

#include <deque>

namespace cuda_agent::tools {
namespace fs = std::filesystem;
namespace {

bool is_within(const fs::path& path, const fs::path& root) {
  const auto rel = path.lexically_relative(root);
  return !rel.empty() && *rel.begin() != "..";
}

void push_front_components(std::deque<fs::path>& queue, const fs::path& path) {
  std::vector<fs::path> parts;
  for (const auto& part : path.relative_path()) parts.push_back(part);
  queue.insert(queue.begin(), parts.begin(), parts.end());
}

}  // namespace

tool_limits tool_limits::from(const settings& config) {
  tool_limits limits;
  limits.read_lines = static_cast<std::size_t>(config.get_int("tools.read_lines"));
  limits.line_chars = static_cast<std::size_t>(config.get_int("tools.line_chars"));
  return limits;
}

uint64_t content_hash(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

tool_session::tool_session(sandbox box, tool_limits limits)
    : box_(std::move(box)), limits_(limits), root_(box_.workdir()) {}

tool_session::~tool_session() { close(); }

void tool_session::close() {
  box_.stop();
  std::lock_guard lock{mutex_};
  closed_ = true;
}

fs::path tool_session::resolve(const std::string& agent_path, const char* argument) const {
  if (agent_path.empty())
    throw tool_error{"argument '" + std::string{argument} + "' is empty; give a path inside " +
                     box_.visible_workdir().string()};
  if (agent_path.find('\0') != std::string::npos)
    throw tool_error{"argument '" + std::string{argument} + "' contains a NUL character"};
  const auto outside = [&] {
    return tool_error{"'" + agent_path + "' (" + argument + ") is outside the workdir " +
                      box_.visible_workdir().string() +
                      "; only paths inside it (absolute or relative to it) can be used"};
  };

  fs::path relative{agent_path};
  if (relative.is_absolute()) {
    const auto normal = relative.lexically_normal();
    if (normal == box_.visible_workdir()) {
      relative = ".";
    } else if (is_within(normal, box_.visible_workdir())) {
      relative = normal.lexically_relative(box_.visible_workdir());
    } else {
      throw outside();
    }
  }

  // Walk the path one component at a time, following each symlink by hand, so that neither a
  // symlink (also one the agent made inside the sandbox) nor `..` can lead out of the workdir.
  std::deque<fs::path> pending;
  push_front_components(pending, relative);
  fs::path current = root_;
  int symlinks_followed = 0;
  while (!pending.empty()) {
    const auto part = pending.front();
    pending.pop_front();
    if (part == "." || part.empty()) continue;
    if (part == "..") {
      current = current.parent_path();
      continue;
    }
    const auto next = current / part;
    struct stat st {};
    if (::lstat(next.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      current = next;  // a directory, a file, or not there yet (then nothing below can be a link)
      continue;
    }
    if (++symlinks_followed > 40)
      throw tool_error{"'" + agent_path + "' (" + argument + "): too many levels of symlinks"};
    std::error_code ec;
    const auto target = fs::read_symlink(next, ec);
    if (ec) throw outside();
    if (target.is_absolute()) {
      // A link made inside the sandbox points at /workdir/...: that is the workdir here.
      const auto normal = target.lexically_normal();
      if (normal == box_.visible_workdir() || is_within(normal, box_.visible_workdir())) {
        current = root_;
        push_front_components(pending, normal.lexically_relative(box_.visible_workdir()));
      } else {
        current = "/";
        push_front_components(pending, normal);
      }
    } else {
      push_front_components(pending, target);
    }
  }
  current = current.lexically_normal();
  if (current != root_ && !is_within(current, root_)) throw outside();
  if (!current.empty() && current.filename().empty()) current = current.parent_path();
  return current;
}

bool tool_session::contains(const fs::path& host_path) const {
  const auto normal = host_path.lexically_normal();
  return normal == root_ || is_within(normal, root_);
}

std::string tool_session::visible(const fs::path& host_path) const {
  const auto rel = host_path.lexically_relative(root_);
  if (rel.empty() || rel == ".") return box_.visible_workdir().string();
  return (box_.visible_workdir() / rel).string();
}

void tool_session::remember_read(const fs::path& host_path, std::string_view content) {
  std::error_code ec;
  const auto mtime = fs::last_write_time(host_path, ec);
  std::lock_guard lock{mutex_};
  reads_[host_path.string()] = read_record{content_hash(content), mtime};
}

std::optional<read_record> tool_session::last_read(const fs::path& host_path) const {
  std::lock_guard lock{mutex_};
  const auto it = reads_.find(host_path.string());
  if (it == reads_.end()) return std::nullopt;
  return it->second;
}

std::string tool_session::add_background(std::string command,
                                         std::shared_ptr<background_process> process) {
  std::lock_guard lock{mutex_};
  // A call still in flight when the episode ended: its command must not be left behind.
  if (closed_) {
    process->kill();
    throw tool_error{"the episode has ended; no command can start"};
  }
  int64_t running = 0;
  for (const auto& [id, shell] : shells_)
    if (!shell.process->wait_for(std::chrono::milliseconds{0})) ++running;
  if (running >= box_.settings().max_background) {
    process->kill();
    throw tool_error{"already " + std::to_string(running) +
                     " background commands running (sandbox.max_background); end one with "
                     "KillBash first"};
  }
  auto id = "bash_" + std::to_string(next_shell_++);
  shells_[id] = background_shell{id, std::move(command), std::move(process)};
  return id;
}

std::shared_ptr<background_process> tool_session::background(const std::string& id) const {
  std::lock_guard lock{mutex_};
  const auto it = shells_.find(id);
  if (it == shells_.end()) return nullptr;
  return it->second.process;
}

std::vector<std::string> tool_session::background_ids() const {
  std::lock_guard lock{mutex_};
  std::vector<std::string> ids;
  for (const auto& [id, shell] : shells_) ids.push_back(id);
  return ids;
}

void tool_session::remove_background(const std::string& id) {
  std::shared_ptr<background_process> process;
  {
    std::lock_guard lock{mutex_};
    const auto it = shells_.find(id);
    if (it == shells_.end()) return;
    process = std::move(it->second.process);
    shells_.erase(it);
  }
  // Killing waits for the child: outside the lock.
  if (process) process->kill();
}

}  // namespace cuda_agent::tools
