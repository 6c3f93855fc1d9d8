#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps);

static torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
  check_input(x, "x");
  check_input(weight, "weight");
  const long cols = x.size(-1);
  TORCH_CHECK(weight.numel() == cols, "weight must match the last dimension");
  auto y = torch::empty_like(x);
  rmsnorm_run(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
              x.numel() / cols, cols, (float)eps);
  return y;
}

static void register_rmsnorm(pybind11::module& m) { m.def("rmsnorm_forward", &rmsnorm_forward); }
REGISTER_BINDING(rmsnorm, register_rmsnorm)
