// The cluster.* settings (config/README.md) that the coordinator, its nodes and `status` share,
// and the middleman (CAF's network layer) they configure.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>

#include <caf/actor_system_config.hpp>

#include "config/settings.hpp"

namespace cuda_agent::cluster {

struct cluster_settings {
  // Both must be equal on every node, or one side gives up a healthy connection (the
  // coordinator refuses a node whose values differ).
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds connection_timeout{5000};
  std::filesystem::path work_dir{"runs/cluster"};  // shipped jobs and modules
  int32_t max_requeues = 3;
  std::chrono::seconds rejoin{60};  // how long a node keeps trying to (re)join
  uint64_t max_bundle_bytes = uint64_t{512} << 20;

  static cluster_settings from(const settings& config);
};

// Loads CAF's middleman with the heartbeat settings; call before the actor system starts.
void configure_middleman(const cluster_settings& settings, caf::actor_system_config& cfg);

}  // namespace cuda_agent::cluster
