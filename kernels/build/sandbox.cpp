#include "kernels/build/sandbox.hpp"

#include <algorithm>

namespace cuda_agent::build {
namespace fs = std::filesystem;

std::vector<std::string> sandboxed_command(const sandbox_spec& spec,
                                           const std::vector<std::string>& argv) {
  std::vector<std::string> cmd{"prlimit", "--as=" + std::to_string(spec.memory_bytes),
                               "--fsize=" + std::to_string(spec.file_bytes), "--"};
  if (!spec.bubblewrap) {
    cmd.insert(cmd.end(), argv.begin(), argv.end());
    return cmd;
  }
  const auto add = [&cmd](std::initializer_list<std::string> words) {
    cmd.insert(cmd.end(), words.begin(), words.end());
  };
  std::string path_env;
  for (const auto& dir : spec.path_dirs) path_env += dir.string() + ":";
  path_env += "/usr/bin:/bin";

  cmd.push_back(spec.bwrap.string());
  add({"--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
       "--setenv", "PATH", path_env, "--setenv", "HOME", spec.writable.string(),
       "--setenv", "TMPDIR", (spec.writable / "tmp").string(), "--setenv", "LC_ALL", "C",
       "--ro-bind", "/usr", "/usr"});
  if (!spec.library_path.empty()) add({"--setenv", "LD_LIBRARY_PATH", spec.library_path});
  // Merged-/usr systems have /bin, /lib... as links into /usr; older ones as directories.
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    if (fs::is_symlink(top, ec))
      add({"--symlink", fs::read_symlink(top, ec).string(), top});
    else if (fs::is_directory(top, ec))
      add({"--ro-bind", top, top});
  }
  for (const char* file : {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d",
                           "/etc/alternatives", "/etc/passwd", "/etc/group"})
    add({"--ro-bind-try", file, file});
  add({"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"});
  // Binds come after the tmpfs, so toolchains and build dirs under /tmp stay visible.
  for (const auto& root : spec.read_only) {
    std::error_code ec;
    const fs::path real = fs::canonical(root, ec);
    if (ec || real.string().rfind("/usr/", 0) == 0) continue;
    add({"--ro-bind", real.string(), real.string()});
    if (real != fs::absolute(root)) add({"--ro-bind", real.string(), fs::absolute(root).string()});
  }
  add({"--bind", spec.writable.string(), spec.writable.string(), "--chdir", spec.cwd.string(),
       "--"});
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return cmd;
}

}  // namespace cuda_agent::build
