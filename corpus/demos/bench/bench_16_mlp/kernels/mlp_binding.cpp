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

extern "C" void mlp_run(const float* x, const float* w1, const float* b1, const float* w2,
                        const float* b2, float* h, float* y, long batch, long in, long hidden,
                        long out, cudaStream_t stream);

static torch::Tensor mlp_forward(torch::Tensor x, torch::Tensor w1, torch::Tensor b1,
                                 torch::Tensor w2, torch::Tensor b2) {
  for (const auto* t : {&x, &w1, &b1, &w2, &b2}) check_input(*t, "mlp argument");
  TORCH_CHECK(x.dim() == 2 && w1.size(1) == x.size(1) && w2.size(1) == w1.size(0),
              "shapes must chain: x (B, in), fc1 (hidden, in), fc2 (out, hidden)");
  auto h = torch::empty({x.size(0), w1.size(0)}, x.options());  // the hidden activations
  auto y = torch::empty({x.size(0), w2.size(0)}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  mlp_run(x.data_ptr<float>(), w1.data_ptr<float>(), b1.data_ptr<float>(), w2.data_ptr<float>(),
          b2.data_ptr<float>(), h.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
          w1.size(0), w2.size(0), stream);
  check_launch(__func__);
  return y;
}

static void register_mlp(pybind11::module& m) { m.def("mlp_forward", &mlp_forward); }
REGISTER_BINDING(mlp, register_mlp)
