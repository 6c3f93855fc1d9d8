// The list of every protocol message type. The CAF registration (needed on every node for the
// wire) and the tests both walk this one list, so a new type cannot be forgotten in either.
#pragma once

#include <string>
#include <vector>

#include <caf/actor_system_config.hpp>
#include <caf/detail/type_list.hpp>

#include "messages/messages.hpp"

namespace cuda_agent {

using all_message_types = caf::detail::type_list<
    task_spec, episode_started, episode_ended, tool_call, chat_message, policy_request,
    policy_response, tool_request, tool_result, compile_job, compile_result, verify_job,
    verify_result, timing_stats, profile_job, profile_result, reward_record, trajectory_turn,
    trajectory, learner_update, node_join, node_leave, node_heartbeat>;

// Calls cfg.add_message_type<T>(type_name_of<T>()) for every type in all_message_types.
void register_message_types(caf::actor_system_config& cfg);

// type_name_of<T>() for every type, in list order.
const std::vector<std::string>& message_type_names();

}  // namespace cuda_agent
