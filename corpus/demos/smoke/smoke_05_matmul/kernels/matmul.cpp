
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

extern "C" void matmul_run(const float* a, const float* b, float* c, long m, long n, long k) {
  gemm(a, b, nullptr, c, m, n, k, 0);
}
