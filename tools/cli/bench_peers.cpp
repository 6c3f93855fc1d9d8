#include "tools/cli/bench_peers.hpp"

#include <functional>
#include <string>
#include <unordered_map>
#include <utility>

#include <caf/all.hpp>

#include "actors/recorder.hpp"
#include "messages/atoms.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::cli {
namespace {


struct peer_state {
  std::shared_ptr<peer_counters> counters;
  std::chrono::milliseconds delay{0};
  uint64_t next_wake = 0;
  std::unordered_map<uint64_t, std::function<void()>> held;  // answers waiting for their wake-up
  static inline const char* name = "simulated_peer";
};
// A stand-in of interface Interface; it answers late through a timer to itself (wake_atom).
template <class Interface>
using peer_actor = typename Interface::template extend<caf::reacts_to<wake_atom, uint64_t>>;
template <class Interface>
using peer_self = typename peer_actor<Interface>::template stateful_pointer<peer_state>;

template <class Self>
void count_handled(Self self) {
  self->state.counters->handled.fetch_add(1, std::memory_order_relaxed);
}

template <class Self>
void init(Self self, std::chrono::milliseconds delay,
          std::shared_ptr<peer_counters> counters) {
  self->state.delay = delay;
  self->state.counters = std::move(counters);
}

// Answers the current request with `value`, `delay` from now.
template <class Result, class Self>
caf::result<Result> answer_later(Self self, Result value) {
  count_handled(self);
  auto& st = self->state;
  if (st.delay.count() <= 0) return value;
  auto promise = self->template make_response_promise<Result>();
  const uint64_t id = st.next_wake++;
  st.held.emplace(id, [promise, value = std::move(value)]() mutable {
    promise.deliver(std::move(value));
  });
  self->delayed_send(self, st.delay, wake_atom::value, id);
  return promise;
}

template <class Self>
auto wake_handler(Self self) {
  return [self](wake_atom, uint64_t id) {
    count_handled(self);
    auto& held = self->state.held;
    auto it = held.find(id);
    if (it == held.end()) return;
    auto deliver = std::move(it->second);
    held.erase(it);
    deliver();
  };
}

policy_response next_turn(const policy_request& request, int32_t steps) {
  policy_response r;
  r.episode_id = request.episode_id;
  r.turn = request.turn;
  r.token_ids = {101, 102, 103, 104};
  r.logprobs = {-0.1f, -0.2f, -0.3f, -0.4f};
  r.completion_tokens = 4;
  r.context_action = "none";
  if (request.turn > steps) {
    r.content = "ModelNew is correct and faster than torch.compile; done.";
    r.finish_reason = "stop";
    return r;
  }
  const auto turn = std::to_string(request.turn);
  r.content = "Reading the kernel, then profiling it.";
  r.finish_reason = "tool_calls";
  r.tool_calls = {{"read-" + turn, "Read", R"({"file_path": "model_new.py"})", ""},
                  {"profile-" + turn, "Bash", R"({"command": "profile"})", ""}};
  return r;
}

timing_stats timing(double median_ms) {
  timing_stats t;
  t.median_ms = t.mean_ms = t.min_ms = t.max_ms = t.p10_ms = t.p90_ms = median_ms;
  t.cv = 0.005;
  t.runs = 20;
  return t;
}

}  // namespace

policy_actor spawn_simulated_policy(caf::actor_system& system, int32_t steps,
                                    std::chrono::milliseconds delay,
                                    std::shared_ptr<peer_counters> counters) {
  using interface = peer_actor<policy_actor>;
  return system.spawn([=](peer_self<policy_actor> self) -> interface::behavior_type {
    init(self, delay, counters);
    return {
        [self, steps](const policy_request& request) {
          return answer_later(self, next_turn(request, steps));
        },
        [](policy_stats_atom) { return policy_stats{}; },
        [](expire_atom, uint64_t) {},  // it keeps no queue
        wake_handler(self),
    };
  });
}

tools_actor spawn_simulated_tools(caf::actor_system& system, std::chrono::milliseconds delay,
                                  std::shared_ptr<peer_counters> counters) {
  using interface = peer_actor<tools_actor>;
  return system.spawn([=](peer_self<tools_actor> self) -> interface::behavior_type {
    init(self, delay, counters);
    return {
        [self](const tool_request& request) {
          tool_result r{request.episode_id, request.call.call_id, request.call.tool,
                        "class ModelNew(nn.Module): ...\n", 0, false, false,
                        static_cast<double>(self->state.delay.count())};
          return answer_later(self, std::move(r));
        },
        wake_handler(self),
    };
  });
}

compiler_actor spawn_simulated_compiler_worker(caf::actor_system& system,
                                               std::chrono::milliseconds delay,
                                               std::shared_ptr<peer_counters> counters) {
  using interface = peer_actor<compiler_actor>;
  return system.spawn([=](peer_self<compiler_actor> self) -> interface::behavior_type {
    init(self, delay, counters);
    return {
        [self](const compile_job& job) {
          compile_result r;
          r.job_id = job.job_id;
          r.ok = true;
          r.module_path = "/bench/build-cache/cuda_extension.so";
          r.duration_ms = static_cast<double>(self->state.delay.count());
          return answer_later(self, std::move(r));
        },
        wake_handler(self),
    };
  });
}

gpu_slot_actor spawn_simulated_gpu_slot(caf::actor_system& system, std::chrono::milliseconds delay,
                                        std::shared_ptr<peer_counters> counters) {
  using interface = peer_actor<gpu_slot_actor>;
  return system.spawn([=](peer_self<gpu_slot_actor> self) -> interface::behavior_type {
    init(self, delay, counters);
    return {
        [self](const verify_job& job) {
          verify_result r;
          r.job_id = job.job_id;
          r.correct = true;
          r.duration_ms = static_cast<double>(self->state.delay.count());
          return answer_later(self, std::move(r));
        },
        [self](const profile_job& job) {
          profile_result r;
          r.job_id = job.job_id;
          r.eager = timing(1.0);
          r.compiled = timing(0.9);
          r.candidate = timing(0.45);
          return answer_later(self, std::move(r));
        },
        [self](const evaluate_job& job) {
          reward_record r;
          r.episode_id = job.episode_id;
          r.job_id = job.job_id;
          r.compiled = r.correct = true;
          r.reward = 3;
          r.t_eager_ms = 1.0;
          r.t_compile_ms = 0.9;
          r.t_new_ms = 0.45;
          r.speedup_eager = r.t_eager_ms / r.t_new_ms;
          r.speedup_compile = r.t_compile_ms / r.t_new_ms;
          return answer_later(self, std::move(r));
        },
        wake_handler(self),
    };
  });
}

recorder_actor spawn_counting_recorder(caf::actor_system& system,
                                       std::shared_ptr<peer_counters> counters) {
  return system.spawn([counters](recorder_actor::pointer) -> recorder_actor::behavior_type {
    return {[counters](record_atom, const recorded_message&) {
              counters->recorded.fetch_add(1, std::memory_order_relaxed);
            },
            [](flush_atom) {}};
  });
}

}  // namespace cuda_agent::cli
