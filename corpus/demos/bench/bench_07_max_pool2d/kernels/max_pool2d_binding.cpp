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

extern "C" void max_pool2d_run(const float* x, float* y, long planes, long h, long w, cudaStream_t stream);

static torch::Tensor max_pool2d_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be (N, C, H, W)");
  auto y = torch::empty({x.size(0), x.size(1), x.size(2) / 2, x.size(3) / 2}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  max_pool2d_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0) * x.size(1), x.size(2),
                 x.size(3), stream);
  check_launch(__func__);
  return y;
}

static void register_max_pool2d(pybind11::module& m) {
  m.def("max_pool2d_forward", &max_pool2d_forward);
}
REGISTER_BINDING(max_pool2d, register_max_pool2d)
