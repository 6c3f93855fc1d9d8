// What `node`, `status` and `bench nodes` share on the calling side of a coordinator: its
// address, the connection, and the proof of the token in both directions (node_auth.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/scoped_actor.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent::cli {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

// "HOST:PORT" ("[::1]:7070" for IPv6); a usage_error naming `option` otherwise.
host_port parse_host_port(const std::string& option, const std::string& text);

// The coordinator at `address`, or an empty optional with `error` set (not reachable yet).
std::optional<coordinator_actor> connect_coordinator(caf::actor_system& system, const host_port& address,
                                                     std::string& error);

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
