# A KernelBench-format candidate for corpus/tasks/bench/bench_01_relu.py (CUDA): the same ReLU
# kernel and launch as the workdir demonstration corpus/demos/bench/bench_01_relu, written the
# way KernelBench's examples write it (kernel and wrapper in cuda_sources, declaration in
# cpp_sources).
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_source = """
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

namespace {
inline unsigned blocks_for(long n) {
  const long b = (n + 255) / 256;
  return (unsigned)(b < 65535L * 16 ? b : 65535L * 16);
}
}  // namespace

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

torch::Tensor relu_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat && x.is_contiguous(),
              "x must be a contiguous float32 CUDA tensor");
  auto y = torch::empty_like(x);
  const long n = x.numel();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  relu_kernel<<<blocks_for(n), 256, 0, stream>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  const cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, "relu launch failed: ", cudaGetErrorString(err));
  return y;
}
"""

relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"

relu = load_inline(
    name="relu_inline",
    cpp_sources=relu_cpp_source,
    cuda_sources=relu_source,
    functions=["relu_forward"],
    verbose=True,
    extra_cflags=[""],
    extra_ldflags=[""],
)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.relu = relu

    def forward(self, x):
        return self.relu.relu_forward(x)
