// The actors of one node, started from the settings, shared by `rollout` and `replay --live`:
// the recorder, the policy, the compiler pool, the GPU pool, and a factory for each episode's
// sandboxed tools.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/compiler_pool.hpp"
#include "actors/episode.hpp"
#include "actors/episode_workdir.hpp"
#include "actors/harness/harness_process.hpp"
#include "actors/message_log/format.hpp"
#include "actors/policy/policy_backend.hpp"
#include "config/settings.hpp"

namespace cuda_agent::cli {

struct node_services {
  caf::actor recorder;  // empty when the node records nothing
  // The policy actor runs under this supervisor as its child "policy" (empty when the caller
  // provides its own policy): a policy actor that crashes is restarted with the same backend,
  // and episodes ask the supervisor for the current one (rollout_services::policy_supervisor).
  caf::actor policy_supervisor;
  // The backend the policy actor serves (empty without a policy): `train --live` pushes new
  // weights into it (policy::torch_backend::update_weights).
  std::shared_ptr<policy::policy_backend> policy_backend;
  worker_pool compiler;
  worker_pool gpu;
  // Starts the tools of an episode whose directory is prepared (sandbox per sandbox.*).
  std::function<caf::actor(const episode_config&)> make_tools;

  void stop() const;  // stops every actor above
};

// Registers the protocol, the recorder's and the pools' types, and the scheduler threads.
void configure_actor_system(const settings& config, caf::actor_system_config& cfg);

// The corpus/ folder (corpus.dir, else the source tree's); a one-line usage_error where it holds
// no cuda_agent_corpus package.
std::filesystem::path corpus_root(const settings& config);

// On a CPU device, keeps this process (and all it starts later) off the cores that CPU timed runs
// hold (harness.timing_cpus, actors/harness/cpu_reservation.hpp), and says so in the log.
void hold_timing_cpus(const harness::harness_settings& settings, const std::string& device);

// The cores this process may run on when it is made; restore() gives them back to every thread
// of the process (threads started later inherit them). `train` runs offline steps on all its
// cores after a CPU rollout's hold_timing_cpus took the timing core away.
class cpu_affinity {
 public:
  cpu_affinity();
  void restore() const;

 private:
  std::vector<int> cpus_;
};

// `log_dir` empty: no recorder. `with_policy` false: no policy actor. Throws std::runtime_error
// (one line) when something cannot start (the log is locked, bubblewrap is missing, ...).
node_services start_node_services(caf::actor_system& system, const settings& config,
                                  const std::string& device, const std::filesystem::path& log_dir,
                                  bool with_policy);

// The tasks of corpus set `set_name` (a set under corpus_root()'s tasks/, or a directory with
// index.json) whose ids match one of the globs (all when there are none), in the set's order.
// A one-line usage_error for an unknown or empty set or globs that match nothing.
std::vector<task_spec> load_tasks(const settings& config, const std::string& set_name,
                                  const std::vector<std::string>& globs);

// "auto": cuda where the CUDA runtime lists a GPU, else cpu; any other name as it is.
std::string resolve_device(const std::string& device);

// A one-line usage_error where `device` is cuda and this host has no usable GPU (or this
// cuda-agent was built without CUDA), before anything starts.
void require_device(const std::string& device);

// With the openai policy backend, a one-line usage_error where nothing answers at policy.base_url
// (no episode would get a turn; each would end as an infrastructure failure after its retries).
void require_policy_server(const settings& config);

// Every task loads in a harness worker (Model, get_inputs, get_init_inputs), before anything is
// built; a broken one is a task_failure naming the task and its error (exit status 3).
void check_tasks(const settings& config, const std::vector<task_spec>& tasks);

// Where the workdir template and SKILL.md are taken from (this source tree).
workdir_sources default_workdir_sources();

// An episode configuration with the episode.* budgets, the device and SKILL.md as the prompt.
episode_config base_episode_config(const settings& config, const std::string& device,
                                   const std::string& policy_name);

// Every record of the message log a rollout wrote to `dir`, for `replay` and `rollout --resume`.
// A missing directory or a corrupt log is a one-line usage_error that begins with `context`.
std::vector<message_log::record> read_rollout_log(const std::filesystem::path& dir,
                                                 const std::string& context);

}  // namespace cuda_agent::cli
