#include "actors/episode_tools.hpp"

#include <caf/all.hpp>

#include "actors/tool_call.hpp"
#include "messages/messages.hpp"

namespace cuda_agent {
namespace {

tools_actor::behavior_type episode_tools(tools_actor::pointer self,
                                         std::shared_ptr<tools::tool_session> session) {
  // However the actor ends, the episode's commands end with it, also those of calls still in
  // flight (their tool-call actors hold the session).
  self->attach_functor([session] { session->close(); });
  return {[self, session](tool_request& request) {
    auto call = spawn_tool_call(self->system(), session);
    return self->delegate(call, std::move(request));
  }};
}

}  // namespace

tools_actor spawn_episode_tools(caf::actor_system& system,
                               std::shared_ptr<tools::tool_session> session) {
  return system.spawn(episode_tools, std::move(session));
}

}  // namespace cuda_agent
