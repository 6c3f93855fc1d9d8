// A node's workers as the coordinator's pools see them: a compiler worker or a GPU profiler slot
// (the same interfaces as the pool's own) that ships each job to the node with its files
// (file_bundle.hpp) and answers with the node's result. A module built on a node comes back and
// is kept in the coordinator's store under its content digest, so that a verify or profile job on
// any other node (or here) ships it from there.
//
// One remote worker stands for all of one node's workers of its kind: the pool gives it one
// credit per worker (add_workers). It monitors the node and quits with the node's exit reason
// when the node is lost; the pool sees it go and requeues what it held.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>

#include <caf/actor_system.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent::cluster {

struct shipping_settings {
  std::filesystem::path store;  // modules built on nodes: store/<digest>/module/...
  uint64_t max_bundle_bytes = uint64_t{512} << 20;
  std::chrono::milliseconds job_timeout{std::chrono::minutes{30}};
};

compiler_actor spawn_remote_compiler(caf::actor_system& system, node_actor node, std::string node_id,
                                     shipping_settings settings);
gpu_slot_actor spawn_remote_gpu_slot(caf::actor_system& system, node_actor node, std::string node_id,
                                     shipping_settings settings);

}  // namespace cuda_agent::cluster
