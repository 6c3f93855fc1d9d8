#include <cuda_runtime.h>

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
inline unsigned blocks_for(long n) {
  const long b = (n + 255) / 256;
  return (unsigned)(b < 65535L * 16 ? b : 65535L * 16);
}
}  // namespace

// Linear layer then GELU (erf form).
__global__ void linear_gelu_act(float* __restrict__ y, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    const float v = y[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

extern "C" void linear_gelu_run(const float* x, const float* w, const float* b, float* y, long m,
                           long n, long k, cudaStream_t stream) {
  gemm(x, w, b, y, (int)m, (int)n, (int)k, 1, 1, 0, 0, 0, 1.0f, stream);
  linear_gelu_act<<<blocks_for(m * n), 256, 0, stream>>>(y, m * n);
}
