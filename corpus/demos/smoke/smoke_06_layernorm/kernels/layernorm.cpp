#include <cmath>

// Layer norm over the last dimension of (x + r) (r may be null): mean and biased variance in
// double, then the affine transform.
extern "C" void layernorm_run(const float* x, const float* r, const float* w, const float* b,
                           float* y, long rows, long cols, float eps) {
  for (long i = 0; i < rows; ++i) {
    const float* xr = x + i * cols;
    const float* rr = r ? r + i * cols : nullptr;
    float* yr = y + i * cols;
    double sum = 0.0, sq = 0.0;
    for (long c = 0; c < cols; ++c) {
      const double v = xr[c] + (rr ? rr[c] : 0.0f);
      sum += v;
      sq += v * v;
    }
    const double mean = sum / cols;
    const double var = sq / cols - mean * mean;
    const float inv = (float)(1.0 / std::sqrt(var + eps));
    for (long c = 0; c < cols; ++c) {
      const float v = xr[c] + (rr ? rr[c] : 0.0f);
      yr[c] = (v - (float)mean) * inv * w[c] + b[c];
    }
  }
}
