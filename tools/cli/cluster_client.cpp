#include "tools/cli/cluster_client.hpp"

#include <fstream>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#ifdef CUDA_AGENT_HAVE_TLS
#include <caf/openssl/all.hpp>
#endif
#include <fmt/format.h>

#include "actors/cluster/coordinator.hpp"
#include "actors/cluster/node_auth.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {

host_port parse_host_port(const std::string& option, const std::string& text) {
  host_port address;
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size())
    throw usage_error{fmt::format("{} {}: give HOST:PORT, e.g. 127.0.0.1:7070", option, text)};
  address.host = text.substr(0, colon);
  if (address.host.size() > 2 && address.host.front() == '[' && address.host.back() == ']')
    address.host = address.host.substr(1, address.host.size() - 2);
  const auto port_text = text.substr(colon + 1);
  int port = -1;
  try {
    std::size_t used = 0;
    port = std::stoi(port_text, &used);
    if (used != port_text.size()) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (port < 0 || port > 65535)
    throw usage_error{fmt::format("{} {}: the port must be a number from 0 to 65535", option, text)};
  address.port = static_cast<uint16_t>(port);
  return address;
}

std::string read_token(const std::string& token_file) {
  try {
    return cluster::read_token_file(token_file);
  } catch (const std::exception& e) {
    throw usage_error{e.what()};
  }
}

cluster_tls tls_of(const settings& config) {
  cluster_tls tls{config.get_string("cluster.tls_certificate"), config.get_string("cluster.tls_key"),
                  config.get_string("cluster.tls_ca")};
  const int set = !tls.certificate.empty() + !tls.key.empty() + !tls.ca.empty();
  if (set != 0 && set != 3)
    throw usage_error{"cluster.tls_certificate, cluster.tls_key and cluster.tls_ca go together: set all three "
                      "(PEM files) for TLS, or none"};
#ifndef CUDA_AGENT_HAVE_TLS
  if (set != 0)
    throw usage_error{"cluster.tls_*: this cuda-agent was built without TLS (libssl-dev was missing when it was "
                      "configured); install libssl-dev and build again, or leave cluster.tls_* empty"};
#endif
  for (const auto* file : {&tls.certificate, &tls.key, &tls.ca})
    if (!file->empty() && !std::ifstream{*file})
      throw usage_error{fmt::format("cluster.tls_*: cannot read {}", *file)};
  return tls;
}

void configure_network(const cluster::cluster_settings& cluster, const cluster_tls& tls,
                       caf::actor_system_config& cfg) {
  cluster::configure_middleman(cluster, cfg);
  if (!tls.enabled()) return;
#ifdef CUDA_AGENT_HAVE_TLS
  cfg.load<caf::openssl::manager>();
  cfg.openssl_certificate = tls.certificate;
  cfg.openssl_key = tls.key;
  cfg.openssl_cafile = tls.ca;
#endif
}

uint16_t publish_coordinator(caf::actor_system& system, const coordinator_actor& coordinator,
                             const host_port& address, const cluster_tls& tls) {
#ifdef CUDA_AGENT_HAVE_TLS
  auto port = tls.enabled() ? caf::openssl::publish(coordinator, address.port, address.host.c_str(), true)
                            : system.middleman().publish(coordinator, address.port, address.host.c_str(), true);
#else
  auto port = system.middleman().publish(coordinator, address.port, address.host.c_str(), true);
#endif
  if (!port)
    throw std::runtime_error{fmt::format("--listen {}:{}: cannot listen there: {}", address.host, address.port,
                                         system.render(port.error()))};
  return *port;
}

std::optional<coordinator_actor> connect_coordinator(caf::actor_system& system, const host_port& address,
                                                     const cluster_tls& tls, std::string& error) {
#ifdef CUDA_AGENT_HAVE_TLS
  auto coordinator = tls.enabled() ? caf::openssl::remote_actor<coordinator_actor>(system, address.host, address.port)
                                   : system.middleman().remote_actor<coordinator_actor>(address.host, address.port);
#else
  auto coordinator = system.middleman().remote_actor<coordinator_actor>(address.host, address.port);
#endif
  if (!coordinator) {
    error = system.render(coordinator.error());
    return std::nullopt;
  }
  return *coordinator;
}

std::string greet_coordinator(caf::scoped_actor& self, const coordinator_actor& coordinator,
                              const std::string& token, const std::string& caller) {
  const auto nonce = cluster::random_nonce();
  std::string challenge, failure;
  bool untrusted = false;
  self->request(coordinator, std::chrono::seconds{10}, hello_atom::value, caller, nonce)
      .receive(
          [&](const node_challenge& answer) {
            untrusted = !cluster::same_secret(answer.proof, cluster::coordinator_proof(token, nonce));
            if (untrusted)
              failure = "the coordinator did not prove that it holds the token: the --token-file differs "
                        "from the coordinator's, or this is not our coordinator";
            else
              challenge = answer.nonce;
          },
          [&](caf::error& e) { failure = "the coordinator did not answer hello: " + self->system().render(e); });
  if (untrusted) throw untrusted_coordinator{failure};
  if (!failure.empty()) throw std::runtime_error{failure};
  return challenge;
}

cluster_status request_cluster_status(caf::scoped_actor& self, const coordinator_actor& coordinator,
                                      const std::string& token) {
  const auto nonce = greet_coordinator(self, coordinator, token, cluster::status_caller);
  cluster_status status;
  std::string failure;
  self->request(coordinator, std::chrono::seconds{10}, status_atom::value, nonce,
                cluster::node_proof(token, nonce, cluster::status_caller))
      .receive([&](cluster_status& s) { status = std::move(s); },
               [&](caf::error& e) { failure = self->system().render(e); });
  if (!failure.empty()) throw std::runtime_error{"status: " + failure};
  return status;
}

}  // namespace cuda_agent::cli
