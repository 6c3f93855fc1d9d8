// A node's side of the cluster: the one actor the coordinator sends jobs to. Each job arrives with
// its files (file_bundle.hpp), which are unpacked into a directory of the job's own under
// work_dir/jobs (removed when it is answered), and goes to the node's own compiler pool or GPU
// pool, exactly as in a one-process rollout. A build answers with the built module's files.
//
// (finish) says the run is over: on_finish is called with the reason and the node's command
// exits.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <caf/actor_system.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent::cluster {

struct node_endpoint_options {
  std::filesystem::path work_dir;
  uint64_t max_bundle_bytes = uint64_t{512} << 20;
  std::chrono::milliseconds job_timeout{std::chrono::minutes{30}};
  compiler_pool_actor compiler;
  gpu_pool_actor gpu;
  std::function<void(const std::string& reason)> on_finish;
};

node_actor spawn_node_endpoint(caf::actor_system& system, node_endpoint_options options);

}  // namespace cuda_agent::cluster
