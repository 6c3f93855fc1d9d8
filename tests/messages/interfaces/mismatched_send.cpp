// Compiled by the interface_checks tests, which require it NOT to build: a compile job sent to
// the GPU pool, a message its interface (gpu_pool_actor) does not accept.
#include <chrono>

#include <caf/all.hpp>

#include "messages/interfaces.hpp"

namespace cuda_agent {

void sends_a_compile_job_to_the_gpu_pool(caf::event_based_actor* self, const gpu_pool_actor& gpu) {
  self->request(gpu, std::chrono::seconds{1}, compile_job{}).then([](compile_result&) {});
}

}  // namespace cuda_agent
