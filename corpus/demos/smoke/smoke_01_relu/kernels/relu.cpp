#include <cmath>

// ReLU.
extern "C" void relu_run(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}
