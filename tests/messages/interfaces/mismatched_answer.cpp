// Compiled by the interface_checks tests, which require it NOT to build: a policy request whose
// answer is taken as a tool_result, which policy_actor does not answer with.
#include <chrono>

#include <caf/all.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent {

void expects_the_wrong_answer(caf::event_based_actor* self, const policy_actor& policy) {
  self->request(policy, std::chrono::seconds{1}, policy_request{}).then([](tool_result&) {});
}

}  // namespace cuda_agent
