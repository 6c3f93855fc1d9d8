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

extern "C" void linear_relu_run(const float* x, const float* w, const float* b, float* y, long m,
                           long n, long k, cudaStream_t stream);

static torch::Tensor linear_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  check_input(x, "x");
  check_input(weight, "weight");
  check_input(bias, "bias");
  TORCH_CHECK(x.dim() == 2 && weight.size(1) == x.size(1), "x must be (batch, in_features)");
  auto y = torch::empty({x.size(0), weight.size(0)}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  linear_relu_run(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
             y.data_ptr<float>(), x.size(0), weight.size(0), x.size(1), stream);
  check_launch(__func__);
  return y;
}

static void register_linear_relu(pybind11::module& m) { m.def("linear_relu_forward", &linear_relu_forward); }
REGISTER_BINDING(linear_relu, register_linear_relu)
