// Read, Write, Edit, MultiEdit, Glob and Grep. They run in this process, on host paths that
// tool_session::resolve() has confined to the workdir.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <sstream>

#include "actors/tools/tools.hpp"

namespace cuda_agent::tools {
namespace fs = std::filesystem;
namespace {

constexpr std::size_t binary_probe_bytes = 8192;
constexpr std::size_t max_grep_line = 4000;  // std::regex recurses per character: bound it
constexpr std::size_t max_glob_results = 100;
constexpr uintmax_t max_file_bytes = uintmax_t{64} << 20;  // the tools hold a file in memory

bool looks_binary(std::string_view content) {
  return content.substr(0, binary_probe_bytes).find('\0') != std::string_view::npos;
}

// An owned descriptor, closed on every path.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

// Opens a path that resolve() confined to the workdir and checks what was actually opened: a
// directory swapped for a symlink after the check (by a background command) is caught here,
// and a final symlink is not followed at all.
int open_inside(const tool_session& s, const fs::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) throw tool_error{"cannot open " + s.visible(path) + ": " + std::strerror(errno)};
  char target[4096];
  const auto n = ::readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), target, sizeof target);
  if (n <= 0 || !s.contains(fs::path{std::string{target, static_cast<std::size_t>(n)}})) {
    ::close(fd);
    throw tool_error{s.visible(path) + " leads outside the workdir; only paths inside it can be used"};
  }
  return fd;
}

std::string read_whole(const tool_session& s, const fs::path& path) {
  const auto shown = s.visible(path);
  fd_guard file{open_inside(s, path, O_RDONLY | O_NONBLOCK)};
  struct stat st {};
  if (::fstat(file.fd, &st) != 0 || !S_ISREG(st.st_mode))
    throw tool_error{shown + " is not a regular file"};
  if (static_cast<uintmax_t>(st.st_size) > max_file_bytes)
    throw tool_error{shown + " is too large for the file tools (" +
                     std::to_string(st.st_size >> 20) +
                     " MiB); look at parts of it with Bash (head, tail, sed -n)"};
  std::string content;
  char chunk[65536];
  for (;;) {
    const auto n = ::read(file.fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw tool_error{"cannot read " + shown + ": " + std::strerror(errno)};
    if (n == 0) break;
    content.append(chunk, static_cast<std::size_t>(n));
    if (content.size() > max_file_bytes) throw tool_error{shown + " is too large for the file tools"};
  }
  return content;
}

void require_regular_file(const tool_session& s, const fs::path& path, const char* fix) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (!fs::exists(status)) throw tool_error{"file does not exist: " + s.visible(path) + fix};
  if (fs::is_directory(status))
    throw tool_error{s.visible(path) + " is a directory; use Glob or Bash `ls` to list it"};
  if (!fs::is_regular_file(status)) throw tool_error{s.visible(path) + " is not a regular file"};
}

// The agent must have seen the current contents of a file before changing it.
void require_fresh_read(const tool_session& s, const fs::path& path, std::string_view content,
                        const char* action) {
  const auto record = s.last_read(path);
  if (!record)
    throw tool_error{s.visible(path) + " has not been Read in this session; Read it before " +
                     action + " it"};
  if (record->content_hash != content_hash(content))
    throw tool_error{s.visible(path) + " has changed since it was last Read; Read it again before " +
                     action + " it"};
}

void hand_over(const tool_session& s, int fd_or_minus, const fs::path& path) {
  if (const auto owner = s.box().file_owner()) {
    if (fd_or_minus >= 0) (void)::fchown(fd_or_minus, *owner, *owner);
    else (void)::lchown(path.c_str(), *owner, *owner);
  }
}

// Creates missing parent directories (inside the workdir: the path was resolved), then replaces
// the file atomically: a temporary file beside it, renamed over it.
void write_file(const tool_session& s, const fs::path& path, std::string_view content) {
  std::vector<fs::path> missing;
  for (auto dir = path.parent_path(); !fs::exists(dir); dir = dir.parent_path())
    missing.push_back(dir);
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST)
      throw tool_error{"cannot create directory " + s.visible(*it) + ": " + std::strerror(errno)};
    hand_over(s, -1, *it);
  }
  // Everything from here is relative to the checked directory descriptor.
  fd_guard dir{open_inside(s, path.parent_path(), O_RDONLY | O_DIRECTORY)};
  const auto name = path.filename().string();
  struct stat existing {};
  const bool exists = ::fstatat(dir.fd, name.c_str(), &existing, AT_SYMLINK_NOFOLLOW) == 0;
  static std::atomic<unsigned> counter{0};
  const auto temp = "." + name + ".tmp." + std::to_string(::getpid()) + "." +
                    std::to_string(counter++);
  fd_guard file{::openat(dir.fd, temp.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)};
  if (file.fd < 0) throw tool_error{"cannot write " + s.visible(path) + ": " + std::strerror(errno)};
  std::size_t written = 0;
  while (written < content.size()) {
    const auto n = ::write(file.fd, content.data() + written, content.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = errno;
      ::unlinkat(dir.fd, temp.c_str(), 0);
      throw tool_error{"cannot write " + s.visible(path) + ": " + std::strerror(error)};
    }
    written += static_cast<std::size_t>(n);
  }
  (void)::fchmod(file.fd, exists && S_ISREG(existing.st_mode) ? (existing.st_mode & 07777) : 0644);
  hand_over(s, file.fd, path);
  if (::renameat(dir.fd, temp.c_str(), dir.fd, name.c_str()) != 0) {
    const int error = errno;
    ::unlinkat(dir.fd, temp.c_str(), 0);
    throw tool_error{"cannot write " + s.visible(path) + ": " + std::strerror(error)};
  }
}

std::size_t count_lines(std::string_view text) {
  if (text.empty()) return 0;
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) +
         (text.back() == '\n' ? 0 : 1);
}

std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = text.find('\n', start);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

std::string cut_line(std::string_view line, std::size_t limit) {
  if (line.size() <= limit) return std::string{line};
  return std::string{line.substr(0, limit)} + "... [line cut: " +
         std::to_string(line.size() - limit) + " more characters]";
}

// cat -n: the line number right-aligned in six columns, a tab, the line.
void append_numbered(std::string& out, std::size_t number, std::string_view line,
                     std::size_t limit) {
  auto n = std::to_string(number);
  if (n.size() < 6) out.append(6 - n.size(), ' ');
  out += n;
  out += '\t';
  out += cut_line(line, limit);
  out += '\n';
}

std::size_t count_occurrences(std::string_view text, std::string_view needle) {
  std::size_t count = 0;
  for (auto pos = text.find(needle); pos != std::string_view::npos;
       pos = text.find(needle, pos + needle.size()))
    ++count;
  return count;
}

struct edit_spec {
  std::string old_string, new_string;
  bool replace_all = false;
};

// Applies one edit to `content`; returns the offset of the first replacement.
std::size_t apply_edit(std::string& content, const edit_spec& edit, const std::string& shown) {
  if (edit.old_string.empty())
    throw tool_error{"old_string is empty; to create or replace a whole file use Write"};
  if (edit.old_string == edit.new_string)
    throw tool_error{"old_string and new_string are identical; there is nothing to change"};
  const auto count = count_occurrences(content, edit.old_string);
  if (count == 0)
    throw tool_error{"old_string was not found in " + shown +
                     "; it must match the file exactly, including whitespace and indentation "
                     "(Read the file to copy the text)"};
  if (count > 1 && !edit.replace_all)
    throw tool_error{"old_string occurs " + std::to_string(count) + " times in " + shown +
                     "; include more surrounding lines to make it unique, or set replace_all "
                     "to true to replace every occurrence"};
  std::string out;
  out.reserve(content.size());
  std::size_t from = 0;
  std::size_t first = std::string::npos;
  for (auto pos = content.find(edit.old_string); pos != std::string::npos;
       pos = content.find(edit.old_string, from)) {
    if (first == std::string::npos) first = out.size() + (pos - from);
    out.append(content, from, pos - from);
    out += edit.new_string;
    from = pos + edit.old_string.size();
    if (!edit.replace_all) break;
  }
  out.append(content, from, std::string::npos);
  content = std::move(out);
  return first;
}

// A few numbered lines around an edit, so the agent sees the result without another Read.
std::string snippet(std::string_view content, std::size_t offset, std::size_t length,
                    std::size_t line_chars) {
  const auto first_line = static_cast<std::size_t>(
      std::count(content.begin(), content.begin() + static_cast<long>(offset), '\n'));
  const auto last_line = first_line + static_cast<std::size_t>(std::count(
      content.begin() + static_cast<long>(offset),
      content.begin() + static_cast<long>(std::min(offset + length, content.size())), '\n'));
  const auto lines = split_lines(content);
  const std::size_t from = first_line >= 3 ? first_line - 3 : 0;
  const std::size_t to = std::min(lines.size(), last_line + 4);
  std::string out;
  for (std::size_t i = from; i < to; ++i) append_numbered(out, i + 1, lines[i], line_chars);
  return out;
}

edit_spec edit_from(const nlohmann::json& args) {
  return {required_string(args, "old_string"), required_string(args, "new_string"),
          optional_bool(args, "replace_all", false)};
}

// A glob as a regular expression over '/'-separated relative paths: `*` and `?` stay within
// one component, `**/` spans any number of directories, `[...]` and `{a,b}` as in the shells.
std::regex glob_regex(const std::string& glob, bool icase = false) {
  std::string re;
  int braces = 0;
  for (std::size_t i = 0; i < glob.size(); ++i) {
    const char c = glob[i];
    if (c == '*') {
      if (i + 1 < glob.size() && glob[i + 1] == '*') {
        const bool slash = i + 2 < glob.size() && glob[i + 2] == '/';
        re += slash ? "(?:.*/)?" : ".*";
        i += slash ? 2 : 1;
      } else {
        re += "[^/]*";
      }
    } else if (c == '?') {
      re += "[^/]";
    } else if (c == '[') {
      const auto close = glob.find(']', i + 2);
      if (close == std::string::npos) {
        re += "\\[";
      } else {
        auto body = glob.substr(i + 1, close - i - 1);
        if (!body.empty() && body[0] == '!') body[0] = '^';
        re += "[" + body + "]";
        i = close;
      }
    } else if (c == '{') {
      ++braces;
      re += "(?:";
    } else if (c == '}' && braces > 0) {
      --braces;
      re += ")";
    } else if (c == ',' && braces > 0) {
      re += "|";
    } else if (std::strchr(".+()^$|\\{}", c) != nullptr) {
      re += '\\';
      re += c;
    } else {
      re += c;
    }
  }
  try {
    return std::regex{re, icase ? std::regex::ECMAScript | std::regex::icase : std::regex::ECMAScript};
  } catch (const std::regex_error&) {
    throw tool_error{"the glob pattern '" + glob + "' is malformed"};
  }
}

struct found_file {
  fs::path path;
  fs::file_time_type mtime;
};

// Regular files under `base` (a file counts as itself); symlinks only when they stay inside.
std::vector<found_file> files_under(const tool_session& s, const fs::path& base, bool skip_hidden) {
  std::vector<found_file> out;
  std::error_code ec;
  if (fs::is_regular_file(base, ec)) {
    out.push_back({base, fs::last_write_time(base, ec)});
    return out;
  }
  for (auto it = fs::recursive_directory_iterator{
           base, fs::directory_options::skip_permission_denied, ec};
       !ec && it != fs::recursive_directory_iterator{}; it.increment(ec)) {
    const auto& entry = *it;
    if (skip_hidden && entry.path().filename().string().rfind('.', 0) == 0) {
      if (entry.is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (!entry.is_regular_file(ec)) continue;
    if (entry.is_symlink(ec)) {
      try {
        s.resolve(s.visible(entry.path()), "path");
      } catch (const tool_error&) {
        continue;  // points outside the workdir
      }
    }
    out.push_back({entry.path(), entry.last_write_time(ec)});
  }
  return out;
}

void newest_first(std::vector<found_file>& files) {
  std::sort(files.begin(), files.end(), [](const found_file& a, const found_file& b) {
    if (a.mtime != b.mtime) return a.mtime > b.mtime;
    return a.path < b.path;
  });
}

fs::path resolve_dir_or_root(const tool_session& s, const nlohmann::json& args) {
  const auto path = optional_string(args, "path");
  const auto dir = path ? s.resolve(*path, "path") : s.box().workdir();
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw tool_error{"path does not exist: " + s.visible(dir)};
  return dir;
}

}  // namespace

tool_output read_tool(tool_session& s, const nlohmann::json& args) {
  const auto path = s.resolve(required_string(args, "file_path"), "file_path");
  const auto offset = optional_int(args, "offset").value_or(1);
  const auto limit = optional_int(args, "limit").value_or(static_cast<int64_t>(s.limits().read_lines));
  if (offset < 1) throw tool_error{"argument 'offset' must be a line number, 1 or more"};
  if (limit < 1) throw tool_error{"argument 'limit' must be 1 or more lines"};
  std::lock_guard lock{s.file_mutex()};
  require_regular_file(s, path, "");
  const auto content = read_whole(s, path);
  if (looks_binary(content))
    throw tool_error{s.visible(path) + " is a binary file (" + std::to_string(content.size()) +
                     " bytes); Read shows text files only"};
  s.remember_read(path, content);
  if (content.empty()) return {"(" + s.visible(path) + " is empty)"};
  const auto lines = split_lines(content);
  const auto first = static_cast<std::size_t>(offset);
  if (first > lines.size())
    throw tool_error{"offset " + std::to_string(offset) + " is past the end of " + s.visible(path) +
                     " (" + std::to_string(lines.size()) + " lines)"};
  const auto last = std::min(lines.size(), first - 1 + static_cast<std::size_t>(limit));
  std::string out;
  for (auto i = first; i <= last; ++i)
    append_numbered(out, i, lines[i - 1], s.limits().line_chars);
  if (first > 1 || last < lines.size())
    out += "[showing lines " + std::to_string(first) + "-" + std::to_string(last) + " of " +
           std::to_string(lines.size()) +
           (last < lines.size() ? "; Read with offset=" + std::to_string(last + 1) + " for more]"
                                : "]");
  return {out};
}

tool_output write_tool(tool_session& s, const nlohmann::json& args) {
  const auto path = s.resolve(required_string(args, "file_path"), "file_path");
  const auto content = required_string(args, "content");
  std::lock_guard lock{s.file_mutex()};
  std::error_code ec;
  const bool exists = fs::exists(path, ec);
  if (exists) {
    require_regular_file(s, path, "");
    require_fresh_read(s, path, read_whole(s, path), "overwriting");
  }
  write_file(s, path, content);
  s.remember_read(path, content);
  return {std::string{exists ? "Wrote " : "Created "} + s.visible(path) + " (" +
          std::to_string(count_lines(content)) + " lines, " + std::to_string(content.size()) +
          " bytes)"};
}

tool_output edit_tool(tool_session& s, const nlohmann::json& args) {
  const auto path = s.resolve(required_string(args, "file_path"), "file_path");
  const auto edit = edit_from(args);
  std::lock_guard lock{s.file_mutex()};
  require_regular_file(s, path, "; use Write to create it");
  auto content = read_whole(s, path);
  require_fresh_read(s, path, content, "editing");
  const auto replacements =
      edit.replace_all ? count_occurrences(content, edit.old_string) : std::size_t{1};
  const auto at = apply_edit(content, edit, s.visible(path));
  write_file(s, path, content);
  s.remember_read(path, content);
  return {"Edited " + s.visible(path) + " (" + std::to_string(replacements) + " replacement" +
          (replacements == 1 ? "" : "s") + "). The changed part now reads:\n" +
          snippet(content, at, edit.new_string.size(), s.limits().line_chars)};
}

tool_output multi_edit_tool(tool_session& s, const nlohmann::json& args) {
  const auto path = s.resolve(required_string(args, "file_path"), "file_path");
  const auto it = args.find("edits");
  if (it == args.end() || it->is_null())
    throw tool_error{"missing required argument 'edits' (an array of {old_string, new_string, "
                     "replace_all})"};
  if (!it->is_array() || it->empty())
    throw tool_error{"argument 'edits' must be a non-empty array of {old_string, new_string, "
                     "replace_all}"};
  std::vector<edit_spec> edits;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const auto& e = (*it)[i];
    const auto where = "edits[" + std::to_string(i) + "]";
    if (!e.is_object()) throw tool_error{where + " must be an object"};
    for (const auto& [name, value] : e.items())
      if (name != "old_string" && name != "new_string" && name != "replace_all")
        throw tool_error{where + ": unknown argument '" + name + "'"};
    try {
      edits.push_back(edit_from(e));
    } catch (const tool_error& error) {
      throw tool_error{where + ": " + error.what()};
    }
  }
  std::lock_guard lock{s.file_mutex()};
  require_regular_file(s, path, "; use Write to create it");
  auto content = read_whole(s, path);
  require_fresh_read(s, path, content, "editing");
  // All in memory first: one failing edit leaves the file untouched.
  for (std::size_t i = 0; i < edits.size(); ++i) {
    try {
      apply_edit(content, edits[i], s.visible(path));
    } catch (const tool_error& error) {
      throw tool_error{"edits[" + std::to_string(i) + "]: " + error.what() +
                       " (no edit was applied)"};
    }
  }
  write_file(s, path, content);
  s.remember_read(path, content);
  return {"Applied " + std::to_string(edits.size()) + " edit" + (edits.size() == 1 ? "" : "s") +
          " to " + s.visible(path) + " (now " + std::to_string(count_lines(content)) + " lines)"};
}

tool_output glob_tool(tool_session& s, const nlohmann::json& args) {
  auto pattern = required_string(args, "pattern");
  auto base = resolve_dir_or_root(s, args);
  if (!fs::is_directory(base)) throw tool_error{"argument 'path' must be a directory"};
  if (!pattern.empty() && pattern[0] == '/') {
    // An absolute pattern: its literal directory part must lie inside the workdir.
    const auto star = pattern.find_first_of("*?[{");
    const auto slash = pattern.rfind('/', star == std::string::npos ? pattern.size() : star);
    const auto dir = s.resolve(pattern.substr(0, std::max<std::size_t>(slash, 1)), "pattern");
    base = dir;
    pattern = pattern.substr(slash + 1);
  }
  if (pattern.empty()) throw tool_error{"argument 'pattern' is empty; try \"**/*.cu\""};
  const auto re = glob_regex(pattern);
  auto files = files_under(s, base, false);
  std::vector<found_file> matches;
  for (auto& f : files)
    if (std::regex_match(f.path.lexically_relative(base).generic_string(), re))
      matches.push_back(std::move(f));
  if (matches.empty()) return {"No files found"};
  newest_first(matches);
  std::string out;
  for (std::size_t i = 0; i < matches.size() && i < max_glob_results; ++i)
    out += s.visible(matches[i].path) + "\n";
  if (matches.size() > max_glob_results)
    out += "[" + std::to_string(matches.size() - max_glob_results) +
           " more files not shown; use a narrower pattern or path]\n";
  return {out};
}

tool_output grep_tool(tool_session& s, const nlohmann::json& args) {
  const auto pattern = required_string(args, "pattern");
  const auto base = resolve_dir_or_root(s, args);
  const auto glob = optional_string(args, "glob");
  const auto mode = optional_string(args, "output_mode").value_or("files_with_matches");
  const bool icase = optional_bool(args, "case_insensitive", false);
  const bool numbers = optional_bool(args, "line_numbers", true);
  if (mode != "content" && mode != "files_with_matches" && mode != "count")
    throw tool_error{"argument 'output_mode' must be \"content\", \"files_with_matches\" or "
                     "\"count\", got \"" + mode + "\""};
  std::regex re;
  try {
    re = std::regex{pattern, icase ? std::regex::ECMAScript | std::regex::icase
                                   : std::regex::ECMAScript};
  } catch (const std::regex_error& e) {
    throw tool_error{"argument 'pattern' is not a valid regular expression: " +
                     std::string{e.what()}};
  }
  std::optional<std::regex> name_filter;
  const bool filter_by_name = glob && glob->find('/') == std::string::npos;
  if (glob) name_filter = glob_regex(*glob);

  auto files = files_under(s, base, true);
  if (mode == "files_with_matches") newest_first(files);
  else std::sort(files.begin(), files.end(), [](auto& a, auto& b) { return a.path < b.path; });

  std::string out;
  std::size_t matched_files = 0;
  const auto budget = s.output_limit() * 2;  // past this the output is cut anyway
  for (const auto& f : files) {
    if (name_filter) {
      const auto subject = filter_by_name ? f.path.filename().string()
                                          : f.path.lexically_relative(base).generic_string();
      if (!std::regex_match(subject, *name_filter)) continue;
    }
    std::error_code ec;
    if (fs::file_size(f.path, ec) > max_file_bytes) continue;
    std::string content;
    try {
      content = read_whole(s, f.path);
    } catch (const tool_error&) {
      continue;
    }
    if (looks_binary(content)) continue;
    std::size_t count = 0;
    std::size_t number = 0;
    for (const auto line : split_lines(content)) {
      ++number;
      const auto searched = line.substr(0, max_grep_line);
      if (!std::regex_search(searched.begin(), searched.end(), re)) continue;
      ++count;
      if (mode == "files_with_matches") break;
      if (mode == "content" && out.size() < budget) {
        out += s.visible(f.path) + ":";
        if (numbers) out += std::to_string(number) + ":";
        out += cut_line(line, s.limits().line_chars) + "\n";
      }
    }
    if (count == 0) continue;
    ++matched_files;
    if (mode == "files_with_matches") out += s.visible(f.path) + "\n";
    if (mode == "count") out += s.visible(f.path) + ":" + std::to_string(count) + "\n";
  }
  if (matched_files == 0) return {"No matches found"};
  if (mode == "files_with_matches")
    out = "Found " + std::to_string(matched_files) + " file" + (matched_files == 1 ? "" : "s") +
          "\n" + out;
  return {out};
}

}  // namespace cuda_agent::tools
