// Supervision for long-lived actors. CAF 0.17 has no supervisor behaviour, so this is ours: a
// supervisor starts its children, monitors them, restarts one that dies abnormally (one_for_one)
// or all of them (one_for_all), and gives up when a restart budget over a sliding window is
// spent, quitting with an error that its own supervisor (or whoever monitors it) sees: escalation.
//
// Clients never keep a child's handle for long: a restarted child is a new actor. They ask the
// supervisor for the current one with request_child, and ask again when a request fails with
// request_receiver_down.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor_cast.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include "messages/atoms.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent {

enum class restart_strategy {
  one_for_one,  // restart only the child that died
  one_for_all,  // stop every other child and restart them all (children that depend on each other)
};

// At most `max_restarts` restarts within any `window`; one more escalates.
struct restart_budget {
  int max_restarts = 5;
  std::chrono::milliseconds window{std::chrono::minutes{1}};
};

struct child_spec {
  std::string name;
  // Spawns a fresh instance; called at start and on every restart.
  std::function<caf::strong_actor_ptr(caf::actor_system&)> start;
};

// A child named `name` that `spawn(system)` starts, whatever its interface.
template <class Spawn>
child_spec make_child(std::string name, Spawn spawn) {
  return {std::move(name), [spawn](caf::actor_system& system) {
            return caf::actor_cast<caf::strong_actor_ptr>(spawn(system));
          }};
}

struct supervisor_options {
  std::string name = "supervisor";
  restart_strategy strategy = restart_strategy::one_for_one;
  restart_budget budget;
  std::vector<child_spec> children;
};

// A child that quits with exit_reason::normal has finished its work and is not restarted; any
// other exit reason is a crash. When the supervisor stops, for any reason, it stops its children.
// Answers (child_atom, name) with the child's current instance (an error for an unknown or
// finished child) and (restarts_atom) with the number of restarts so far (supervisor_actor).
supervisor_actor spawn_supervisor(caf::actor_system& system, supervisor_options options);

// Asks `supervisor` for its child `name`, then calls on_child(Handle) with it as the interface
// Handle the caller knows it to have, or on_error(caf::error&).
template <class Handle, class SelfPointer, class OnChild, class OnError>
void request_child(SelfPointer self, const supervisor_actor& supervisor,
                   std::chrono::milliseconds timeout, const std::string& name, OnChild on_child,
                   OnError on_error) {
  self->request(supervisor, timeout, child_atom::value, name)
      .then([on_child](caf::strong_actor_ptr& child) mutable {
              on_child(caf::actor_cast<Handle>(std::move(child)));
            },
            [on_error](caf::error& error) mutable { on_error(error); });
}

}  // namespace cuda_agent
