#include "actors/cluster/file_bundle.hpp"

#include <unistd.h>

#include <cctype>

#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>

#include "kernels/build/sha256.hpp"

namespace cuda_agent::cluster {
namespace fs = std::filesystem;
namespace {

std::string read_bytes(const fs::path& file) {
  std::ifstream in{file, std::ios::binary};
  if (!in) throw bundle_error{"cannot read " + file.string() + " to ship it"};
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// A bundle path that stays inside its root: relative, no empty, "." or ".." component.
bool safe_relative(const std::string& path) {
  if (path.empty() || path.front() == '/' || path.find('\0') != std::string::npos) return false;
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto end = std::min(path.find('/', start), path.size());
    const auto part = path.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = end + 1;
  }
  return true;
}

void write_atomically(const fs::path& target, const std::string& content, bool executable) {
  const auto temp = target.string() + fmt::format(".part{}", ::getpid());
  {
    std::ofstream out{temp, std::ios::binary | std::ios::trunc};
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out.flush()) throw bundle_error{"cannot write " + temp};
  }
  fs::permissions(temp, executable ? fs::perms{0755} : fs::perms{0644});
  fs::rename(temp, target);
}

}  // namespace

void bundle_writer::add_file(const fs::path& file, const std::string& name) {
  std::error_code ec;
  const auto size = fs::file_size(file, ec);
  if (ec) throw bundle_error{"cannot ship " + file.string() + ": " + ec.message()};
  if (size > left_)
    throw candidate_files_error{fmt::format("cannot ship {}: the job's files pass {} MiB (cluster.max_bundle_mb)",
                                   file.string(), max_bytes_ >> 20)};
  left_ -= size;
  shipped_file shipped;
  shipped.path = name;
  shipped.content = read_bytes(file);
  shipped.sha256 = build::sha256_hex(shipped.content);
  shipped.executable = (fs::status(file).permissions() & fs::perms::owner_exec) != fs::perms::none;
  bundle_.files.push_back(std::move(shipped));
}

void bundle_writer::add_directory(const fs::path& dir, const std::string& prefix) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw bundle_error{"cannot ship " + dir.string() + ": not a directory"};
  for (auto it = fs::recursive_directory_iterator{dir, ec}; !ec && it != fs::recursive_directory_iterator{};
       it.increment(ec)) {
    if (it->is_symlink() || !it->is_regular_file()) continue;
    add_file(it->path(), prefix + "/" + fs::relative(it->path(), dir).generic_string());
  }
  if (ec) throw bundle_error{"cannot ship " + dir.string() + ": " + ec.message()};
}

void unpack_bundle(const file_bundle& bundle, const fs::path& root, uint64_t max_bytes) {
  uint64_t total = 0;
  for (const auto& file : bundle.files) {
    if (!safe_relative(file.path)) throw bundle_error{"refused a shipped file named '" + file.path + "': not a plain relative path"};
    total += file.content.size();
    if (total > max_bytes)
      throw candidate_files_error{fmt::format("refused shipped files over {} MiB (cluster.max_bundle_mb)", max_bytes >> 20)};
    if (build::sha256_hex(file.content) != file.sha256)
      throw bundle_error{"refused shipped file " + file.path + ": its content does not match its digest"};
  }
  fs::create_directories(root);
  for (const auto& file : bundle.files) {
    const auto target = root / fs::path{file.path};
    fs::create_directories(target.parent_path());
    write_atomically(target, file.content, file.executable);
  }
}

std::string bundle_digest(const file_bundle& bundle) {
  build::sha256 digest;
  digest.field("bundle v1");
  for (const auto& file : bundle.files) digest.field(file.path).field(file.sha256).field(file.executable ? "x" : "-");
  return digest.hex();
}

file_bundle bundle_job_files(const std::string& task_path, const std::string& solution_dir,
                             const std::string& module_path, uint64_t max_bytes) {
  bundle_writer files{max_bytes};
  try {
    if (!task_path.empty()) files.add_file(task_path, "task/" + fs::path{task_path}.filename().string());
  } catch (const bundle_error& e) {
    throw bundle_error{e.what()};  // the task is ours: never the candidate's doing
  }
  try {
    if (!solution_dir.empty()) files.add_directory(solution_dir, "solution");
    if (!module_path.empty())
      files.add_directory(fs::is_directory(module_path) ? fs::path{module_path} : fs::path{module_path}.parent_path(),
                          "module");
  } catch (const bundle_error& e) {
    throw candidate_files_error{e.what()};
  }
  return files.take();
}

void relocate_job_files(std::string& task_path, std::string& solution_dir, std::string& module_path,
                        const fs::path& dir) {
  if (!task_path.empty()) task_path = (dir / "task" / fs::path{task_path}.filename()).string();
  if (!solution_dir.empty()) {
    solution_dir = (dir / "solution").string();
    fs::create_directories(solution_dir);  // an empty one ships no file
  }
  if (!module_path.empty()) {
    // The module file, or the module directory when that is what the job named.
    const auto file = dir / "module" / fs::path{module_path}.filename();
    module_path = fs::is_regular_file(file) ? file.string() : (dir / "module").string();
  }
}

std::string path_component(const std::string& text) {
  std::string out;
  for (const char c : text) out += (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.') ? c : '_';
  if (out.empty() || out == "." || out == "..") out = "_" + out;
  return out;
}

}  // namespace cuda_agent::cluster
