// Direct 3x3 convolution, stride 1, zero padding 1, bias, then ReLU.
extern "C" void conv_relu_run(const float* x, const float* w, const float* b, float* y, long n,
                              long cin, long cout, long h, long wd) {
  for (long img = 0; img < n; ++img)
    for (long co = 0; co < cout; ++co) {
      float* out = y + (img * cout + co) * h * wd;
      for (long i = 0; i < h * wd; ++i) out[i] = b[co];
      for (long ci = 0; ci < cin; ++ci) {
        const float* in = x + (img * cin + ci) * h * wd;
        const float* k = w + (co * cin + ci) * 9;
        for (long r = 0; r < h; ++r)
          for (long c = 0; c < wd; ++c) {
            float acc = 0.0f;
            for (long dr = -1; dr <= 1; ++dr) {
              const long rr = r + dr;
              if (rr < 0 || rr >= h) continue;
              for (long dc = -1; dc <= 1; ++dc) {
                const long cc = c + dc;
                if (cc < 0 || cc >= wd) continue;
                acc += in[rr * wd + cc] * k[(dr + 1) * 3 + (dc + 1)];
              }
            }
            out[r * wd + c] += acc;
          }
      }
      for (long i = 0; i < h * wd; ++i) out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    }
}
