#include "actors/policy/policy_actor.hpp"

#include <utility>

#include <caf/all.hpp>
#include <spdlog/spdlog.h>

#include "actors/credit_queue.hpp"
#include "actors/recorder.hpp"
#include "messages/roles.hpp"

namespace cuda_agent::policy {
namespace {

struct waiting_request {
  policy_request request;
  caf::typed_response_promise<policy_response> promise;
};

// One backend call: answers one request on a thread of its own, then ends.
using backend_call_actor = caf::typed_actor<caf::replies_to<policy_request>::with<policy_response>>;

struct policy_state {
  std::shared_ptr<policy_backend> backend;
  policy_limits limits;
  recorder_actor recorder;  // may be unset
  credit_queue<waiting_request> queue;  // a credit is a request in flight to the backend
  int32_t peak_running = 0;
  int64_t rejected = 0;
  static inline const char* name = "policy";
};
using policy_self = policy_actor::stateful_pointer<policy_state>;

// One request on a thread of its own; the actor ends after answering.
backend_call_actor::behavior_type backend_call(backend_call_actor::pointer self,
                                              std::shared_ptr<policy_backend> backend) {
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

void start(policy_self self, std::size_t credit, waiting_request next);

// Starts waiting requests while credits are free, oldest first.
void dispatch(policy_self self) {
  auto& st = self->state;
  while (auto granted = st.queue.next()) start(self, granted->credit, std::move(granted->item));
}

void start(policy_self self, std::size_t credit, waiting_request next) {
  auto& st = self->state;
  st.peak_running = std::max(st.peak_running, static_cast<int32_t>(st.queue.in_use()));
  auto worker = self->spawn<caf::detached>(backend_call, st.backend);
  // Each answer frees a grant for the longest-waiting request.
  auto done = [self, credit] {
    self->state.queue.release(credit);
    dispatch(self);
  };
  auto promise = std::move(next.promise);
  self->request(worker, caf::infinite, std::move(next.request))
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

policy_actor::behavior_type policy_behavior(policy_self self, std::shared_ptr<policy_backend> backend,
                                           policy_limits limits, recorder_actor recorder) {
  auto& st = self->state;
  st.backend = std::move(backend);
  st.limits = limits;
  st.recorder = std::move(recorder);
  st.queue = credit_queue<waiting_request>{static_cast<std::size_t>(limits.max_concurrency),
                                           static_cast<std::size_t>(limits.max_queue)};
  // An episode that dies while its request waits gives up its place: no backend call is made
  // for an answer nobody will read.
  self->set_down_handler([self](caf::down_msg& down) { self->state.queue.drop_waiter(down.source); });
  return {
      [self](policy_request& request) -> caf::result<policy_response> {
        auto& st = self->state;
        if (auto credit = st.queue.acquire()) {
          auto promise = self->make_response_promise<policy_response>();
          start(self, *credit, {std::move(request), promise});
          return promise;
        }
        if (st.queue.waiting() >= st.queue.max_waiting()) {
          // Rejected before a promise exists: an error returned after make_response_promise
          // would be dropped and the requester would hang.
          ++st.rejected;
          return caf::make_error(
              caf::sec::runtime_error,
              "policy: rejected, " + std::to_string(st.queue.in_use()) + " requests running and " +
                  std::to_string(st.queue.waiting()) +
                  " waiting (policy.max_concurrency, policy.max_queue); retry later or raise them");
        }
        const auto waiter = caf::actor_cast<caf::actor_addr>(self->current_sender());
        auto promise = self->make_response_promise<policy_response>();
        const auto id = st.queue.push({std::move(request), promise}, waiter);
        watch_waiter(self, id, waiter, st.limits.max_wait);
        return promise;
      },
      [self](expire_atom, uint64_t id) {
        auto& st = self->state;
        auto expired = st.queue.expire(id);
        if (!expired) return;  // it started, or its episode died
        ++st.rejected;
        expired->promise.deliver(caf::make_error(
            caf::sec::runtime_error,
            "policy: waited " + std::to_string(st.limits.max_wait.count() / 1000) +
                " s for a grant while " + std::to_string(st.queue.in_use()) +
                " requests ran (policy.max_wait_s); raise policy.max_concurrency or policy.max_wait_s"));
      },
      [self](policy_stats_atom) {
        const auto& st = self->state;
        return policy_stats{static_cast<int32_t>(st.queue.in_use()),
                            static_cast<int32_t>(st.queue.waiting()), st.peak_running, st.rejected};
      },
  };
}

}  // namespace

policy_actor spawn_policy(caf::actor_system& system, std::shared_ptr<policy_backend> backend,
                          policy_limits limits, recorder_actor recorder) {
  return system.spawn(policy_behavior, std::move(backend), limits, std::move(recorder));
}

policy_actor spawn_policy(caf::actor_system& system, const policy_settings& settings,
                          recorder_actor recorder) {
  return spawn_policy(system, make_policy_backend(settings), policy_limits::from(settings),
                      std::move(recorder));
}

}  // namespace cuda_agent::policy
