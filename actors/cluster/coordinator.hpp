// The coordinator: a rollout's membership, published on its --listen port. Nodes join it and
// offer their compiler workers and GPU profiler slots, which it adds to the rollout's two pools
// (as remote workers, remote_worker.hpp); when a node leaves or is lost (its connection closes
// or misses heartbeats), it takes the node's workers out of the pools, which requeue the jobs
// they held. Every join, leave, loss and refusal goes to the message log as node_join or
// node_leave (with the reason), from role::node to role::coordinator.
//
// Security: a node is admitted only once it proved the token (node_auth.hpp) against a nonce the
// coordinator issued for that one join; it proves the coordinator's knowledge of the token first.
// Membership is tied to the node's network identity: only the node itself may say it leaves.
// Exit messages from other processes are ignored, so a peer cannot stop the coordinator.
#pragma once

#include <chrono>
#include <string>

#include <caf/actor_system.hpp>

#include "actors/cluster/remote_worker.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent::cluster {

struct coordinator_options {
  std::string token;
  elastic_compiler_pool_actor compiler;
  elastic_gpu_pool_actor gpu;
  recorder_actor recorder;  // empty: membership is only printed
  shipping_settings shipping;
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds connection_timeout{5000};
};

coordinator_actor spawn_coordinator(caf::actor_system& system, coordinator_options options);

// The name `status` signs its proof with (node_proof(token, nonce, status_caller)).
inline constexpr const char* status_caller = "status";

}  // namespace cuda_agent::cluster
