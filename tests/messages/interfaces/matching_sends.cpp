// Compiled by the interface_checks tests: sends and requests that the interfaces accept. It must
// build, so that the mismatch beside it fails for its mismatch alone.
#include <chrono>

#include <caf/all.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent {

void sends_what_each_accepts(caf::event_based_actor* self, const policy_actor& policy,
                             const compiler_pool_actor& compiler, const gpu_pool_actor& gpu,
                             const recorder_actor& recorder) {
  self->request(policy, std::chrono::seconds{1}, policy_request{}).then([](policy_response&) {});
  self->request(compiler, std::chrono::seconds{1}, compile_job{}).then([](compile_result&) {});
  self->request(gpu, std::chrono::seconds{1}, evaluate_job{}).then([](reward_record&) {});
  self->send(recorder, record_atom::value, recorded_message{});
}

}  // namespace cuda_agent
