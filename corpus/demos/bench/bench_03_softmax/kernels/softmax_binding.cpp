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

extern "C" void softmax_run(const float* x, float* y, long rows, long cols, cudaStream_t stream);

static torch::Tensor softmax_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D");
  auto y = torch::empty_like(x);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  softmax_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1), stream);
  check_launch(__func__);
  return y;
}

static void register_softmax(pybind11::module& m) { m.def("softmax_forward", &softmax_forward); }
REGISTER_BINDING(softmax, register_softmax)
