// The policy actor: answers each policy_request with the next turn (a policy_response), from
// whichever backend the settings name.
//
// It owns the policy's concurrency credit, like the pools own theirs: at most max_concurrency
// requests run at once, each on a detached actor of its own (backends block on HTTP or files
// and must not stall the scheduler's threads); up to max_queue more wait, in arrival order, for
// a grant (actors/credit_queue.hpp) for at most max_wait; one more is rejected at once with an
// error saying so, rather than growing the mailbox. A waiting request whose episode dies is
// dropped. A request whose backend fails is answered with an error carrying the backend's
// policy_error text (the episode ends with termination::infrastructure_failure).
//
// Given a recorder, it appends every policy_response it answers with to the message log
// (sender "policy", receiver "episode", the episode's id), which is what the replay backend
// reads back.
//
// Its interface is policy_actor (messages/interfaces.hpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include "actors/policy/policy_backend.hpp"
#include "messages/atoms.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent::policy {


struct policy_limits {
  int32_t max_concurrency = 64;
  int32_t max_queue = 1024;
  std::chrono::milliseconds max_wait{std::chrono::minutes{30}};

  static policy_limits from(const policy_settings& settings) {
    return {settings.max_concurrency, settings.max_queue, std::chrono::seconds{settings.max_wait_s}};
  }
};

policy_actor spawn_policy(caf::actor_system& system, std::shared_ptr<policy_backend> backend,
                          policy_limits limits, recorder_actor recorder = {});

// The backend the settings name, behind an actor with the settings' limits. Throws
// config_error, like make_policy_backend.
policy_actor spawn_policy(caf::actor_system& system, const policy_settings& settings,
                          recorder_actor recorder = {});

}  // namespace cuda_agent::policy
