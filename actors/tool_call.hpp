// The tool-call actor: one per tool call, short-lived. The episode spawns it with its
// tool_session and requests (tool_request) -> tool_result; the actor runs the tool, answers and
// quits. It runs detached (a thread of its own) because a tool blocks: a Bash command may run
// for minutes, and the scheduler's few worker threads must not wait on it.
//
// The routed commands (`build`, `verify`, `profile`; tools::routed_command) never reach it: the
// episode sends those to the compiler and GPU pools.
#pragma once

#include <memory>

#include <caf/actor_system.hpp>

#include "actors/tools/tool_session.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent {

// Answers one tool_request with a tool_result (tools_actor); then the actor is gone.
tools_actor spawn_tool_call(caf::actor_system& system,
                           std::shared_ptr<tools::tool_session> session);

}  // namespace cuda_agent
