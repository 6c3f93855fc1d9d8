#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

extern "C" void row_sum_run(const float* x, float* y, long rows, long cols);

static torch::Tensor row_sum_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D");
  auto y = torch::empty({x.size(0)}, x.options());
  row_sum_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1));
  return y;
}

static void register_row_sum(pybind11::module& m) { m.def("row_sum_forward", &row_sum_forward); }
REGISTER_BINDING(row_sum, register_row_sum)
