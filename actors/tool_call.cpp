#include "actors/tool_call.hpp"

#include <caf/all.hpp>

#include "actors/tools/tools.hpp"
#include "messages/messages.hpp"

namespace cuda_agent {
namespace {

struct tool_call_state {
  static inline const char* name = "tool_call";
};

tools_actor::behavior_type tool_call_actor(tools_actor::stateful_pointer<tool_call_state> self,
                                           std::shared_ptr<tools::tool_session> session) {
  return {
      [=](const tool_request& request) -> tool_result {
        // run_tool turns every failure into an error result: the episode always gets an answer.
        auto result = tools::run_tool(*session, request.call, request.episode_id);
        self->quit();
        return result;
      },
  };
}

}  // namespace

tools_actor spawn_tool_call(caf::actor_system& system,
                           std::shared_ptr<tools::tool_session> session) {
  return system.spawn<caf::detached>(tool_call_actor, std::move(session));
}

}  // namespace cuda_agent
