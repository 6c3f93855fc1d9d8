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

// Row softmax in place over the (batch * seq) rows of the score matrix.
__global__ void softmax_rows(float* __restrict__ s, long cols) {
  __shared__ float shared[32];
  float* row = s + blockIdx.x * cols;
  float mx = -INFINITY;
  for (long c = threadIdx.x; c < cols; c += kThreads) mx = fmaxf(mx, row[c]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sum += __expf(row[c] - mx);
  const float inv = 1.0f / block_sum(sum, shared);
  for (long c = threadIdx.x; c < cols; c += kThreads) row[c] = __expf(row[c] - mx) * inv;
}

// Batched: scores = q k^T * scale (the GEMM's alpha), softmax, out = scores v.
extern "C" void attention_run(const float* q, const float* k, const float* v, float* scores,
                              float* out, long batch, long seq, long dim, cudaStream_t stream) {
  const float scale = rsqrtf((float)dim);
  gemm(q, k, nullptr, scores, (int)seq, (int)seq, (int)dim, 1, (int)batch, seq * dim, seq * dim,
       seq * seq, scale, stream);
  softmax_rows<<<batch * seq, kThreads, 0, stream>>>(scores, seq);
  gemm(scores, v, nullptr, out, (int)seq, (int)dim, (int)seq, 0, (int)batch, seq * seq,
       seq * dim, seq * dim, 1.0f, stream);
}
