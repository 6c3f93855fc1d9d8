// For the red team: the linear_relu kernel, and a CPU kernel registered over aten::clone from the
// extension's C++ (TORCH_LIBRARY_IMPL), which the harness's own clones of each input set would
// run outside the clock.
#include <torch/extension.h>
#include <torch/library.h>

#include <cstring>

#include "../binding_registry.h"

namespace {

torch::Tensor linear_relu_plain(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
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

torch::Tensor clone_of(const torch::Tensor& x, std::optional<c10::MemoryFormat>) {
  auto out = at::empty_like(x);
  if (x.is_contiguous()) std::memcpy(out.data_ptr(), x.data_ptr(), x.nbytes());
  return out;
}

void register_clone_override(pybind11::module& m) { m.def("linear_relu_plain", &linear_relu_plain); }

}  // namespace

TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("clone", &clone_of); }

REGISTER_BINDING(clone_override, register_clone_override);
