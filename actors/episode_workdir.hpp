// The directory of one episode, prepared before its actor starts:
//
//   <episodes_dir>/<episode_id>/
//     workdir/      the agent's (writable in its sandbox): model.py (read-only), SKILL.md, the
//                   workdir template (binding.cpp, binding_registry.h, ...), an empty kernels/
//     task/model.py the reference program the harness reads; outside the workdir, so the agent
//                   can neither read a changed copy into the evaluation nor edit it
#pragma once

#include <filesystem>
#include <string>

#include "messages/messages.hpp"

namespace cuda_agent {

struct episode_paths {
  std::filesystem::path root;
  std::filesystem::path workdir;
  std::filesystem::path task_path;
};

struct workdir_sources {
  std::filesystem::path template_dir;  // copied into the workdir as is
  std::filesystem::path skill_md;      // copied as SKILL.md
};

// Creates the episode's directory afresh (an existing one, from an earlier attempt with the same
// id, is removed first). Throws std::runtime_error naming the path on any file-system failure.
episode_paths prepare_episode_dir(const std::filesystem::path& episodes_dir,
                                  const std::string& episode_id, const task_spec& task,
                                  const workdir_sources& sources);

}  // namespace cuda_agent
