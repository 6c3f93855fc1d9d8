// Timed stand-ins for everything an episode talks to, for `cuda-agent bench actors`: the policy,
// an episode's tools, compiler workers, GPU slots and the recorder. Each answers with a
// plausible result of the real message type after a fixed delay.
//
// The delay never blocks a thread: the stand-in keeps the response promise and sends itself a
// delayed wake-up message that delivers it. Thousands of episodes waiting on the "GPU" therefore
// cost the scheduler only their messages, as they would with the real pools.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include <caf/actor_system.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent::cli {

// Shared by every stand-in of one run; relaxed atomics, read once the run is over.
struct peer_counters {
  std::atomic<uint64_t> handled{0};   // requests and delayed wake-ups the stand-ins processed
  std::atomic<uint64_t> recorded{0};  // records the recorder stand-in received
};

// Answers policy_request with a policy_response after `delay`. Turns 1..steps each call two
// tools: Read (run by the episode's tools) and Bash `profile` (routed by the episode to the
// compiler pool, then the GPU pool). Turn steps + 1 calls none, which ends the episode.
policy_actor spawn_simulated_policy(caf::actor_system& system, int32_t steps,
                                  std::chrono::milliseconds delay,
                                  std::shared_ptr<peer_counters> counters);

// tool_request -> tool_result after `delay`: one episode's tools.
tools_actor spawn_simulated_tools(caf::actor_system& system, std::chrono::milliseconds delay,
                                 std::shared_ptr<peer_counters> counters);

// compile_job -> a successful compile_result after `delay`: a worker of a compiler pool.
compiler_actor spawn_simulated_compiler_worker(caf::actor_system& system,
                                           std::chrono::milliseconds delay,
                                           std::shared_ptr<peer_counters> counters);

// verify_job, profile_job, evaluate_job -> a correct, 2x faster candidate after `delay`: a slot
// of a GPU pool.
gpu_slot_actor spawn_simulated_gpu_slot(caf::actor_system& system, std::chrono::milliseconds delay,
                                    std::shared_ptr<peer_counters> counters);

// A recorder that counts records and drops them (no disk in the measurement).
recorder_actor spawn_counting_recorder(caf::actor_system& system,
                                   std::shared_ptr<peer_counters> counters);

}  // namespace cuda_agent::cli
