#include <cmath>

// y = x / sqrt(mean(x^2) + eps) * w, per row.
extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double sq = 0.0;
    for (long c = 0; c < cols; ++c) sq += (double)xr[c] * xr[c];
    const float inv = (float)(1.0 / std::sqrt(sq / cols + eps));
    for (long c = 0; c < cols; ++c) y[r * cols + c] = xr[c] * inv * w[c];
  }
}
