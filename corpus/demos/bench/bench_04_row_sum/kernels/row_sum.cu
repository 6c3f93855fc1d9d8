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

// One block per row, vectorised float4 loads when the row allows it.
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float acc = 0.0f;
  if (cols % 4 == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (long c = threadIdx.x; c < cols / 4; c += kThreads) {
      const float4 v = x4[c];
      acc += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (long c = threadIdx.x; c < cols; c += kThreads) acc += xr[c];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) y[blockIdx.x] = acc;
}

extern "C" void row_sum_run(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
  row_sum_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
