// The compiler pool: a bounded number of kernel builds at a time (job_pool.hpp), each run by a
// compiler worker, a detached actor calling the build library (kernels/build/build.hpp) under a
// one_for_one supervisor. Answers compile_job with compile_result.
//
// A build the candidate broke is a compile_result with ok = false and diagnostics; a build that
// could not run at all (the sandbox missing, the cache unwritable) is a caf::error: an
// infrastructure failure, which the rollout retries elsewhere instead of scoring.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/job_pool.hpp"
#include "kernels/build/build.hpp"

namespace cuda_agent {

struct worker_pool {
  caf::actor supervisor;  // owns the workers; stop it to stop them
  caf::actor pool;        // where jobs go
};

struct worker_pool_limits {
  int32_t workers = 2;
  std::size_t max_waiting = 256;
  std::chrono::milliseconds max_wait{std::chrono::minutes{30}};
  std::chrono::milliseconds job_timeout{std::chrono::minutes{10}};
};

worker_pool spawn_compiler_pool(caf::actor_system& system, build::build_settings settings,
                                const worker_pool_limits& limits);

// Stops a pool and its workers.
void stop_worker_pool(const worker_pool& pool);

}  // namespace cuda_agent
