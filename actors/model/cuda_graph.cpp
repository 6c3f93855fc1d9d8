#include "actors/model/cuda_graph.hpp"

#include <string>

#include "actors/model/model_config.hpp"

#ifdef CUDA_AGENT_MODEL_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/cuda.h>
#endif

namespace cuda_agent::model {

#ifdef CUDA_AGENT_MODEL_CUDA_GRAPHS

struct captured_graph::impl {
  at::cuda::CUDAGraph graph;
};

bool captured_graph::available() { return true; }

captured_graph::pool_id captured_graph::new_pool() {
  const auto id = at::cuda::graph_pool_handle();
  return {id.first, id.second};
}

captured_graph::captured_graph(const std::function<void()>& work, pool_id pool) : impl_(std::make_unique<impl>()) {
  // Capture needs a stream other than the default one; the side stream starts once everything
  // queued so far (the static inputs' first values) is done.
  torch::cuda::synchronize();
  const c10::cuda::CUDAStreamGuard on_side{c10::cuda::getStreamFromPool()};
  try {
    work();
    torch::cuda::synchronize();
    // Thread-local: the learner or another model on other threads of this process keeps running
    // while this thread captures.
    impl_->graph.capture_begin({pool.first, pool.second}, cudaStreamCaptureModeThreadLocal);
    try {
      work();
    } catch (...) {
      try {
        impl_->graph.capture_end();
      } catch (...) {
      }
      throw;
    }
    impl_->graph.capture_end();
  } catch (const c10::Error& e) {
    throw model_error(std::string{"capturing a CUDA graph of the decode step failed ("} + e.what_without_backtrace() +
                      "); set policy.cuda_graphs = false");
  }
}

void captured_graph::replay() { impl_->graph.replay(); }

#else

struct captured_graph::impl {};

bool captured_graph::available() { return false; }

captured_graph::pool_id captured_graph::new_pool() { return {0, 0}; }

captured_graph::captured_graph(const std::function<void()>&, pool_id) {
  throw model_error("this cuda-agent was built without the CUDA toolkit's headers, so it cannot capture CUDA graphs; "
                    "set policy.cuda_graphs = false or rebuild where /usr/local/cuda exists");
}

void captured_graph::replay() {}

#endif

captured_graph::~captured_graph() = default;

}  // namespace cuda_agent::model
