#include <cuda_runtime.h>

namespace {
inline unsigned blocks_for(long n) {
  const long b = (n + 255) / 256;
  return (unsigned)(b < 65535L * 16 ? b : 65535L * 16);
}
}  // namespace

// GELU (exact, erf form).
__global__ void gelu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

extern "C" void gelu_run(const float* x, float* y, long n, cudaStream_t stream) {
  gelu_kernel<<<blocks_for(n), 256, 0, stream>>>(x, y, n);
}
