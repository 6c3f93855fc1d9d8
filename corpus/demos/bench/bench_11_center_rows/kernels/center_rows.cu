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

// One block per row: the mean by a block reduction, then the centred write.
__global__ void center_rows_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float acc = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) acc += xr[c];
  const float mean = block_sum(acc, shared) / cols;
  for (long c = threadIdx.x; c < cols; c += kThreads) yr[c] = xr[c] - mean;
}

extern "C" void center_rows_run(const float* x, float* y, long rows, long cols,
                                cudaStream_t stream) {
  center_rows_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
