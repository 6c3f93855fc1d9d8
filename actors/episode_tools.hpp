// An episode's tools: the actor the episode sends its tool calls to. It owns the episode's tool
// session (sandbox, read-before-edit records, background shells) and hands every call to a
// fresh tool-call actor (actors/tool_call.hpp), so calls block no one and a call that crashes
// takes nothing else down. Stopping it ends the session, background shells included.
#pragma once

#include <memory>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/tools/tool_session.hpp"

namespace cuda_agent {

// Understands (tool_request) -> tool_result, any number of times.
caf::actor spawn_episode_tools(caf::actor_system& system,
                               std::shared_ptr<tools::tool_session> session);

}  // namespace cuda_agent
