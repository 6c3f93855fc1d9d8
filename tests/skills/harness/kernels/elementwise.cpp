// CPU kernels for the elementwise task (y = relu(2x + 1)), shared by the honest candidates and by
// the red-team ones: each cheat calls the function that plays its trick. One file for all of them,
// so the build cache compiles it once. Nothing here imports ATen compute: the harness checks the
// built module's symbols before loading it (native_code.py), so that lives in redteam_aten*.cpp.
#include <torch/extension.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "../binding_registry.h"

namespace {

void relu_2x_plus_1(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = 2.0f * x[i] + 1.0f;
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

// Honest: allocates its output and writes every element.
torch::Tensor fused_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 expected");
  auto y = torch::empty_like(x);
  relu_2x_plus_1(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

// Honest: writes into an output the caller allocated.
void fused_forward_out(torch::Tensor x, torch::Tensor y) {
  relu_2x_plus_1(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
}

// Does nothing: the decoy that "runs a kernel".
void noop(torch::Tensor) {}

// Output memory reuse: hands back fresh memory it never writes.
torch::Tensor empty_out(torch::Tensor x) { return torch::empty_like(x); }

// Computes in place into its input and returns it.
torch::Tensor mutate_forward(torch::Tensor x) {
  relu_2x_plus_1(x.data_ptr<float>(), x.data_ptr<float>(), x.numel());
  return x;
}

// Caches the result by input address: same buffer, new values, stale result.
torch::Tensor cached_forward(torch::Tensor x) {
  static std::map<const void*, torch::Tensor> cache;
  auto it = cache.find(x.data_ptr());
  if (it != cache.end()) return it->second;
  auto y = fused_forward(x);
  cache.emplace(x.data_ptr(), y);
  return y;
}

// Returns at once and finishes the work on a detached thread (timed as free).
torch::Tensor thread_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  std::thread([x, y]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    relu_2x_plus_1(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  }).detach();
  return y;
}

// Fault injection: a segmentation fault.
void crash_segv(torch::Tensor) { std::raise(SIGSEGV); }

// Fault injection: allocates and touches memory until the allocation fails.
void hog_memory(torch::Tensor) {
  std::vector<char*> blocks;
  for (;;) {
    char* p = new char[256 << 20];
    std::memset(p, 1, 256 << 20);
    blocks.push_back(p);
  }
}

void register_elementwise(pybind11::module& m) {
  m.def("fused_forward", &fused_forward);
  m.def("fused_forward_out", &fused_forward_out);
  m.def("noop", &noop);
  m.def("empty_out", &empty_out);
  m.def("mutate_forward", &mutate_forward);
  m.def("cached_forward", &cached_forward);
  m.def("thread_forward", &thread_forward);
  m.def("crash_segv", &crash_segv);
  m.def("hog_memory", &hog_memory);
}

}  // namespace

REGISTER_BINDING(elementwise, register_elementwise);
