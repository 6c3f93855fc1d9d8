#include <cuda_runtime.h>
#include <math_constants.h>

namespace {
constexpr int kThreads = 256;

__device__ float block_sum(float v, float* shared) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : 0.0f;
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}

}  // namespace

// One block per row: mean of squares by a block reduction, then the scaled write.
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                               float* __restrict__ y, long cols, float eps) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float sq = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sq += xr[c] * xr[c];
  const float inv = rsqrtf(block_sum(sq, shared) / cols + eps);
  for (long c = threadIdx.x; c < cols; c += kThreads) yr[c] = xr[c] * inv * w[c];
}

extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps, cudaStream_t stream) {
  rmsnorm_kernel<<<rows, kThreads, 0, stream>>>(x, w, y, cols, eps);
}
