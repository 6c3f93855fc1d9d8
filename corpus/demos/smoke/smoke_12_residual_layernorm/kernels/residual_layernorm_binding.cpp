#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

extern "C" void residual_layernorm_run(const float* x, const float* r, const float* w, const float* b,
                           float* y, long rows, long cols, float eps);

static torch::Tensor residual_layernorm_forward(torch::Tensor x, torch::Tensor residual, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
  check_input(x, "x");
  check_input(residual, "residual");
  TORCH_CHECK(residual.sizes() == x.sizes(), "residual must match x");
  check_input(weight, "weight");
  check_input(bias, "bias");
  const long cols = x.size(-1);
  TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias must match the last dim");
  auto y = torch::empty_like(x);
  residual_layernorm_run(x.data_ptr<float>(), residual.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
             y.data_ptr<float>(), x.numel() / cols, cols, (float)eps);
  return y;
}

static void register_residual_layernorm(pybind11::module& m) { m.def("residual_layernorm_forward", &residual_layernorm_forward); }
REGISTER_BINDING(residual_layernorm, register_residual_layernorm)
