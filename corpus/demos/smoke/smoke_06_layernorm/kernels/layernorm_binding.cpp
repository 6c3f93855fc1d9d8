#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

extern "C" void layernorm_run(const float* x, const float* r, const float* w, const float* b,
                           float* y, long rows, long cols, float eps);

static torch::Tensor layernorm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias,
                                    double eps) {
  check_input(x, "x");
  
  check_input(weight, "weight");
  check_input(bias, "bias");
  const long cols = x.size(-1);
  TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias must match the last dim");
  auto y = torch::empty_like(x);
  layernorm_run(x.data_ptr<float>(), nullptr, weight.data_ptr<float>(), bias.data_ptr<float>(),
             y.data_ptr<float>(), x.numel() / cols, cols, (float)eps);
  return y;
}

static void register_layernorm(pybind11::module& m) { m.def("layernorm_forward", &layernorm_forward); }
REGISTER_BINDING(layernorm, register_layernorm)
