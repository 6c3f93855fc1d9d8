#include "messages/registry.hpp"

#include <caf/actor_system_config.hpp>

#include "messages/codec.hpp"

namespace cuda_agent {
namespace {

template <class... Ts>
void add_all(caf::actor_system_config& cfg, caf::detail::type_list<Ts...>) {
  (cfg.add_message_type<Ts>(type_name_of<Ts>()), ...);
}

template <class... Ts>
bool decode_if_named(std::string_view type, std::string_view payload,
                     caf::detail::type_list<Ts...>) {
  return ((type == type_name_of<Ts>() ? (decode<Ts>(payload), true) : false) || ...);
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

void check_payload(std::string_view type, std::string_view payload) {
  if (!decode_if_named(type, payload, all_message_types{}))
    throw decode_error{"unknown message type '" + std::string{type} + "'"};
}

}  // namespace cuda_agent
