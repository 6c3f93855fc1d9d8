#include "actors/sandbox/sandbox.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include "actors/process/bwrap.hpp"

namespace cuda_agent {
namespace fs = std::filesystem;
namespace {

std::vector<fs::path> split_paths(const std::string& list) {
  std::vector<fs::path> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto end = std::min(list.find(':', start), list.size());
    if (end > start) out.emplace_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool running_as_root() { return ::geteuid() == 0; }

}  // namespace

sandbox_settings sandbox_settings::from(const settings& config) {
  sandbox_settings s;
  s.isolate = config.get_string("sandbox.mode") == "bwrap";
  s.bwrap = config.get_string("sandbox.bwrap");
  s.memory_mb = config.get_int("sandbox.memory_mb");
  s.max_processes = config.get_int("sandbox.max_processes");
  s.max_file_mb = config.get_int("sandbox.max_file_mb");
  s.default_timeout = std::chrono::milliseconds{config.get_int("sandbox.default_timeout_ms")};
  s.max_timeout = std::chrono::milliseconds{config.get_int("sandbox.max_timeout_ms")};
  s.output_limit_bytes = static_cast<std::size_t>(config.get_int("sandbox.output_limit_bytes"));
  s.ro_paths = split_paths(config.get_string("sandbox.ro_paths"));
  s.path_env = config.get_string("sandbox.path");
  s.run_as_uid = static_cast<uid_t>(config.get_int("sandbox.run_as_uid"));
  s.max_background = config.get_int("sandbox.max_background");
  if (s.default_timeout > s.max_timeout)
    throw config_error{"setting 'sandbox.default_timeout_ms' must not exceed "
                       "'sandbox.max_timeout_ms'"};
  for (const auto& p : s.ro_paths)
    if (!p.is_absolute())
      throw config_error{"setting 'sandbox.ro_paths': '" + p.string() +
                         "' must be an absolute path"};
  return s;
}

sandbox::sandbox(fs::path workdir, sandbox_settings settings)
    : settings_(std::move(settings)) {
  std::error_code ec;
  workdir_ = fs::canonical(workdir, ec);
  if (ec || !fs::is_directory(workdir_))
    throw sandbox_error{"sandbox: workdir '" + workdir.string() +
                        "' is not an existing directory; create it before starting the episode"};
  visible_ = settings_.isolate ? mount_point : workdir_;
  if (settings_.isolate) {
    bwrap_path_ = find_program(settings_.bwrap);
    if (bwrap_path_.empty())
      throw sandbox_error{"sandbox: bubblewrap '" + settings_.bwrap +
                          "' not found (sandbox.bwrap); install it (apt-get install bubblewrap) "
                          "or, on a host that cannot have it, set sandbox.mode = none explicitly"};
    if (file_owner() && find_program("setpriv").empty())
      throw sandbox_error{"sandbox: setpriv (util-linux) not found; it is needed to run commands "
                          "as sandbox.run_as_uid when cuda-agent runs as root"};
    lifeline_ = std::make_shared<lifeline>();
  }
}

std::optional<uid_t> sandbox::file_owner() const {
  if (running_as_root() && settings_.run_as_uid != 0) return settings_.run_as_uid;
  return std::nullopt;
}

void sandbox::prepare_workdir() const {
  const auto owner = file_owner();
  if (!owner) return;
  auto hand_over = [&](const fs::path& p) {
    if (::lchown(p.c_str(), *owner, *owner) != 0)
      throw sandbox_error{"sandbox: cannot hand '" + p.string() + "' to uid " +
                          std::to_string(*owner) + ": " + std::strerror(errno)};
  };
  hand_over(workdir_);
  for (const auto& entry : fs::recursive_directory_iterator{workdir_}) hand_over(entry.path());
}

std::map<std::string, std::string> sandbox::environment() const {
  return {{"HOME", visible_.string()},
          {"PWD", visible_.string()},
          {"PATH", settings_.path_env},
          {"TMPDIR", "/tmp"},
          {"LANG", "C.UTF-8"},
          {"TERM", "dumb"},
          {"PYTHONDONTWRITEBYTECODE", "1"}};
}

std::vector<std::string> sandbox::command_argv(const std::string& command) const {
  const auto mib = [](int64_t n) { return std::to_string(n * 1024 * 1024); };
  // Limits are set inside the sandbox, on the command alone: RLIMIT_NPROC then counts only the
  // processes of the sandbox's own user namespace.
  const std::vector<std::string> limited = {
      "prlimit", "--as=" + mib(settings_.memory_mb),
      "--nproc=" + std::to_string(settings_.max_processes),
      "--fsize=" + mib(settings_.max_file_mb), "--core=0", "--",
      "bash", "-c", command};

  std::vector<std::string> argv;
  if (!settings_.isolate) {
    // No isolation: a clean environment, the limits, the workdir as the current directory.
    argv = {"env", "-i"};
    for (const auto& [name, value] : environment()) argv.push_back(name + "=" + value);
    argv.insert(argv.end(), {"sh", "-c", "cd \"$HOME\" && exec \"$@\"", "sandbox"});
    argv.insert(argv.end(), limited.begin(), limited.end());
    return argv;
  }

  if (const auto owner = file_owner()) {
    // The kernel never applies RLIMIT_NPROC to uid 0, and bwrap maps the caller's uid: become
    // an ordinary user first so that the process limit holds.
    argv = {"setpriv", "--reuid=" + std::to_string(*owner), "--regid=" + std::to_string(*owner),
            "--clear-groups", "--"};
  }
  bwrap_spec spec;
  spec.program = bwrap_path_;
  for (const auto& [name, value] : environment()) spec.environment.emplace_back(name, value);
  spec.read_only = settings_.ro_paths;
  spec.writable = workdir_;
  spec.writable_at = mount_point;
  spec.tmp_bytes = std::min<int64_t>(settings_.max_file_mb, 1024) << 20;
  const auto sandboxed = bwrap_argv(spec, limited);
  argv.insert(argv.end(), sandboxed.begin(), sandboxed.end());
  return argv;
}

subprocess_result sandbox::run(const std::string& command,
                               std::chrono::milliseconds timeout) const {
  subprocess_options options;
  options.timeout = std::clamp(timeout, std::chrono::milliseconds{1}, settings_.max_timeout);
  options.max_output_bytes = settings_.output_limit_bytes + 1;
  if (!settings_.isolate) options.working_dir = workdir_;
  options.contain = lifeline_.get();
  auto result = run_subprocess(command_argv(command), options);
  // bwrap, setpriv and the namespace's init report their own failures as "name: ..." with
  // status 1 before the command starts.
  if (settings_.isolate && result.exited && result.exit_code == 1 && result.out.empty() &&
      (result.err.rfind("bwrap: ", 0) == 0 || result.err.rfind("setpriv: ", 0) == 0 ||
       result.err.rfind("cuda-agent-ns-init: ", 0) == 0)) {
    auto line = result.err.substr(0, result.err.find('\n'));
    throw sandbox_error{"sandbox: bubblewrap refused to start (" + line +
                        "); it needs unprivileged user namespaces (kernel.unprivileged_userns_clone"
                        "=1, no AppArmor restriction) or sandbox.run_as_uid = 0 when root"};
  }
  return result;
}

std::shared_ptr<background_process> sandbox::start(const std::string& command,
                                                   std::chrono::milliseconds timeout) const {
  // The process runs in the workdir's sandbox; its environment is set inside the argv.
  auto argv = command_argv(command);
  std::map<std::string, std::string> env{{"PATH", "/usr/local/bin:/usr/bin:/bin"}};
  if (!settings_.isolate) env = environment();
  return std::make_shared<background_process>(
      argv, env, std::clamp(timeout, std::chrono::milliseconds{1}, settings_.max_timeout),
      settings_.output_limit_bytes * 4, lifeline_.get());
}

void sandbox::stop() {
  if (lifeline_) lifeline_->cut();
}

void sandbox::probe() const {
  subprocess_result result;
  try {
    result = run("true", std::chrono::seconds{20});
  } catch (const std::system_error& e) {
    throw sandbox_error{std::string{"sandbox: "} + e.what() +
                        "; a sandboxed command needs a PID namespace of its own (root, or "
                        "unprivileged user namespaces)"};
  }
  if (!result.ok())
    throw sandbox_error{"sandbox: a trivial command failed (" + result.describe() + ": " +
                        result.err.substr(0, result.err.find('\n')) +
                        "); check sandbox.* settings and `bwrap --version`"};
}

}  // namespace cuda_agent
