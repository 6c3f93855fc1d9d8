#include "actors/learner/learner_actor.hpp"

#include <utility>

#include <caf/all.hpp>

#include "actors/recorder.hpp"
#include "messages/roles.hpp"

namespace cuda_agent::learner {
namespace {

struct learner_state {
  int32_t batch_episodes = 1;
  train_function train;
  recorder_actor recorder;
  std::vector<trajectory> usable;  // this batch's trajectories that can be trained on
  int32_t settled = 0;             // this batch's episodes, usable or not
  int64_t steps = 0;
  learner_update last;
  static inline const char* name = "learner";
};
using learner_self = learner_actor::stateful_pointer<learner_state>;

// Consumes the open batch: one step where it holds something to train on, else an update that
// leaves the weights as they are. Either way the batch counts, so admission moves on.
learner_update close_batch(learner_self self) {
  auto& st = self->state;
  learner_update update;
  if (!st.usable.empty()) {
    update = st.train(std::exchange(st.usable, {}));
  } else {
    update = st.last;
    update.samples = 0;
  }
  update.step = ++st.steps;
  st.settled = 0;
  st.last = update;
  if (st.recorder)
    self->send(st.recorder, record_atom::value, make_record(role::learner, role::rollout, "", update));
  return update;
}

learner_actor::behavior_type learner_behavior(learner_self self, int32_t batch_episodes,
                                              train_function train, recorder_actor recorder) {
  auto& st = self->state;
  st.batch_episodes = std::max<int32_t>(1, batch_episodes);
  st.train = std::move(train);
  st.recorder = std::move(recorder);
  return {
      [=](trajectory& t) {
        auto& st = self->state;
        if (t.reason != termination::infrastructure_failure && !t.turns.empty()) st.usable.push_back(std::move(t));
        if (++st.settled < st.batch_episodes) return;
        auto to = caf::actor_cast<learner_listener_actor>(self->current_sender());
        const auto update = close_batch(self);
        if (to) self->send(to, update);
      },
      [=](flush_atom) -> learner_update {
        if (self->state.settled > 0) return close_batch(self);
        return self->state.last;
      },
  };
}

}  // namespace

learner_actor spawn_learner_actor(caf::actor_system& system, int32_t batch_episodes,
                                  train_function train, recorder_actor recorder) {
  return system.spawn<caf::detached>(learner_behavior, batch_episodes, std::move(train), std::move(recorder));
}

}  // namespace cuda_agent::learner
