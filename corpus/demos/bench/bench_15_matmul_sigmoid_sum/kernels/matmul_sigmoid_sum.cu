#include <cuda_runtime.h>
#include <math_constants.h>

namespace {
constexpr int kTile = 64;
constexpr int kStep = 16;

__global__ void gemm_kernel(const float* __restrict__ a, const float* __restrict__ b,
                            const float* __restrict__ bias, float* __restrict__ c, int m, int n,
                            int k, int b_transposed, long stride_a, long stride_b, long stride_c,
                            float alpha) {
  __shared__ float as[kStep][kTile + 1];
  __shared__ float bs[kStep][kTile + 1];
  a += blockIdx.z * stride_a;
  b += blockIdx.z * stride_b;
  c += blockIdx.z * stride_c;
  const int tx = threadIdx.x, ty = threadIdx.y, tid = ty * 16 + tx;
  const int row0 = blockIdx.y * kTile, col0 = blockIdx.x * kTile;
  float acc[4][4] = {};
  for (int p0 = 0; p0 < k; p0 += kStep) {
    for (int e = tid; e < kTile * kStep; e += 256) {
      const int r = e / kStep, q = e % kStep;  // a tile: rows r, depth q
      const int gr = row0 + r, gq = p0 + q;
      as[q][r] = (gr < m && gq < k) ? a[(long)gr * k + gq] : 0.0f;
      int cc, qq;
      if (b_transposed) { cc = e / kStep; qq = e % kStep; }
      else { qq = e / kTile; cc = e % kTile; }
      const int gc = col0 + cc, gp = p0 + qq;
      float v = 0.0f;
      if (gc < n && gp < k) v = b_transposed ? b[(long)gc * k + gp] : b[(long)gp * n + gc];
      bs[qq][cc] = v;
    }
    __syncthreads();
#pragma unroll
    for (int q = 0; q < kStep; ++q) {
      float av[4], bv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) av[i] = as[q][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) bv[j] = bs[q][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += av[i] * bv[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = row0 + ty + 16 * i;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int cidx = col0 + tx + 16 * j;
      if (cidx < n) c[(long)r * n + cidx] = alpha * acc[i][j] + (bias ? bias[cidx] : 0.0f);
    }
  }
}

void gemm(const float* a, const float* b, const float* bias, float* c, int m, int n, int k,
          int b_transposed, int batch, long stride_a, long stride_b, long stride_c, float alpha,
          cudaStream_t stream) {
  const dim3 block(16, 16);
  const dim3 grid((n + kTile - 1) / kTile, (m + kTile - 1) / kTile, batch);
  gemm_kernel<<<grid, block, 0, stream>>>(a, b, bias, c, m, n, k, b_transposed, stride_a,
                                          stride_b, stride_c, alpha);
}
}  // namespace


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

// The product into scratch, then one block per row for sigmoid and the sum.
__global__ void sigmoid_row_sum(const float* __restrict__ s, float* __restrict__ y, long n) {
  __shared__ float shared[32];
  const float* row = s + blockIdx.x * n;
  float acc = 0.0f;
  for (long j = threadIdx.x; j < n; j += kThreads) acc += 1.0f / (1.0f + __expf(-row[j]));
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) y[blockIdx.x] = acc;
}

extern "C" void matmul_sigmoid_sum_run(const float* a, const float* b, float* scratch, float* y,
                                       long m, long n, long k, cudaStream_t stream) {
  gemm(a, b, nullptr, scratch, (int)m, (int)n, (int)k, 0, 1, 0, 0, 0, 1.0f, stream);
  sigmoid_row_sum<<<m, kThreads, 0, stream>>>(scratch, y, n);
}
