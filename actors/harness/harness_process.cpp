#include "actors/harness/harness_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>

#include "actors/harness/cpu_reservation.hpp"
#include "actors/harness/judging.hpp"
#include "messages/codec.hpp"
#include "messages/reward.hpp"

extern char** environ;

namespace cuda_agent::harness {
namespace {

using clock_type = std::chrono::steady_clock;

// Why a job ended without a reply from the worker; the worker is gone when this is thrown.
struct worker_lost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

// Waits until fd is readable/writable or the deadline passes; false on timeout.
bool wait_fd(int fd, short events, clock_type::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 60000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) throw std::system_error(errno, std::generic_category(), "poll");
  }
}

void write_all(int fd, const std::string& data, clock_type::time_point deadline) {
  size_t done = 0;
  while (done < data.size()) {
    if (!wait_fd(fd, POLLOUT, deadline)) throw worker_lost{"timed out writing to the worker"};
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw worker_lost{"the worker closed its standard input"};
    done += static_cast<size_t>(n);
  }
}

void read_all(int fd, char* out, size_t size, clock_type::time_point deadline) {
  size_t done = 0;
  while (done < size) {
    if (!wait_fd(fd, POLLIN, deadline)) throw worker_lost{"timed out"};
    const ssize_t n = ::read(fd, out + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw worker_lost{"the worker closed its standard output"};
    done += static_cast<size_t>(n);
  }
}

std::chrono::milliseconds seconds_setting(const settings& config, const char* key) {
  return std::chrono::milliseconds{config.get_int(key) * 1000};
}

}  // namespace

harness_settings harness_settings::from(const settings& config) {
  harness_settings s;
  s.python = config.get_string("harness.python");
  const std::string& skills = config.get_string("harness.skills_dir");
  s.skills_dir = skills.empty() ? std::filesystem::path{CUDA_AGENT_SKILLS_DIR} : std::filesystem::path{skills};
  s.judging = judging_from(config);
  s.job_timeout = seconds_setting(config, "harness.job_timeout_s");
  s.baseline_cache_dir = config.get_string("harness.baseline_cache_dir");
  s.baseline_max_age_s = config.get_int("harness.baseline_max_age_s");
  try {
    // Resolved now, before this process holds the cores off itself (which would leave "auto" one).
    s.timing_cpus = harness::timing_cpus(config.get_string("harness.timing_cpus"), "cpu");
  } catch (const std::invalid_argument& e) {
    throw config_error{e.what()};
  }
  return s;
}

harness_process::harness_process(harness_settings settings, std::string device)
    : settings_(std::move(settings)), device_(std::move(device)) {}

harness_process::~harness_process() { stop(true); }

void harness_process::start() {
  int in_pipe[2], out_pipe[2];
  if (::pipe2(in_pipe, O_CLOEXEC) != 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0)
    throw std::system_error(errno, std::generic_category(), "pipe2");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // its own group: a kill takes its children
  posix_spawnattr_setpgroup(&attr, 0);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "PYTHONPATH=", 11) != 0) env_strings.emplace_back(*e);
  env_strings.push_back("PYTHONPATH=" + settings_.skills_dir.string());
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> args{settings_.python, "-m", "harness.worker"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, settings_.python.c_str(), &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(in_pipe[0]);
  ::close(out_pipe[1]);
  if (rc != 0) {
    ::close(in_pipe[1]);
    ::close(out_pipe[0]);
    throw std::runtime_error{"cannot start the harness worker '" + settings_.python +
                             "': " + std::strerror(rc) + "; set harness.python to a python with torch"};
  }
  pid_ = pid;
  to_worker_ = in_pipe[1];
  from_worker_ = out_pipe[0];
  ++restarts_;
  spdlog::debug("harness: worker {} started ({} -m harness.worker, device {})", pid_, settings_.python, device_);
}

void harness_process::stop(bool graceful) {
  if (pid_ <= 0) return;
  if (graceful) {
    try {
      call({{"op", "shutdown"}}, std::chrono::seconds{5});
    } catch (const std::exception&) {
    }
  }
  ::kill(-pid_, SIGKILL);  // the group: any candidate child still running goes with it
  int status = 0;
  ::waitpid(pid_, &status, 0);
  ::close(to_worker_);
  ::close(from_worker_);
  pid_ = -1;
  to_worker_ = from_worker_ = -1;
}

std::string harness_process::call(const nlohmann::json& request, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) start();
  const auto deadline = clock_type::now() + timeout;
  const std::vector<uint8_t> payload = nlohmann::json::to_msgpack(request);
  std::string frame(4, '\0');
  const uint32_t n = static_cast<uint32_t>(payload.size());
  frame[0] = static_cast<char>(n >> 24);
  frame[1] = static_cast<char>(n >> 16);
  frame[2] = static_cast<char>(n >> 8);
  frame[3] = static_cast<char>(n);
  frame.append(payload.begin(), payload.end());
  try {
    write_all(to_worker_, frame, deadline);
    unsigned char header[4];
    read_all(from_worker_, reinterpret_cast<char*>(header), 4, deadline);
    const uint32_t size = (uint32_t{header[0]} << 24) | (uint32_t{header[1]} << 16) |
                          (uint32_t{header[2]} << 8) | uint32_t{header[3]};
    std::string reply(size, '\0');
    read_all(from_worker_, reply.data(), size, deadline);
    return reply;
  } catch (const worker_lost& e) {
    // Dead or hung: either way it is replaced before the next job.
    std::string why = e.what();
    int status = 0;
    bool exited = false;
    if (why != "timed out") {  // it closed its end: give it a moment to finish dying
      for (int i = 0; i < 200 && !exited; ++i) {
        exited = ::waitpid(pid_, &status, WNOHANG) == pid_;
        if (!exited) ::usleep(10000);
      }
    }
    if (exited) {
      why = "the harness worker " + describe_status(status);
    } else {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      if (why == "timed out")
        why = "the harness worker did not answer within " + std::to_string(timeout.count()) +
              " ms and was killed";
    }
    ::close(to_worker_);
    ::close(from_worker_);
    pid_ = -1;
    to_worker_ = from_worker_ = -1;
    throw worker_lost{why};
  }
}

void harness_process::ping() {
  try {
    const std::string reply = call({{"op", "ping"}}, settings_.startup_timeout);
    const auto handle = detail::unpack_exactly_one(reply, "harness ping reply");
    const msgpack::object* ok = detail::find_field(handle.get(), "ok");
    if (!ok || !ok->as<bool>()) throw std::runtime_error{"the harness worker refused ping"};
  } catch (const worker_lost& e) {
    throw std::runtime_error{std::string{"harness worker unusable: "} + e.what() +
                             " (is harness.python a python with torch, and harness.skills_dir right?)"};
  }
}

void harness_process::check_task(const std::string& task_path, const std::string& device, bool reference) {
  nlohmann::json request{{"op", "task"},
                         {"task_path", std::filesystem::absolute(task_path).string()},
                         {"device", device.empty() ? device_ : device},
                         {"reference", reference}};
  try {
    if (pid_ <= 0) call({{"op", "ping"}}, settings_.startup_timeout);
    const std::string reply = call(request, settings_.job_timeout);
    const auto handle = detail::unpack_exactly_one(reply, "harness task reply");
    if (const msgpack::object* broken = detail::find_field(handle.get(), "task_error");
        broken != nullptr && broken->type == msgpack::type::STR)
      throw task_error{broken->as<std::string>()};
    const msgpack::object* ok = detail::find_field(handle.get(), "ok");
    if (!ok || !ok->as<bool>()) {
      const msgpack::object* error = detail::find_field(handle.get(), "error");
      throw std::runtime_error{"the harness worker could not check " + task_path + ": " +
                               (error ? error->as<std::string>() : std::string{"no error given"})};
    }
  } catch (const worker_lost& e) {
    throw std::runtime_error{"the harness worker could not check " + task_path + ": " + e.what()};
  }
}

evaluation harness_process::run_job(harness_job job, const judging_parameters& judging) {
  if (job.device.empty()) job.device = device_;
  job.baseline_cache_dir = settings_.baseline_cache_dir.empty()
                               ? std::string{}
                               : std::filesystem::absolute(settings_.baseline_cache_dir).string();
  job.baseline_max_age_s = static_cast<double>(settings_.baseline_max_age_s);
  if (job.device == "cpu") job.timing_cpus.assign(settings_.timing_cpus.begin(), settings_.timing_cpus.end());
  // One flat map of the job's and its judging's fields, named by their one declaration each.
  nlohmann::json request = msgpack_to_json(encode(job));
  request.update(msgpack_to_json(encode(judging)));
  const std::string& job_id = job.job_id;
  const std::string& episode_id = job.episode_id;

  evaluation result;
  result.record.job_id = result.verify.job_id = result.profile.job_id = job_id;
  result.record.episode_id = episode_id;
  result.record.compiled = true;
  try {
    // A fresh worker first imports torch: that start-up is not the job's time.
    if (pid_ <= 0) call({{"op", "ping"}}, settings_.startup_timeout);
    const std::string reply = call(request, settings_.job_timeout);
    const auto handle = detail::unpack_exactly_one(reply, "harness reply");
    const msgpack::object& map = handle.get();
    if (const msgpack::object* broken = detail::find_field(map, "task_error");
        broken != nullptr && broken->type == msgpack::type::STR)
      throw task_error{broken->as<std::string>()};
    if (const msgpack::object* refused = detail::find_field(map, "wire_error");
        refused != nullptr && refused->type == msgpack::type::STR)
      throw wire_error{"the harness worker refused job " + job_id + ": " + refused->as<std::string>()};
    const msgpack::object* ok = detail::find_field(map, "ok");
    if (!ok || !ok->as<bool>()) {
      const msgpack::object* error = detail::find_field(map, "error");
      result.record.error = "harness: " + (error ? error->as<std::string>() : std::string{"no error given"});
      result.verify.error = result.record.error;
      return result;
    }
    result.record = detail::find_field(map, "record")->as<reward_record>();
    result.verify = detail::find_field(map, "verify")->as<verify_result>();
    result.profile = detail::find_field(map, "profile")->as<profile_result>();
    if (const msgpack::object* phases = detail::find_field(map, "phases_ms");
        phases != nullptr && phases->type == msgpack::type::MAP)
      for (uint32_t i = 0; i < phases->via.map.size; ++i)
        result.phases_ms.emplace_back(phases->via.map.ptr[i].key.as<std::string>(),
                                      phases->via.map.ptr[i].val.as<double>());
  } catch (const worker_lost& e) {
    result.record.error = std::string{"harness: "} + e.what();
    result.verify.error = result.record.error;
    spdlog::warn("harness: job {}: {}; the worker will be replaced", job_id, e.what());
  }
  // The reward is decided here, by the one C++ definition; the worker's copy must agree. Speed
  // counts only where it was measured steadily.
  const bool correct = result.record.compiled && result.record.correct && result.record.violations.empty();
  const double t_new = result.record.timing.reliable ? result.record.t_new_ms : not_measured;
  const int32_t reward = milestone_reward(correct, t_new, result.record.t_eager_ms, result.record.t_compile_ms);
  if (reward != result.record.reward && result.record.error.find("harness:") != 0)
    spdlog::error("harness: job {}: worker reward {} disagrees with milestone_reward {}", job_id,
                  result.record.reward, reward);
  result.record.reward = reward;
  result.record.correct = correct;
  return result;
}

evaluation harness_process::evaluate(const evaluate_job& job) {
  return run_job({"evaluate", job.job_id, job.episode_id, job.task_path, job.solution_dir, job.module_path,
                  job.device},
                 job.judging);
}

verify_result harness_process::verify(const verify_job& job) {
  harness_job request{"verify", job.job_id, job.episode_id, job.task_path, job.solution_dir, job.module_path,
                      job.device};
  request.seed = job.seed;
  auto result = run_job(std::move(request), job.judging);
  result.verify.correct = result.record.correct;
  if (result.verify.error.empty()) result.verify.error = result.record.error;
  return result.verify;
}

profile_result harness_process::profile(const profile_job& job) {
  auto result = run_job({"profile", job.job_id, job.episode_id, job.task_path, job.solution_dir, job.module_path,
                         job.device},
                        job.judging);
  if (result.profile.error.empty()) result.profile.error = result.record.error;
  return result.profile;
}

}  // namespace cuda_agent::harness
