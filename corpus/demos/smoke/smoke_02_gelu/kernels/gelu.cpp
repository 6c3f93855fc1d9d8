#include <cmath>

// GELU (exact, erf form).
extern "C" void gelu_run(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}
