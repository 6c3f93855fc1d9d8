#include <cmath>

// Row softmax: subtract the row maximum for stability, exponentiate, normalise.
extern "C" void softmax_run(const float* x, float* y, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mx = xr[0];
    for (long c = 1; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
    float sum = 0.0f;
    for (long c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - mx);
      sum += yr[c];
    }
    const float inv = 1.0f / sum;
    for (long c = 0; c < cols; ++c) yr[c] *= inv;
  }
}
