#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CUDA tensors; outputs are allocated here, computed by the
// kernels on the current stream.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

static void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, what, " launch failed: ", cudaGetErrorString(err));
}

extern "C" void swish_scale_run(const float* x, float* y, long n, cudaStream_t stream);

static torch::Tensor swish_scale_forward(torch::Tensor x) {
  check_input(x, "x");
  auto y = torch::empty_like(x);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  swish_scale_run(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), stream);
  check_launch(__func__);
  return y;
}

static void register_swish_scale(pybind11::module& m) { m.def("swish_scale_forward", &swish_scale_forward, "x * sigmoid(x), doubled."); }
REGISTER_BINDING(swish_scale, register_swish_scale)
