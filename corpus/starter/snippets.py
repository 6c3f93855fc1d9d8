"""Code shared by the starter patterns' solutions: the binding boilerplate per device and the
kernels several solutions need (a tiled GEMM, block reductions). Each solution gets its own copy
written into its files, so every solution folder stands alone."""

BINDING_HEAD = {
    "cpu": """#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}
""",
    "cuda": """#include <torch/extension.h>
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
""",
}

# Tokens in the per-pattern binding bodies, replaced per device.
BINDING_TOKENS = {
    "cpu": {"@SD": "", "@S": "", "@STREAM": "", "@POST": ""},
    "cuda": {"@SD": ", cudaStream_t stream", "@S": ", stream",
             "@STREAM": "cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();",
             "@POST": "check_launch(__func__);"},
}

# C = A(M x K) * B, B is K x N (b_transposed = 0) or N x K (b_transposed = 1, as nn.Linear's
# weight); optional bias of length N. float accumulation, i-k-j order for the cache.
GEMM_CPU = """
static void gemm(const float* a, const float* b, const float* bias, float* c, long m, long n,
                 long k, int b_transposed) {
  for (long i = 0; i < m; ++i) {
    float* crow = c + i * n;
    for (long j = 0; j < n; ++j) crow[j] = bias ? bias[j] : 0.0f;
    const float* arow = a + i * k;
    if (b_transposed) {
      for (long j = 0; j < n; ++j) {
        const float* bcol = b + j * k;
        float acc = 0.0f;
        for (long p = 0; p < k; ++p) acc += arow[p] * bcol[p];
        crow[j] += acc;
      }
    } else {
      for (long p = 0; p < k; ++p) {
        const float av = arow[p];
        const float* brow = b + p * n;
        for (long j = 0; j < n; ++j) crow[j] += av * brow[j];
      }
    }
  }
}
"""

# Tiled GEMM: 64x64 output tile per block of 16x16 threads, each thread 4x4 outputs, K in
# steps of 16 through shared memory. Batched through blockIdx.z with strides per batch.
GEMM_CUDA = """
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
"""

# Sum over a block of 256 threads.
REDUCE_CUDA = """
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
"""

# Maximum over a block of 256 threads (after REDUCE_CUDA, which defines kThreads).
MAX_CUDA = """
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
"""

# Grid-stride elementwise launch shape.
ELEMENTWISE_CUDA = """
namespace {
inline unsigned blocks_for(long n) {
  const long b = (n + 255) / 256;
  return (unsigned)(b < 65535L * 16 ? b : 65535L * 16);
}
}  // namespace
"""
