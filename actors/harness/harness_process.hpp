// The locked harness worker of one device, seen from C++: starts `python -m harness.worker` from
// the skills directory, speaks its framed msgpack protocol (4-byte big-endian length, then one
// map) over the worker's standard input and output, holds every job to a deadline, and replaces
// a worker that died or hung. Not an actor: a GPU profiler slot owns one and calls it from its
// own thread; `cuda-agent check` owns one for a single evaluation.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/settings.hpp"
#include "messages/harness_wire.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::harness {

// The [harness] section of the settings: what a profiler slot needs to run its worker. How a
// job is judged is not here: every job carries its judging_parameters (messages.hpp), and the
// slot uses those alone. `judging` is what the settings say, for the code that makes jobs.
struct harness_settings {
  std::string python = "python3";
  std::filesystem::path skills_dir;  // holds the `harness` package
  judging_parameters judging;
  std::chrono::milliseconds job_timeout{std::chrono::seconds{900}};  // a whole job, worker side
  std::chrono::milliseconds startup_timeout{std::chrono::seconds{120}};
  std::filesystem::path baseline_cache_dir = "runs/baselines";
  int64_t baseline_max_age_s = 86400;
  std::vector<int> timing_cpus;  // harness.timing_cpus for a CPU device, resolved (cpu_reservation.hpp)

  static harness_settings from(const settings& config);
};

// One evaluation: the reward record of `cuda-agent check`, and the verify and profile results it
// was made from.
struct evaluation {
  reward_record record;
  verify_result verify;
  profile_result profile;
  // Where the worker's time went, in the order the phases ran (skills/harness/evaluator.py,
  // PhaseLog); empty when the worker gave no reply.
  std::vector<std::pair<std::string, double>> phases_ms;
};

// The task is broken (the worker's `task_error`, skills/harness/evaluator.py TaskError): it does
// not import, lacks Model, get_inputs or get_init_inputs, or its reference does not run. Found
// before the candidate's code is loaded, so it is never the candidate's r = -1: the GPU pool
// answers the job with an error and the episode ends as an infrastructure failure.
struct task_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The worker refused a request as not fitting the harness wire (messages/harness_wire.hpp,
// skills/harness/wire.py): the two sides disagree, which no candidate can cause.
struct wire_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class harness_process {
 public:
  harness_process(harness_settings settings, std::string device);
  ~harness_process();
  harness_process(const harness_process&) = delete;
  harness_process& operator=(const harness_process&) = delete;

  // verify + profile + reward of a job (messages.hpp evaluate_job), judged by job.judging. Never
  // throws for anything the candidate did: a crash, a hang, a dead worker all end as reward -1
  // with the reason in record.error. Throws task_error where the task is broken and wire_error
  // where the worker refused the request (so do verify and profile).
  evaluation evaluate(const evaluate_job& job);
  verify_result verify(const verify_job& job);
  profile_result profile(const profile_job& job);

  // Starts the worker if needed and checks it answers; throws std::runtime_error if it cannot.
  void ping();

  // The task at task_path loads in the worker (Model, get_inputs, get_init_inputs) and, with
  // `reference`, its Model is built and runs on one input set on `device`. Throws task_error
  // naming what is wrong, std::runtime_error where the worker itself cannot run.
  void check_task(const std::string& task_path, const std::string& device, bool reference);

  pid_t worker_pid() const { return pid_; }
  int restarts() const { return restarts_; }

 private:
  evaluation run_job(harness_job request, const judging_parameters& judging);
  std::string call(const nlohmann::json& request, std::chrono::milliseconds timeout);
  void start();
  void stop(bool graceful);

  harness_settings settings_;
  std::string device_;
  pid_t pid_ = -1;
  int to_worker_ = -1;
  int from_worker_ = -1;
  int restarts_ = -1;  // the first start is not a restart
};

}  // namespace cuda_agent::harness
