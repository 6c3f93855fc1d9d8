#include "actors/policy/policy_actor.hpp"

#include <deque>
#include <utility>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/recorder.hpp"
#include "messages/roles.hpp"

namespace cuda_agent::policy {
namespace {

struct waiting_request {
  policy_request request;
  caf::response_promise promise;
};

struct policy_state {
  std::shared_ptr<policy_backend> backend;
  policy_limits limits;
  caf::actor recorder;  // may be unset
  int32_t running = 0;
  int32_t peak_running = 0;
  int64_t rejected = 0;
  std::deque<waiting_request> waiting;
  static inline const char* name = "policy";
};
using policy_actor = caf::stateful_actor<policy_state>;

// One request on a thread of its own; the actor ends after answering.
caf::behavior backend_call(caf::event_based_actor* self, std::shared_ptr<policy_backend> backend) {
  return {[self, backend](const policy_request& request) -> caf::result<policy_response> {
    auto answer = [&]() -> caf::result<policy_response> {
      try {
        return backend->complete(request);
      } catch (const std::exception& e) {
        spdlog::warn("policy: episode {} turn {}: {}", request.episode_id, request.turn, e.what());
        return caf::make_error(caf::sec::runtime_error, std::string{e.what()});
      }
    }();
    self->quit();
    return answer;
  }};
}

void start(policy_actor* self, policy_request request, caf::response_promise promise) {
  auto& st = self->state;
  ++st.running;
  st.peak_running = std::max(st.peak_running, st.running);
  auto worker = self->spawn<caf::detached>(backend_call, st.backend);
  // Each answer frees a grant for the longest-waiting request.
  auto done = [self] {
    auto& s = self->state;
    --s.running;
    if (!s.waiting.empty() && s.running < s.limits.max_concurrency) {
      auto next = std::move(s.waiting.front());
      s.waiting.pop_front();
      start(self, std::move(next.request), std::move(next.promise));
    }
  };
  self->request(worker, caf::infinite, std::move(request))
      .then(
          [self, promise, done](policy_response& response) mutable {
            if (self->state.recorder)
              self->send(self->state.recorder, record_atom::value,
                         make_record(role::policy, role::episode, response.episode_id, response));
            promise.deliver(std::move(response));
            done();
          },
          [promise, done](caf::error& error) mutable {
            promise.deliver(std::move(error));
            done();
          });
}

caf::behavior policy_behavior(policy_actor* self, std::shared_ptr<policy_backend> backend,
                              policy_limits limits, caf::actor recorder) {
  self->state.backend = std::move(backend);
  self->state.limits = limits;
  self->state.recorder = std::move(recorder);
  return {
      [self](policy_request& request) -> caf::result<policy_response> {
        auto& st = self->state;
        const bool free = st.running < st.limits.max_concurrency;
        if (!free && st.waiting.size() >= static_cast<size_t>(st.limits.max_queue)) {
          // Rejected before a promise exists: an error returned after make_response_promise
          // would be dropped and the requester would hang.
          ++st.rejected;
          return caf::make_error(
              caf::sec::runtime_error,
              "policy: rejected, " + std::to_string(st.running) + " requests running and " +
                  std::to_string(st.waiting.size()) +
                  " waiting (policy.max_concurrency, policy.max_queue); retry later or raise them");
        }
        auto promise = self->make_response_promise();
        if (free)
          start(self, std::move(request), promise);
        else
          st.waiting.push_back({std::move(request), promise});
        return promise;
      },
      [self](policy_stats_atom) {
        const auto& st = self->state;
        return policy_stats{st.running, static_cast<int32_t>(st.waiting.size()), st.peak_running,
                            st.rejected};
      },
  };
}

}  // namespace

caf::actor spawn_policy(caf::actor_system& system, std::shared_ptr<policy_backend> backend,
                        policy_limits limits, caf::actor recorder) {
  return system.spawn(policy_behavior, std::move(backend), limits, std::move(recorder));
}

caf::actor spawn_policy(caf::actor_system& system, const policy_settings& settings,
                        caf::actor recorder) {
  return spawn_policy(system, make_policy_backend(settings), policy_limits::from(settings),
                      std::move(recorder));
}

}  // namespace cuda_agent::policy
