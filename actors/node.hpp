// The composition root of a cuda-agent process: the actors one node runs, started from the
// settings. `rollout`, `replay --live` and `train --live` call it; the CLI only parses flags.
//
//   recorder            the message log (when the node records one)
//   policy supervisor   └ "policy": the policy actor, restarted with the same backend if it dies
//   compiler pool       compiler workers under their supervisor (compiler_pool.hpp)
//   GPU pool            profiler slots under their supervisor (gpu_pool.hpp)
//   make_tools          each episode's sandboxed tools, started when its directory is ready
//
// The rollout manager (rollout_manager.hpp) is started by its command on top of these, with the
// plan only that command knows.
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "actors/compiler_pool.hpp"
#include "actors/episode.hpp"
#include "actors/harness/harness_process.hpp"
#include "actors/policy/policy_backend.hpp"
#include "config/settings.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent {

struct node_services {
  recorder_actor recorder;  // empty when the node records nothing
  // The policy actor runs under this supervisor as its child "policy" (empty when the caller
  // provides its own policy): a policy actor that crashes is restarted with the same backend,
  // and episodes ask the supervisor for the current one (rollout_services::policy_supervisor).
  supervisor_actor policy_supervisor;
  // The backend the policy actor serves (empty without a policy): `train --live` pushes new
  // weights into it (policy::torch_backend::update_weights).
  std::shared_ptr<policy::policy_backend> policy_backend;
  worker_pool<elastic_compiler_pool_actor> compiler;
  worker_pool<elastic_gpu_pool_actor> gpu;
  // Starts the tools of an episode whose directory is prepared (sandbox per sandbox.*).
  std::function<tools_actor(const episode_config&)> make_tools;

  void stop() const;  // stops every actor above
};

// What a node's actor system needs before it starts: the protocol's message types, the
// recorder's, and actors.scheduler_threads.
void configure_actor_system(const settings& config, caf::actor_system_config& cfg);

// On a CPU device, keeps this process (and all it starts later) off the cores that CPU timed runs
// hold (harness.timing_cpus, actors/harness/cpu_reservation.hpp), and says so in the log.
void hold_timing_cpus(const harness::harness_settings& settings, const std::string& device);

// Starts the node's actors. `log_dir` empty: no recorder. `with_policy` false: no policy actor.
// `open_to_nodes`: the pools also take other nodes' workers (`rollout --listen`), and may have
// none of their own.
// Throws std::runtime_error (one line) when something cannot start (the log is locked,
// bubblewrap is missing, the policy settings are wrong, ...), before any episode runs.
node_services start_node_services(caf::actor_system& system, const settings& config,
                                  const std::string& device, const std::filesystem::path& log_dir,
                                  bool with_policy, bool open_to_nodes = false);

}  // namespace cuda_agent
