// Registration of the protocol with CAF. Every node calls register_message_types on its
// actor_system_config before starting the actor system: a type that is not registered does not
// fail to compile, it arrives as an empty message.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <caf/fwd.hpp>

#include "messages/messages.hpp"

namespace cuda_agent {

// Calls cfg.add_message_type<T>(type_name_of<T>()) for every type in all_message_types.
void register_message_types(caf::actor_system_config& cfg);

// type_name_of<T>() for every type in all_message_types, in list order: the names the wire and
// the message log use.
const std::vector<std::string>& message_type_names();

// Decodes the payload strictly as the protocol type named `type` (a log record's type field);
// throws decode_error when the name is not a protocol type or the bytes are not that type.
void check_payload(std::string_view type, std::string_view payload);

}  // namespace cuda_agent
