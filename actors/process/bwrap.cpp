#include "actors/process/bwrap.hpp"

#include "bwrap_protections.hpp"  // generated from skills/harness/sandbox_protections.json

#include <system_error>

namespace cuda_agent {
namespace fs = std::filesystem;

const std::vector<std::string>& bwrap_protections() {
  static const std::vector<std::string> flags{CUDA_AGENT_BWRAP_PROTECTIONS};
  return flags;
}

std::vector<std::string> bwrap_argv(const bwrap_spec& spec, const std::vector<std::string>& command) {
  std::vector<std::string> argv{spec.program};
  const auto& protections = bwrap_protections();
  argv.insert(argv.end(), protections.begin(), protections.end());
  argv.push_back("--clearenv");
  const auto add = [&argv](std::initializer_list<std::string> words) {
    argv.insert(argv.end(), words.begin(), words.end());
  };
  for (const auto& [name, value] : spec.environment) add({"--setenv", name, value});
  add({"--ro-bind", "/usr", "/usr"});
  // Merged-/usr systems have these as links into /usr; older ones as directories.
  for (const char* top : {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}) {
    std::error_code ec;
    const auto status = fs::symlink_status(top, ec);
    if (ec || !fs::exists(status)) continue;
    if (fs::is_symlink(status))
      add({"--symlink", fs::read_symlink(top, ec).string(), top});
    else
      add({"--ro-bind", top, top});
  }
  // Only what programs need from /etc: the loader cache, alternatives (cc, c++), user names.
  for (const char* etc : {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                          "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime",
                          "/etc/bash.bashrc", "/etc/profile"})
    add({"--ro-bind-try", etc, etc});
  add({"--proc", "/proc", "--dev", "/dev"});
  if (spec.tmp_bytes > 0) add({"--size", std::to_string(spec.tmp_bytes)});
  add({"--tmpfs", "/tmp"});
  // After the tmpfs, so that read-only paths and the writable directory under /tmp stay visible.
  for (const auto& path : spec.read_only) {
    std::error_code ec;
    const fs::path real = fs::canonical(path, ec);
    if (ec) continue;
    const fs::path given = fs::absolute(path, ec);
    const auto under_usr = [](const fs::path& p) { return p.string().rfind("/usr/", 0) == 0; };
    if (!under_usr(real)) add({"--ro-bind", real.string(), real.string()});
    if (given != real && !under_usr(given)) add({"--ro-bind", real.string(), given.string()});
  }
  const auto writable_at = spec.writable_at.empty() ? spec.writable : spec.writable_at;
  // The root itself (bwrap's scratch tmpfs holding the mount points) becomes read-only last.
  add({"--bind", spec.writable.string(), writable_at.string(), "--remount-ro", "/", "--chdir",
       spec.chdir.empty() ? writable_at.string() : spec.chdir.string(), "--"});
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

}  // namespace cuda_agent
