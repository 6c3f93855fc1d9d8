#include "actors/cluster/coordinator.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/node_auth.hpp"
#include "messages/roles.hpp"

namespace cuda_agent::cluster {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t max_pending_nonces = 1024;
constexpr auto nonce_lifetime = std::chrono::seconds{30};
constexpr int32_t max_workers_per_kind = 4096;

struct member {
  node_join info;
  node_actor node;
  compiler_actor compiler;  // the node's workers, as the compiler pool sees them
  gpu_slot_actor gpu;
};

struct coordinator_state {
  coordinator_options options;
  struct issued_nonce {
    clock_type::time_point expiry;
    std::string caller;  // the name the hello gave
  };
  std::map<std::string, issued_nonce> nonces;  // issued and not yet used
  std::map<std::string, member> members;                 // by node id
  std::vector<std::string> joined;                       // node ids in joining order
  clock_type::time_point started = clock_type::now();
  int64_t refused = 0;
  int64_t lost = 0;
  static inline const char* name = "coordinator";
};

using coordinator_self = coordinator_actor::stateful_pointer<coordinator_state>;

bool valid_node_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
         });
}

template <class Event>
void record_membership(coordinator_self self, const Event& event) {
  if (self->state.options.recorder)
    self->send(self->state.options.recorder, record_atom::value, make_record(role::node, role::coordinator, "", event));
}

// Takes a nonce out of the issued set; false when it was never issued, used or expired.
bool redeem_nonce(coordinator_self self, const std::string& nonce) {
  auto& nonces = self->state.nonces;
  const auto it = nonces.find(nonce);
  if (it == nonces.end()) return false;
  const bool fresh = it->second.expiry > clock_type::now();
  nonces.erase(it);
  return fresh;
}

caf::error refuse(coordinator_self self, const std::string& node_id, const std::string& why) {
  ++self->state.refused;
  spdlog::warn("coordinator: refused node '{}': {}", node_id, why);
  record_membership(self, node_leave{node_id, "refused: " + why});
  return caf::make_error(caf::sec::runtime_error, "refused: " + why);
}

// Takes a node's workers out of both pools (their jobs go back to the queues) and forgets it.
void remove_member(coordinator_self self, const std::string& node_id, const std::string& reason) {
  auto& st = self->state;
  const auto it = st.members.find(node_id);
  if (it == st.members.end()) return;
  self->send(st.options.compiler, drop_node_atom::value, node_id, reason);
  self->send(st.options.gpu, drop_node_atom::value, node_id, reason);
  self->send_exit(it->second.compiler, caf::exit_reason::user_shutdown);
  self->send_exit(it->second.gpu, caf::exit_reason::user_shutdown);
  self->demonitor(it->second.node.address());
  st.members.erase(it);
  st.joined.erase(std::remove(st.joined.begin(), st.joined.end(), node_id), st.joined.end());
  spdlog::info("coordinator: node {} removed ({})", node_id, reason);
  record_membership(self, node_leave{node_id, reason});
}

caf::result<std::string> admit(coordinator_self self, const node_offer& offer, const node_actor& node) {
  auto& st = self->state;
  const auto& id = offer.node.node_id;
  if (!redeem_nonce(self, offer.nonce)) return refuse(self, id, "unknown, used or expired nonce; say hello first");
  if (!same_secret(offer.proof, node_proof(st.options.token, offer.nonce, id)))
    return refuse(self, id, "wrong token (the node's --token-file differs from the coordinator's)");
  if (!valid_node_id(id)) return refuse(self, id, "a node name is 1 to 64 characters of A-Z a-z 0-9 . _ -");
  if (!node) return refuse(self, id, "the offer came without the node's handle");
  if (offer.heartbeat_ms != st.options.heartbeat.count() ||
      offer.connection_timeout_ms != st.options.connection_timeout.count())
    return refuse(self, id,
                  fmt::format("heartbeat settings differ (node {} / {} ms, coordinator {} / {} ms); set "
                              "cluster.heartbeat_ms and cluster.connection_timeout_ms alike on every node",
                              offer.heartbeat_ms, offer.connection_timeout_ms, st.options.heartbeat.count(),
                              st.options.connection_timeout.count()));
  const auto& info = offer.node;
  if (info.gpu_slots < 0 || info.compiler_workers < 0 || info.gpu_slots > max_workers_per_kind ||
      info.compiler_workers > max_workers_per_kind || info.gpu_slots + info.compiler_workers == 0)
    return refuse(self, id, fmt::format("it offers {} GPU slots and {} compiler workers; offer 1 to {} of either",
                                        info.gpu_slots, info.compiler_workers, max_workers_per_kind));
  // The same node again (restarted, or back after a partition before its loss was noticed):
  // what the old one held is requeued first.
  if (st.members.count(id)) remove_member(self, id, "left: rejoined");
  member m;
  m.info = info;
  m.node = node;
  if (info.compiler_workers > 0) {
    m.compiler = spawn_remote_compiler(self->system(), node, id, st.options.shipping);
    self->send(st.options.compiler, add_workers_atom::value, id, m.compiler, info.compiler_workers);
  }
  if (info.gpu_slots > 0) {
    m.gpu = spawn_remote_gpu_slot(self->system(), node, id, st.options.shipping);
    self->send(st.options.gpu, add_workers_atom::value, id, m.gpu, info.gpu_slots);
  }
  self->monitor(node);
  st.members[id] = std::move(m);
  st.joined.push_back(id);
  spdlog::info("coordinator: node {} ({}) joined with {} GPU slot(s) and {} compiler worker(s)", id, info.host,
               info.gpu_slots, info.compiler_workers);
  record_membership(self, info);
  return fmt::format("joined as {}: {} GPU slot(s), {} compiler worker(s)", id, info.gpu_slots, info.compiler_workers);
}

}  // namespace

coordinator_actor spawn_coordinator(caf::actor_system& system, coordinator_options options) {
  return system.spawn([options](coordinator_self self) mutable -> coordinator_actor::behavior_type {
    self->state.options = std::move(options);
    // Only this process may stop the coordinator: an exit message from a peer is ignored.
    self->set_exit_handler([self](caf::exit_msg& msg) {
      if (msg.source && msg.source.node() != self->node()) {
        spdlog::warn("coordinator: ignored an exit message from another process");
        return;
      }
      self->quit(msg.reason);
    });
    self->set_down_handler([self](caf::down_msg& down) {
      auto& st = self->state;
      for (const auto& [id, m] : st.members)
        if (m.node.address() == down.source) {
          ++st.lost;
          const auto node_id = id;  // remove_member erases it
          remove_member(self, node_id, "lost: " + self->system().render(down.reason));
          return;
        }
    });
    return {
        [self](hello_atom, const std::string& node_id, const std::string& node_nonce) -> caf::result<node_challenge> {
          auto& nonces = self->state.nonces;
          const auto now = clock_type::now();
          for (auto it = nonces.begin(); it != nonces.end();)
            it = it->second.expiry <= now ? nonces.erase(it) : std::next(it);
          if (nonces.size() >= max_pending_nonces)
            return caf::make_error(caf::sec::runtime_error, "too many joins under way; try again shortly");
          if (node_nonce.size() < 32)
            return caf::make_error(caf::sec::runtime_error, "a hello needs a nonce of at least 32 characters");
          node_challenge challenge{random_nonce(), coordinator_proof(self->state.options.token, node_nonce)};
          nonces[challenge.nonce] = {now + nonce_lifetime, node_id};
          spdlog::debug("coordinator: hello from {}", node_id);
          return challenge;
        },
        [self](join_atom, const node_offer& offer, const node_actor& node) { return admit(self, offer, node); },
        [self](leave_atom, const std::string& node_id, const std::string& reason) {
          auto& st = self->state;
          const auto it = st.members.find(node_id);
          if (it == st.members.end()) {
            // A node that said hello and then found that our proof does not match its token
            // gives up joining: a refusal, once per hello.
            const auto hello = std::find_if(st.nonces.begin(), st.nonces.end(),
                                            [&](const auto& n) { return n.second.caller == node_id; });
            if (hello == st.nonces.end()) return;
            st.nonces.erase(hello);
            refuse(self, node_id, reason.substr(0, 200));
            return;
          }
          // Only the node itself may say it leaves.
          if (!self->current_sender() || self->current_sender()->node() != it->second.node.node()) return;
          remove_member(self, node_id, "left: " + reason.substr(0, 200));
        },
        [self](status_atom, const std::string& nonce, const std::string& proof) -> caf::result<cluster_status> {
          auto& st = self->state;
          if (!redeem_nonce(self, nonce) || !same_secret(proof, node_proof(st.options.token, nonce, status_caller)))
            return caf::make_error(caf::sec::runtime_error, "refused: status needs the cluster's token (--token-file)");
          auto status = std::make_shared<cluster_status>();
          for (const auto& id : st.joined) status->nodes.push_back(st.members[id].info);
          status->uptime_s = std::chrono::duration<double>(clock_type::now() - st.started).count();
          status->refused = st.refused;
          status->lost = st.lost;
          auto promise = self->make_response_promise<cluster_status>();
          self->request(st.options.compiler, std::chrono::seconds{5}, pool_stats_atom::value)
              .then(
                  [=](pool_stats& compiler) mutable {
                    status->compiler = std::move(compiler);
                    self->request(self->state.options.gpu, std::chrono::seconds{5}, pool_stats_atom::value)
                        .then(
                            [=](pool_stats& gpu) mutable {
                              status->gpu = std::move(gpu);
                              promise.deliver(std::move(*status));
                            },
                            [=](caf::error& e) mutable { promise.deliver(std::move(e)); });
                  },
                  [=](caf::error& e) mutable { promise.deliver(std::move(e)); });
          return promise;
        },
        [self](finish_atom, const std::string& reason) -> caf::result<int32_t> {
          auto& st = self->state;
          if (!self->current_sender() || self->current_sender()->node() != self->node())
            return caf::make_error(caf::sec::runtime_error, "refused: only the coordinator's own process ends the run");
          auto promise = self->make_response_promise<int32_t>();
          if (st.members.empty()) {
            promise.deliver(int32_t{0});
            return promise;
          }
          struct tally {
            int32_t asked = 0, answered = 0, acknowledged = 0;
          };
          auto count = std::make_shared<tally>();
          count->asked = static_cast<int32_t>(st.members.size());
          auto settle = [count, promise](bool ok) mutable {
            count->acknowledged += ok;
            if (++count->answered == count->asked) promise.deliver(count->acknowledged);
          };
          for (const auto& [id, m] : st.members)
            self->request(m.node, std::chrono::seconds{5}, finish_atom::value, reason)
                .then([settle](bool) mutable { settle(true); }, [settle](caf::error&) mutable { settle(false); });
          return promise;
        }};
  });
}

}  // namespace cuda_agent::cluster
