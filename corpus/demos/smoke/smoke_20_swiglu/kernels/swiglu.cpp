#include <cmath>

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

// gate = x w1^T, up = x w2^T, gate = silu(gate) * up, y = gate w3^T.
extern "C" void swiglu_run(const float* x, const float* w1, const float* w2, const float* w3,
                           float* gate, float* up, float* y, long batch, long dim, long hidden) {
  gemm(x, w1, nullptr, gate, batch, hidden, dim, 1);
  gemm(x, w2, nullptr, up, batch, hidden, dim, 1);
  for (long i = 0; i < batch * hidden; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
  gemm(gate, w3, nullptr, y, batch, dim, hidden, 1);
}
