// The network side of `rollout --listen`, `node`, `status` and `bench nodes`: addresses, the
// middleman with or without TLS (cluster.tls_*), publishing the coordinator and connecting to it,
// and the proof of the token in both directions (actors/cluster/node_auth.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "actors/cluster/cluster_settings.hpp"
#include "config/settings.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent::cli {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" ("[::1]:7070" for IPv6); a usage_error naming `option` otherwise.
host_port parse_host_port(const std::string& option, const std::string& text);

// The token in --token-file; a usage_error (one line, exit status 2) when it cannot serve.
std::string read_token(const std::string& token_file);

// TLS between a coordinator and its nodes: PEM files of this process's certificate and key and of
// the authority that signed every peer's certificate. All three or none (no TLS).
struct cluster_tls {
  std::string certificate, key, ca;
  bool enabled() const { return !certificate.empty(); }
};

// cluster.tls_*; a usage_error when only some are set or a file cannot be read.
cluster_tls tls_of(const settings& config);

// Loads the middleman with the heartbeat settings and, with TLS, CAF's OpenSSL module with the
// files: call before the actor system starts.
void configure_network(const cluster::cluster_settings& cluster, const cluster_tls& tls,
                       caf::actor_system_config& cfg);

// Publishes the coordinator on `address` (port 0: any free one); the port, or a runtime_error.
uint16_t publish_coordinator(caf::actor_system& system, const coordinator_actor& coordinator,
                             const host_port& address, const cluster_tls& tls);

// The coordinator at `address`, or an empty optional with `error` set (not reachable yet).
std::optional<coordinator_actor> connect_coordinator(caf::actor_system& system, const host_port& address,
                                                     const cluster_tls& tls, std::string& error);

// The coordinator answered hello without a valid proof of the token.
struct untrusted_coordinator : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Says hello with a fresh nonce and checks the coordinator's proof: the nonce to sign next.
// Throws untrusted_coordinator when its proof does not match the token, std::runtime_error (one
// line) when it does not answer.
std::string greet_coordinator(caf::scoped_actor& self, const coordinator_actor& coordinator,
                              const std::string& token, const std::string& caller);

// One authenticated (status) request.
cluster_status request_cluster_status(caf::scoped_actor& self, const coordinator_actor& coordinator,
                                      const std::string& token);

}  // namespace cuda_agent::cli
