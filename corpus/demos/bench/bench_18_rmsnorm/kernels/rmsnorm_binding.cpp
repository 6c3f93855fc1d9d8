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

extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps, cudaStream_t stream);

static torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
  check_input(x, "x");
  check_input(weight, "weight");
  const long cols = x.size(-1);
  TORCH_CHECK(weight.numel() == cols, "weight must match the last dimension");
  auto y = torch::empty_like(x);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  rmsnorm_run(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
              x.numel() / cols, cols, (float)eps, stream);
  check_launch(__func__);
  return y;
}

static void register_rmsnorm(pybind11::module& m) { m.def("rmsnorm_forward", &rmsnorm_forward); }
REGISTER_BINDING(rmsnorm, register_rmsnorm)
