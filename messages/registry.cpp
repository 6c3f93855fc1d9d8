#include "messages/registry.hpp"

#include <caf/actor_system_config.hpp>

namespace cuda_agent {
namespace {

template <class... Ts>
void add_all(caf::actor_system_config& cfg, caf::detail::type_list<Ts...>) {
  (cfg.add_message_type<Ts>(type_name_of<Ts>()), ...);
}

template <class... Ts>
std::vector<std::string> names_of(caf::detail::type_list<Ts...>) {
  return {type_name_of<Ts>()...};
}

}  // namespace

void register_message_types(caf::actor_system_config& cfg) {
  add_all(cfg, all_message_types{});
}

const std::vector<std::string>& message_type_names() {
  static const auto names = names_of(all_message_types{});
  return names;
}

}  // namespace cuda_agent
