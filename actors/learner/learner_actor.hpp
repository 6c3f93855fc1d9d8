// The learner actor: takes the trajectories of live rollouts as their episodes settle, in settle
// order, and trains on them a batch at a time while the rollouts go on.
//
//   (trajectory)  -> void             one settled episode; the batch_episodes-th of a batch
//                                     starts a step. Episodes that ended in an infrastructure
//                                     failure count towards their batch but are not trained on,
//                                     so that a batch always closes.
//   (flush_atom)  -> learner_update   trains what is left as a last, smaller batch (if any) and
//                                     answers the last update
//
// Each step's learner_update (step = batches consumed so far, weight_version = the version the
// new weights carry) goes to the actor that sent the batch's last trajectory (the rollout
// manager, whose admission waits on it: rollout_manager.hpp) and to the recorder as
// learner -> rollout. The step itself is the caller's train function; it runs in this actor's
// own thread (the actor is detached), so a step of minutes blocks no scheduler thread. A train
// function that throws stops the actor with the error; whoever monitors it (the rollout
// manager) ends the run, and the checkpoints written so far stand.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>


#include <caf/actor_system.hpp>

#include "messages/interfaces.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::learner {

// One step on a batch (the usable trajectories, never empty); returns the step's update with
// weight_version, samples and losses filled (step is the actor's).
using train_function = std::function<learner_update(std::vector<trajectory> batch)>;

learner_actor spawn_learner_actor(caf::actor_system& system, int32_t batch_episodes,
                                  train_function train, recorder_actor recorder);

}  // namespace cuda_agent::learner
