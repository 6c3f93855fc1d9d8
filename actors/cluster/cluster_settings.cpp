#include "actors/cluster/cluster_settings.hpp"

#include <caf/io/middleman.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent::cluster {

cluster_settings cluster_settings::from(const settings& config) {
  cluster_settings s;
  s.heartbeat = std::chrono::milliseconds{config.get_int("cluster.heartbeat_ms")};
  s.connection_timeout = std::chrono::milliseconds{config.get_int("cluster.connection_timeout_ms")};
  s.work_dir = config.get_string("cluster.work_dir");
  s.max_requeues = static_cast<int32_t>(config.get_int("cluster.max_requeues"));
  s.rejoin = std::chrono::seconds{config.get_int("cluster.rejoin_s")};
  s.max_bundle_bytes = static_cast<uint64_t>(config.get_int("cluster.max_bundle_mb")) << 20;
  return s;
}

void configure_middleman(const cluster_settings& settings, caf::actor_system_config& cfg) {
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", caf::timespan{settings.heartbeat});
  cfg.set("middleman.connection-timeout", caf::timespan{settings.connection_timeout});
  // Handles that cross the network inside messages.
  cfg.add_message_type<node_actor>("node_actor");
  cfg.add_message_type<coordinator_actor>("coordinator_actor");
}

}  // namespace cuda_agent::cluster
