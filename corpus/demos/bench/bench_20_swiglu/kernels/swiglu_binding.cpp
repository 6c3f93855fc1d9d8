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

extern "C" void swiglu_run(const float* x, const float* w1, const float* w2, const float* w3,
                           float* gate, float* up, float* y, long batch, long dim,
                           long hidden, cudaStream_t stream);

static torch::Tensor swiglu_forward(torch::Tensor x, torch::Tensor w1, torch::Tensor w2,
                                    torch::Tensor w3) {
  for (const auto* t : {&x, &w1, &w2, &w3}) check_input(*t, "swiglu argument");
  TORCH_CHECK(x.dim() == 2 && w1.size(1) == x.size(1) && w2.sizes() == w1.sizes() &&
                  w3.size(1) == w1.size(0) && w3.size(0) == x.size(1),
              "need x (B, dim), w1 and w2 (hidden, dim), w3 (dim, hidden)");
  auto gate = torch::empty({x.size(0), w1.size(0)}, x.options());
  auto up = torch::empty({x.size(0), w1.size(0)}, x.options());
  auto y = torch::empty_like(x);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  swiglu_run(x.data_ptr<float>(), w1.data_ptr<float>(), w2.data_ptr<float>(), w3.data_ptr<float>(),
             gate.data_ptr<float>(), up.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
             x.size(1), w1.size(0), stream);
  check_launch(__func__);
  return y;
}

static void register_swiglu(pybind11::module& m) { m.def("swiglu_forward", &swiglu_forward); }
REGISTER_BINDING(swiglu, register_swiglu)
