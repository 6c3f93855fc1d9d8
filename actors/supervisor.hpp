// Supervision for long-lived actors. CAF 0.17 has no supervisor behaviour, so this is ours: a
// supervisor starts its children, monitors them, restarts one that dies abnormally (one_for_one)
// or all of them (one_for_all), and gives up when a restart budget over a sliding window is
// spent, quitting with an error that its own supervisor (or whoever monitors it) sees: escalation.
//
// Clients never keep a child's handle for long: a restarted child is a new actor. They ask the
// supervisor for the current one, `(child_atom, name) -> caf::actor`, and ask again when a
// request fails with request_receiver_down.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include "messages/atoms.hpp"

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
  std::function<caf::actor(caf::actor_system&)> start;
};

struct supervisor_options {
  std::string name = "supervisor";
  restart_strategy strategy = restart_strategy::one_for_one;
  restart_budget budget;
  std::vector<child_spec> children;
};

// A child that quits with exit_reason::normal has finished its work and is not restarted; any
// other exit reason is a crash. When the supervisor stops, for any reason, it stops its children.
// Understands (child_atom, name) -> caf::actor (an error for an unknown or finished child) and
// (restarts_atom) -> int, the number of restarts so far.
caf::actor spawn_supervisor(caf::actor_system& system, supervisor_options options);

}  // namespace cuda_agent
