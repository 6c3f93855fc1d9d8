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

extern "C" void matmul_sigmoid_sum_run(const float* a, const float* b, float* scratch, float* y,
                                       long m, long n, long k, cudaStream_t stream);

static torch::Tensor matmul_sigmoid_sum_forward(torch::Tensor a, torch::Tensor b) {
  check_input(a, "a");
  check_input(b, "b");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "need (M, K) @ (K, N)");
  auto scratch = torch::empty({a.size(0), b.size(1)}, a.options());  // the product
  auto y = torch::empty({a.size(0)}, a.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  matmul_sigmoid_sum_run(a.data_ptr<float>(), b.data_ptr<float>(), scratch.data_ptr<float>(),
                         y.data_ptr<float>(), a.size(0), b.size(1), a.size(1), stream);
  check_launch(__func__);
  return y;
}

static void register_matmul_sigmoid_sum(pybind11::module& m) {
  m.def("matmul_sigmoid_sum_forward", &matmul_sigmoid_sum_forward);
}
REGISTER_BINDING(matmul_sigmoid_sum, register_matmul_sigmoid_sum)
