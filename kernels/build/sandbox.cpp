#include "kernels/build/sandbox.hpp"

#include "actors/process/bwrap.hpp"

namespace cuda_agent::build {

std::vector<std::string> sandboxed_command(const sandbox_spec& spec,
                                           const std::vector<std::string>& argv) {
  std::vector<std::string> cmd{"prlimit", "--as=" + std::to_string(spec.memory_bytes),
                               "--fsize=" + std::to_string(spec.file_bytes), "--core=0", "--"};
  if (!spec.bubblewrap) {
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return cmd;
  }
  std::string path_env;
  for (const auto& dir : spec.path_dirs) path_env += dir.string() + ":";
  path_env += "/usr/bin:/bin";

  bwrap_spec bwrap;
  bwrap.program = spec.bwrap.string();
  bwrap.environment = {{"PATH", path_env},
                       {"HOME", spec.writable.string()},
                       {"TMPDIR", (spec.writable / "tmp").string()},
                       {"LC_ALL", "C"}};
  if (!spec.library_path.empty()) bwrap.environment.emplace_back("LD_LIBRARY_PATH", spec.library_path);
  bwrap.read_only = spec.read_only;
  bwrap.writable = spec.writable;
  bwrap.chdir = spec.cwd;
  const auto sandboxed = bwrap_argv(bwrap, argv);
  cmd.insert(cmd.end(), sandboxed.begin(), sandboxed.end());
  return cmd;
}

}  // namespace cuda_agent::build
