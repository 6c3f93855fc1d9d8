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


namespace {
__device__ float block_max(float v, float* shared) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = threadIdx.x < kThreads / 32 ? shared[threadIdx.x] : -INFINITY;
  if (warp == 0)
    for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  v = shared[0];
  __syncthreads();
  return v;
}
}  // namespace

// One block per row: maximum, sum of exponentials, then the normalised write.
__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float mx = -INFINITY;
  for (long c = threadIdx.x; c < cols; c += kThreads) mx = fmaxf(mx, xr[c]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sum += __expf(xr[c] - mx);
  const float inv = 1.0f / block_sum(sum, shared);
  for (long c = threadIdx.x; c < cols; c += kThreads) yr[c] = __expf(xr[c] - mx) * inv;
}

extern "C" void softmax_run(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
  softmax_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
