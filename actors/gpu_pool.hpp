// The GPU pool: one profiler slot per GPU (or per CPU evaluator on a host without one), each a
// detached actor that owns a locked harness worker process (actors/harness/harness_process.hpp)
// and runs one verify, profile or evaluate job at a time. The job_pool in front of the slots
// hands out the credit; a one_for_one supervisor restarts a slot actor that dies.
//
// A candidate that crashes, hangs or exhausts memory kills only the harness worker process: the
// slot replaces it, the job ends with r = -1 and a reason, and the slot takes the next job.
#pragma once

#include "actors/compiler_pool.hpp"
#include "actors/harness/harness_process.hpp"

namespace cuda_agent {

// `device` is "cpu" or "cuda". Every slot's worker uses the default device of its process: on a
// host with several GPUs, run one node per GPU (CUDA_VISIBLE_DEVICES) with one slot each.
worker_pool<elastic_gpu_pool_actor> spawn_gpu_pool(caf::actor_system& system, harness::harness_settings settings,
                           std::string device, const worker_pool_limits& limits);

}  // namespace cuda_agent
