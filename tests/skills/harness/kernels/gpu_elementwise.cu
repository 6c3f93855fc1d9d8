// CUDA kernels for the elementwise task (y = relu(2x + 1)), shared by the GPU red-team candidates.
#include <cuda_runtime.h>

namespace {

__global__ void relu_2x_plus_1(const float* x, float* y, long n) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) {
    const float v = 2.0f * x[i] + 1.0f;
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void write_far_away(float* y) { y[1L << 40] = 1.0f; }

// The same result the slow way: `passes` dependent rounds per element, so that a memo's copy
// would be far faster than computing.
__global__ void relu_2x_plus_1_slowly(const float* x, float* y, long n, int passes) {
  const long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i < n) {
    float v = x[i];
    float acc = 0.0f;
    for (int p = 0; p < passes; ++p) acc = fmaf(acc, 0.0f, 2.0f * v + 1.0f);
    y[i] = acc > 0.0f ? acc : 0.0f;
  }
}

}  // namespace

// Honest: on the stream the caller gives (PyTorch's current stream).
extern "C" void launch_relu_2x_plus_1(const float* x, float* y, long n, cudaStream_t stream) {
  relu_2x_plus_1<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}

extern "C" void launch_relu_2x_plus_1_slowly(const float* x, float* y, long n, cudaStream_t stream) {
  relu_2x_plus_1_slowly<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, y, n, 100000);
}

// The CUDA-L1 trick: the work goes to a private non-blocking stream that nobody waits for.
extern "C" void launch_on_side_stream(const float* x, float* y, long n) {
  static cudaStream_t side = [] {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return s;
  }();
  relu_2x_plus_1<<<static_cast<unsigned>((n + 255) / 256), 256, 0, side>>>(x, y, n);
}

// Fault injection: an illegal memory access.
extern "C" void launch_illegal_access(float* y, cudaStream_t stream) {
  write_far_away<<<1, 1, 0, stream>>>(y);
  cudaStreamSynchronize(stream);
}
