// What the commands that run episodes share around the node's actors (actors/node.hpp): the
// corpus and its tasks, the device, the episode's base configuration, the rollout's log.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "actors/episode.hpp"
#include "actors/episode_workdir.hpp"
#include "actors/node.hpp"
#include "actors/message_log/format.hpp"
#include "config/settings.hpp"

namespace cuda_agent::cli {

// The corpus/ folder (corpus.dir, else the source tree's); a one-line usage_error where it holds
// no cuda_agent_corpus package.
std::filesystem::path corpus_root(const settings& config);

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
