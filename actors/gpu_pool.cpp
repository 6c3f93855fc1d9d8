#include "actors/gpu_pool.hpp"

#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>

namespace cuda_agent {
namespace {

// A profiler slot. The harness process is created with the actor, so a restarted slot starts
// with a fresh worker; the worker itself is replaced by harness_process whenever it dies.
// A broken task, or a job the worker refused as not fitting the wire, is answered with an error,
// not a result: the episode then ends as an infrastructure failure and is not scored, rather
// than charging the candidate r = -1.
template <class Run>
auto unless_task_broken(Run run) -> caf::result<decltype(run())> {
  try {
    return run();
  } catch (const harness::task_error& e) {
    return caf::make_error(caf::sec::runtime_error, std::string{"the task is broken, not the candidate: "} + e.what());
  } catch (const harness::wire_error& e) {
    return caf::make_error(caf::sec::runtime_error, e.what());
  }
}

gpu_slot_actor::behavior_type profiler_slot(gpu_slot_actor::pointer, harness::harness_settings settings,
                                            std::string device) {
  auto harness = std::make_shared<harness::harness_process>(std::move(settings), std::move(device));
  return {
      [harness](const verify_job& job) { return unless_task_broken([&] { return harness->verify(job); }); },
      [harness](const profile_job& job) { return unless_task_broken([&] { return harness->profile(job); }); },
      [harness](const evaluate_job& job) {
        return unless_task_broken([&] { return harness->evaluate(job).record; });
      },
  };
}

}  // namespace

worker_pool<elastic_gpu_pool_actor> spawn_gpu_pool(caf::actor_system& system, harness::harness_settings settings,
                           std::string device, const worker_pool_limits& limits) {
  return spawn_worker_pool<verify_job, profile_job, evaluate_job>(
      system, "gpu pool", role::gpu, "gpu slots", limits,
      [device](int32_t i) { return fmt::format("{}-slot-{}", device, i); },
      [settings, device](caf::actor_system& sys) -> gpu_slot_actor {
        return sys.spawn<caf::detached>(profiler_slot, settings, device);
      });
}

}  // namespace cuda_agent
