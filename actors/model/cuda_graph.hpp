// CUDA graphs for the decode step: a piece of LibTorch work captured once and replayed with one
// launch, so that a step of a few hundred small kernels costs a few dozen launches on the host.
// The captured work reads and writes only tensors that live as long as the graph (its static
// inputs and outputs); replaying it repeats exactly the captured kernels on those addresses.
//
// Built only where the CUDA toolkit's headers are (CUDA_AGENT_HAVE_CUDA); elsewhere available()
// is false and the constructor throws.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

namespace cuda_agent::model {

class captured_graph {
 public:
  // A memory pool that graphs replayed in the order they were captured may share (their
  // freed intermediates are reused by the next capture, their live outputs are not).
  using pool_id = std::pair<uint64_t, uint64_t>;
  static pool_id new_pool();
  static bool available();

  // Runs `work` once on a side stream (lazy initialisations, cuBLAS workspaces), then captures
  // it into the graph on that stream, allocating from `pool`. Throws model_error where the
  // capture fails (an operation that synchronises with the host, for instance).
  captured_graph(const std::function<void()>& work, pool_id pool);
  ~captured_graph();
  captured_graph(const captured_graph&) = delete;
  captured_graph& operator=(const captured_graph&) = delete;

  // Launches the captured work on the current stream.
  void replay();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cuda_agent::model
