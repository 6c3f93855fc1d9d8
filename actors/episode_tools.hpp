// An episode's tools: the actor the episode sends its tool calls to. It owns the episode's tool
// session (sandbox, read-before-edit records, background shells) and hands every call to a
// fresh tool-call actor (actors/tool_call.hpp), so calls block no one and a call that crashes
// takes nothing else down. Stopping it ends the session, background shells included.
#pragma once

#include <memory>

#include <caf/actor_system.hpp>

#include "actors/tools/tool_session.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent {

// Answers tool_request with tool_result (tools_actor), any number of times.
tools_actor spawn_episode_tools(caf::actor_system& system,
                               std::shared_ptr<tools::tool_session> session);

}  // namespace cuda_agent
