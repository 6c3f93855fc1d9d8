#include "actors/supervisor.hpp"

#include <deque>
#include <map>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cuda_agent {
namespace {

using clock_type = std::chrono::steady_clock;

struct supervisor_state {
  supervisor_options options;
  std::map<std::string, caf::actor> running;  // by child name; absent once finished
  std::deque<clock_type::time_point> recent_restarts;
  int32_t restarts = 0;
  static inline const char* name = "supervisor";
};
using supervisor_self = supervisor_actor::stateful_pointer<supervisor_state>;

void start_child(supervisor_self self, const child_spec& spec) {
  auto child = caf::actor_cast<caf::actor>(spec.start(self->system()));
  self->monitor(child);
  self->state.running[spec.name] = std::move(child);
}

void stop_children(supervisor_self self) {
  for (auto& [name, child] : self->state.running)
    self->send_exit(child, caf::exit_reason::user_shutdown);
  self->state.running.clear();
}

// Spends one restart from the budget; false when the budget is exhausted.
bool spend_restart(supervisor_self self) {
  auto& st = self->state;
  const auto now = clock_type::now();
  while (!st.recent_restarts.empty() && now - st.recent_restarts.front() > st.options.budget.window)
    st.recent_restarts.pop_front();
  if (static_cast<int>(st.recent_restarts.size()) >= st.options.budget.max_restarts) return false;
  st.recent_restarts.push_back(now);
  ++st.restarts;
  return true;
}

void on_child_down(supervisor_self self, const caf::down_msg& down) {
  auto& st = self->state;
  auto it = std::find_if(st.running.begin(), st.running.end(),
                         [&](const auto& entry) { return entry.second.address() == down.source; });
  if (it == st.running.end()) return;  // an instance we stopped ourselves (one_for_all)
  const std::string name = it->first;
  if (!down.reason || down.reason == caf::exit_reason::normal) {
    st.running.erase(it);  // finished its work
    return;
  }
  const std::string why = self->system().render(down.reason);
  if (!spend_restart(self)) {
    const auto message = fmt::format(
        "{}: restart budget exhausted ({} restarts within {} ms); child '{}' died: {}",
        st.options.name, st.options.budget.max_restarts, st.options.budget.window.count(), name,
        why);
    spdlog::error("{}", message);
    stop_children(self);
    self->quit(caf::make_error(caf::sec::runtime_error, message));
    return;
  }
  spdlog::warn("{}: child '{}' died ({}); restarting ({})", st.options.name, name, why,
               st.options.strategy == restart_strategy::one_for_one ? "one_for_one"
                                                                     : "one_for_all");
  if (st.options.strategy == restart_strategy::one_for_one) {
    st.running.erase(it);
    for (const auto& spec : st.options.children)
      if (spec.name == name) start_child(self, spec);
    return;
  }
  // one_for_all: the siblings depend on the dead child, so they start over together. Children
  // that had finished normally stay finished.
  std::vector<std::string> names;
  for (const auto& [n, child] : st.running) names.push_back(n);
  stop_children(self);
  for (const auto& spec : st.options.children)
    if (std::find(names.begin(), names.end(), spec.name) != names.end()) start_child(self, spec);
}

supervisor_actor::behavior_type supervisor(supervisor_self self, supervisor_options options) {
  self->state.options = std::move(options);
  for (const auto& spec : self->state.options.children) start_child(self, spec);
  self->set_down_handler([=](caf::down_msg& down) { on_child_down(self, down); });
  // Stopping the supervisor stops the tree under it.
  self->set_exit_handler([=](caf::exit_msg& exit) {
    stop_children(self);
    self->quit(exit.reason);
  });
  return {
      [=](child_atom, const std::string& name) -> caf::result<caf::strong_actor_ptr> {
        auto it = self->state.running.find(name);
        if (it == self->state.running.end())
          return caf::make_error(caf::sec::runtime_error,
                                 fmt::format("{}: no running child named '{}'",
                                             self->state.options.name, name));
        return caf::actor_cast<caf::strong_actor_ptr>(it->second);
      },
      [=](restarts_atom) { return self->state.restarts; },
  };
}

}  // namespace

supervisor_actor spawn_supervisor(caf::actor_system& system, supervisor_options options) {
  return system.spawn(supervisor, std::move(options));
}

}  // namespace cuda_agent
