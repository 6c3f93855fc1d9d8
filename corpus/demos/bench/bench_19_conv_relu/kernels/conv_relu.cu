#include <cuda_runtime.h>

// Direct 3x3 convolution, stride 1, zero padding 1, bias and ReLU. A block computes a 16x16
// output tile for 8 output channels; each input channel's 18x18 halo tile and the 8 filters
// go through shared memory.
namespace {
constexpr int kTileSide = 16;
constexpr int kCoPerBlock = 8;
}

__global__ void conv_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, float* __restrict__ y, int cin,
                                 int cout, int h, int wd) {
  __shared__ float tile[kTileSide + 2][kTileSide + 2];
  __shared__ float filt[kCoPerBlock][9];
  const int tiles_x = (wd + kTileSide - 1) / kTileSide;
  const int tx = threadIdx.x % kTileSide, ty = threadIdx.x / kTileSide;
  const int col = (blockIdx.x % tiles_x) * kTileSide + tx;
  const int row = (blockIdx.x / tiles_x) * kTileSide + ty;
  const int co0 = blockIdx.y * kCoPerBlock;
  const int img = blockIdx.z;
  float acc[kCoPerBlock];
  for (int j = 0; j < kCoPerBlock; ++j) acc[j] = 0.0f;
  const int row0 = (blockIdx.x / tiles_x) * kTileSide - 1, col0 = (blockIdx.x % tiles_x) * kTileSide - 1;
  for (int ci = 0; ci < cin; ++ci) {
    const float* in = x + ((long)img * cin + ci) * h * wd;
    for (int e = threadIdx.x; e < (kTileSide + 2) * (kTileSide + 2); e += blockDim.x) {
      const int r = row0 + e / (kTileSide + 2), c = col0 + e % (kTileSide + 2);
      tile[e / (kTileSide + 2)][e % (kTileSide + 2)] =
          (r >= 0 && r < h && c >= 0 && c < wd) ? in[(long)r * wd + c] : 0.0f;
    }
    for (int e = threadIdx.x; e < kCoPerBlock * 9; e += blockDim.x) {
      const int co = co0 + e / 9;
      filt[e / 9][e % 9] = co < cout ? w[((long)co * cin + ci) * 9 + e % 9] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kCoPerBlock; ++j) {
      float s = 0.0f;
#pragma unroll
      for (int dr = 0; dr < 3; ++dr)
#pragma unroll
        for (int dc = 0; dc < 3; ++dc) s += tile[ty + dr][tx + dc] * filt[j][dr * 3 + dc];
      acc[j] += s;
    }
    __syncthreads();
  }
  if (row >= h || col >= wd) return;
  for (int j = 0; j < kCoPerBlock; ++j) {
    const int co = co0 + j;
    if (co < cout) y[(((long)img * cout + co) * h + row) * wd + col] = fmaxf(acc[j] + b[co], 0.0f);
  }
}

extern "C" void conv_relu_run(const float* x, const float* w, const float* b, float* y, long n,
                              long cin, long cout, long h, long wd, cudaStream_t stream) {
  const int tiles = (int)(((h + kTileSide - 1) / kTileSide) * ((wd + kTileSide - 1) / kTileSide));
  const dim3 grid(tiles, (unsigned)((cout + kCoPerBlock - 1) / kCoPerBlock), (unsigned)n);
  conv_relu_kernel<<<grid, kTileSide * kTileSide, 0, stream>>>(x, w, b, y, (int)cin, (int)cout,
                                                               (int)h, (int)wd);
}
