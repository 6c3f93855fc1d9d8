#include <cuda_runtime.h>

namespace {
inline unsigned blocks_for(long n) {
  const long b = (n + 255) / 256;
  return (unsigned)(b < 65535L * 16 ? b : 65535L * 16);
}
}  // namespace

// One thread per output element, 2x2 window, stride 2, floor mode.
__global__ void max_pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, long planes,
                                  long h, long w) {
  const long oh = h / 2, ow = w / 2, total = planes * oh * ow;
  for (long o = blockIdx.x * (long)blockDim.x + threadIdx.x; o < total;
       o += (long)gridDim.x * blockDim.x) {
    const long j = o % ow, i = (o / ow) % oh, p = o / (oh * ow);
    const float* src = x + p * h * w + (2 * i) * w + 2 * j;
    const float2 top = *reinterpret_cast<const float2*>(src);
    const float2 bottom = *reinterpret_cast<const float2*>(src + w);
    y[o] = fmaxf(fmaxf(top.x, top.y), fmaxf(bottom.x, bottom.y));
  }
}

extern "C" void max_pool2d_run(const float* x, float* y, long planes, long h, long w,
                               cudaStream_t stream) {
  max_pool2d_kernel<<<blocks_for(planes * (h / 2) * (w / 2)), 256, 0, stream>>>(x, y, planes, h, w);
}
