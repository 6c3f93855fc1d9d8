#include <torch/extension.h>

// out[i] = max(in[i], 0), one pass over contiguous float32 input.
torch::Tensor relu_forward(torch::Tensor input) {
  auto x = input.contiguous();
  auto out = torch::empty_like(x);
  const float* in = x.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) o[i] = in[i] > 0.f ? in[i] : 0.f;
  return out;
}
