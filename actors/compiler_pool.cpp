#include "actors/compiler_pool.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>

namespace cuda_agent {
namespace {

compiler_actor::behavior_type compiler_worker(compiler_actor::pointer, build::build_settings settings) {
  return {[settings](const compile_job& job) -> caf::result<compile_result> {
    build::build_request request{job.solution_dir, job.device, job.arch};
    const auto built = build::build_solution(settings, request);
    if (!built.error.empty())
      return caf::make_error(caf::sec::runtime_error, "the build could not run: " + built.error);
    return build::to_compile_result(job.job_id, built);
  }};
}

}  // namespace

worker_pool<elastic_compiler_pool_actor> spawn_compiler_pool(caf::actor_system& system,
                                                     build::build_settings settings,
                                                     const worker_pool_limits& limits) {
  return spawn_worker_pool<compile_job>(
      system, "compiler pool", role::compiler, "compiler workers", limits,
      [](int32_t i) { return fmt::format("compiler-{}", i); },
      [settings](caf::actor_system& sys) -> compiler_actor {
        // Builds block for seconds: a thread of their own, not the scheduler's.
        return sys.spawn<caf::detached>(compiler_worker, settings);
      });
}

}  // namespace cuda_agent
