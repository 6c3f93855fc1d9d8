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

extern "C" void conv_relu_run(const float* x, const float* w, const float* b, float* y, long n,
                              long cin, long cout, long h, long wd, cudaStream_t stream);

static torch::Tensor conv_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  check_input(x, "x");
  check_input(weight, "weight");
  check_input(bias, "bias");
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && weight.size(1) == x.size(1) &&
                  weight.size(2) == 3 && weight.size(3) == 3,
              "need x (N, Cin, H, W) and a (Cout, Cin, 3, 3) weight");
  auto y = torch::empty({x.size(0), weight.size(0), x.size(2), x.size(3)}, x.options());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  conv_relu_run(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                y.data_ptr<float>(), x.size(0), x.size(1), weight.size(0), x.size(2), x.size(3), stream);
  check_launch(__func__);
  return y;
}

static void register_conv_relu(pybind11::module& m) { m.def("conv_relu_forward", &conv_relu_forward); }
REGISTER_BINDING(conv_relu, register_conv_relu)
