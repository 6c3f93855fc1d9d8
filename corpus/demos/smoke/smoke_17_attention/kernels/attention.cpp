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

// Per batch: scores = q k^T * scale, row softmax in place, out = scores v.
extern "C" void attention_run(const float* q, const float* k, const float* v, float* scores,
                              float* out, long batch, long seq, long dim) {
  const float scale = 1.0f / std::sqrt((float)dim);
  for (long b = 0; b < batch; ++b) {
    const long off = b * seq * dim;
    float* s = scores + b * seq * seq;
    gemm(q + off, k + off, nullptr, s, seq, seq, dim, 1);
    for (long i = 0; i < seq; ++i) {
      float* row = s + i * seq;
      float mx = -INFINITY;
      for (long j = 0; j < seq; ++j) mx = std::fmax(mx, row[j] * scale);
      float sum = 0.0f;
      for (long j = 0; j < seq; ++j) {
        row[j] = std::exp(row[j] * scale - mx);
        sum += row[j];
      }
      for (long j = 0; j < seq; ++j) row[j] /= sum;
    }
    gemm(s, v + off, nullptr, out + off, seq, dim, seq, 0);
  }
}
