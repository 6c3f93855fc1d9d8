
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

// fc1 into h, ReLU in place, fc2 into y.
extern "C" void mlp_run(const float* x, const float* w1, const float* b1, const float* w2,
                        const float* b2, float* h, float* y, long batch, long in, long hidden,
                        long out) {
  gemm(x, w1, b1, h, batch, hidden, in, 1);
  for (long i = 0; i < batch * hidden; ++i) h[i] = h[i] > 0.0f ? h[i] : 0.0f;
  gemm(h, w2, b2, y, batch, out, hidden, 1);
}
