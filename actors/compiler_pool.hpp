// The compiler pool: a bounded number of kernel builds at a time (job_pool.hpp), each run by a
// compiler worker, a detached actor calling the build library (kernels/build/build.hpp) under a
// one_for_one supervisor. Answers compile_job with compile_result.
//
// A build the candidate broke is a compile_result with ok = false and diagnostics; a build that
// could not run at all (the sandbox missing, the cache unwritable) is a caf::error: an
// infrastructure failure, which the rollout retries elsewhere instead of scoring.
#pragma once

#include <functional>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/job_pool.hpp"
#include "actors/supervisor.hpp"
#include "kernels/build/build.hpp"

namespace cuda_agent {

template <class Pool>
struct worker_pool {
  supervisor_actor supervisor;  // owns the workers; stop it to stop them
  Pool pool;                    // where jobs go
};

struct worker_pool_limits {
  int32_t workers = 2;
  std::size_t max_waiting = 256;
  std::chrono::milliseconds max_wait{std::chrono::minutes{30}};
  std::chrono::milliseconds job_timeout{std::chrono::minutes{10}};
  bool open_to_nodes = false;  // job_pool_options: nodes may add workers; jobs wait for them
  int32_t max_requeues = 3;
  recorder_actor recorder;     // requeues and late answers are logged here
};

// The shape of every pool: `limits.workers` workers under a one_for_one supervisor named
// `supervisor_name`, and the job_pool<Jobs...> named `pool_name` (`role` in the log) in front
// that hands them out, and takes nodes' workers too.
// Worker i is named worker_name(i); `start` spawns one, at first and again on every restart.
template <class... Jobs>
worker_pool<elastic_pool_actor<Jobs...>> spawn_worker_pool(
    caf::actor_system& system, const std::string& pool_name, const std::string& role,
    const std::string& supervisor_name,
    const worker_pool_limits& limits, const std::function<std::string(int32_t)>& worker_name,
    const std::function<job_worker_actor<Jobs...>(caf::actor_system&)>& start) {
  supervisor_options sup{supervisor_name, restart_strategy::one_for_one, {}, {}};
  job_pool_options options;
  options.name = pool_name;
  for (int32_t i = 0; i < limits.workers; ++i) {
    auto name = worker_name(i);
    sup.children.push_back(make_child(name, start));
    options.workers.push_back(std::move(name));
  }
  worker_pool<elastic_pool_actor<Jobs...>> result;
  result.supervisor = spawn_supervisor(system, std::move(sup));
  options.supervisor = result.supervisor;
  options.max_waiting = limits.max_waiting;
  options.max_wait = limits.max_wait;
  options.job_timeout = limits.job_timeout;
  options.open_to_nodes = limits.open_to_nodes;
  options.max_requeues = limits.max_requeues;
  options.recorder = limits.recorder;
  options.role = role;
  result.pool = spawn_job_pool<Jobs...>(system, std::move(options));
  return result;
}

worker_pool<elastic_compiler_pool_actor> spawn_compiler_pool(caf::actor_system& system,
                                                     build::build_settings settings,
                                                     const worker_pool_limits& limits);

// Stops a pool and its workers.
template <class Pool>
void stop_worker_pool(const worker_pool<Pool>& pool) {
  caf::anon_send_exit(pool.pool, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(pool.supervisor, caf::exit_reason::user_shutdown);
}

}  // namespace cuda_agent
