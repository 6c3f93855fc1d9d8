// Bindings of kernels/gpu_elementwise.cu for the GPU red-team candidates.
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

#include "../binding_registry.h"

extern "C" void launch_relu_2x_plus_1(const float* x, float* y, long n, cudaStream_t stream);
extern "C" void launch_on_side_stream(const float* x, float* y, long n);
extern "C" void launch_illegal_access(float* y, cudaStream_t stream);

namespace {

torch::Tensor fused_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_relu_2x_plus_1(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                        at::cuda::getCurrentCUDAStream());
  return y;
}

torch::Tensor side_stream_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_on_side_stream(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

// Sakana-style output reuse: memory from the caching allocator, never written.
torch::Tensor empty_out(torch::Tensor x) { return torch::empty_like(x); }

torch::Tensor illegal_access(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_illegal_access(y.data_ptr<float>(), at::cuda::getCurrentCUDAStream());
  return y;
}

void register_gpu_elementwise(pybind11::module& m) {
  m.def("fused_forward", &fused_forward);
  m.def("side_stream_forward", &side_stream_forward);
  m.def("empty_out", &empty_out);
  m.def("illegal_access", &illegal_access);
}

}  // namespace

REGISTER_BINDING(gpu_elementwise, register_gpu_elementwise);
