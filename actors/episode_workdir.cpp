#include "actors/episode_workdir.hpp"

#include <fstream>
#include <stdexcept>
#include <system_error>

namespace cuda_agent {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush()) throw std::runtime_error{"cannot write " + path.string()};
}

void make_read_only(const fs::path& path) {
  fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read,
                  fs::perm_options::replace);
}

}  // namespace

episode_paths prepare_episode_dir(const fs::path& episodes_dir, const std::string& episode_id,
                                  const task_spec& task, const workdir_sources& sources) {
  if (episode_id.empty() || episode_id.find('/') != std::string::npos || episode_id == "." ||
      episode_id == "..")
    throw std::runtime_error{"invalid episode id '" + episode_id + "'"};
  episode_paths paths;
  paths.root = fs::absolute(episodes_dir / episode_id);
  paths.workdir = paths.root / "workdir";
  paths.task_path = paths.root / "task" / "model.py";
  try {
    fs::remove_all(paths.root);
    fs::create_directories(paths.workdir / "kernels");
    fs::create_directories(paths.task_path.parent_path());
    if (!sources.template_dir.empty())
      fs::copy(sources.template_dir, paths.workdir,
               fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    if (!sources.skill_md.empty()) fs::copy_file(sources.skill_md, paths.workdir / "SKILL.md");
  } catch (const fs::filesystem_error& e) {
    throw std::runtime_error{"cannot prepare episode directory: " + std::string{e.what()}};
  }
  write_text(paths.task_path, task.model_py);
  make_read_only(paths.task_path);
  write_text(paths.workdir / "model.py", task.model_py);
  make_read_only(paths.workdir / "model.py");
  return paths;
}

}  // namespace cuda_agent
