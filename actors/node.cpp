#include "actors/node.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/episode_tools.hpp"
#include "actors/gpu_pool.hpp"
#include "actors/harness/cpu_reservation.hpp"
#include "actors/policy/policy_actor.hpp"
#include "actors/recorder.hpp"
#include "actors/sandbox/sandbox.hpp"
#include "actors/supervisor.hpp"
#include "messages/registry.hpp"

namespace cuda_agent {
namespace {

worker_pool_limits pool_limits(const settings& config, const char* workers_key, const node_services& node,
                               bool open_to_nodes) {
  worker_pool_limits limits;
  limits.workers = static_cast<int32_t>(config.get_int(workers_key));
  if (limits.workers == 0 && !open_to_nodes)
    throw std::runtime_error{fmt::format("{} = 0 leaves this process without workers; it may be 0 only for "
                                         "`rollout --listen`, whose nodes bring them",
                                         workers_key)};
  limits.open_to_nodes = open_to_nodes;
  limits.max_requeues = static_cast<int32_t>(config.get_int("cluster.max_requeues"));
  limits.recorder = node.recorder;
  limits.max_waiting = static_cast<std::size_t>(config.get_int("rollout.max_waiting_jobs"));
  limits.max_wait = std::chrono::seconds{config.get_int("episode.job_timeout_s")};
  limits.job_timeout = std::chrono::seconds{config.get_int("episode.job_timeout_s")};
  return limits;
}

}  // namespace

void node_services::stop() const {
  if (compiler.pool) stop_worker_pool(compiler);
  if (gpu.pool) stop_worker_pool(gpu);
  if (policy_supervisor) caf::anon_send_exit(policy_supervisor, caf::exit_reason::user_shutdown);
  if (recorder) caf::anon_send_exit(recorder, caf::exit_reason::user_shutdown);
}

void configure_actor_system(const settings& config, caf::actor_system_config& cfg) {
  register_message_types(cfg);
  add_recorder_types(cfg);
  if (const auto threads = config.get_int("actors.scheduler_threads"); threads > 0)
    cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
}

void hold_timing_cpus(const harness::harness_settings& settings, const std::string& device) {
  const auto& cpus = settings.timing_cpus;
  if (device != "cpu" || cpus.empty()) return;
  if (!harness::reserve_timing_cpus(cpus)) {
    spdlog::warn("harness: could not keep this process off core {} (harness.timing_cpus); CPU timings may be noisy",
                 fmt::join(cpus, ","));
    return;
  }
  spdlog::info("harness: core {} held for CPU timed runs; everything else runs beside it (harness.timing_cpus)",
               fmt::join(cpus, ","));
}

node_services start_node_services(caf::actor_system& system, const settings& config,
                                  const std::string& device, const std::filesystem::path& log_dir,
                                  bool with_policy, bool open_to_nodes) {
  node_services node;
  // Check the sandbox before anything starts: a missing bubblewrap is one clear line.
  const auto sandbox_config = sandbox_settings::from(config);
  const auto tool_limits = tools::tool_limits::from(config);
  if (!log_dir.empty())
    node.recorder = spawn_recorder(system, message_log::writer::open(log_writer_options(config, log_dir)));
  if (with_policy) {
    // The backend is made here, so that bad policy settings are one clear error at startup; a
    // restarted policy actor keeps it (and with it, e.g., the HTTP client's settings).
    const auto policy_settings = policy::policy_settings::from(config);
    std::shared_ptr<policy::policy_backend> backend = policy::make_policy_backend(policy_settings);
    const auto limits = policy::policy_limits::from(policy_settings);
    supervisor_options supervision;
    supervision.name = "policy";
    supervision.children.push_back(make_child("policy", [backend, limits](caf::actor_system& sys) {
      return policy::spawn_policy(sys, backend, limits);
    }));
    node.policy_supervisor = spawn_supervisor(system, std::move(supervision));
    node.policy_backend = backend;
  }
  node.compiler = spawn_compiler_pool(system, build::build_settings::from(config),
                                      pool_limits(config, "rollout.compiler_workers", node, open_to_nodes));
  const auto harness_config = harness::harness_settings::from(config);
  hold_timing_cpus(harness_config, device);
  node.gpu = spawn_gpu_pool(system, harness_config, device, pool_limits(config, "rollout.gpu_slots", node, open_to_nodes));
  node.make_tools = [&system, sandbox_config, tool_limits](const episode_config& episode) {
    sandbox box{episode.workdir, sandbox_config};
    box.prepare_workdir();
    auto session = std::make_shared<tools::tool_session>(std::move(box), tool_limits);
    return spawn_episode_tools(system, std::move(session));
  };
  return node;
}

}  // namespace cuda_agent
