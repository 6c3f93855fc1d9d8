// 2x2 windows, stride 2, floor mode (a trailing odd row or column is dropped).
extern "C" void max_pool2d_run(const float* x, float* y, long planes, long h, long w) {
  const long oh = h / 2, ow = w / 2;
  for (long p = 0; p < planes; ++p)
    for (long i = 0; i < oh; ++i)
      for (long j = 0; j < ow; ++j) {
        const float* src = x + p * h * w + (2 * i) * w + 2 * j;
        float m = src[0];
        m = src[1] > m ? src[1] : m;
        m = src[w] > m ? src[w] : m;
        m = src[w + 1] > m ? src[w + 1] : m;
        y[p * oh * ow + i * ow + j] = m;
      }
}
