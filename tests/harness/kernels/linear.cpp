// CPU kernel for the linear_relu task: y = relu(x W^T + b), a plain triple loop.
#include <torch/extension.h>

#include "../binding_registry.h"

namespace {

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "contiguous inputs expected");
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  auto y = torch::empty({n, m}, x.options());
  const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
  float* py = y.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float acc = pb[j];
      for (int64_t t = 0; t < k; ++t) acc += px[i * k + t] * pw[j * k + t];
      py[i * m + j] = acc > 0.0f ? acc : 0.0f;
    }
  return y;
}

void register_linear(pybind11::module& m) { m.def("linear_relu", &linear_relu); }

}  // namespace

REGISTER_BINDING(linear, register_linear);
