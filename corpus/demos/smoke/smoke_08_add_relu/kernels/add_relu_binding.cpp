#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

extern "C" void add_relu_run(const float* x, const float* y, float* out, long n);

static torch::Tensor add_relu_forward(torch::Tensor x, torch::Tensor y) {
  check_input(x, "x");
  check_input(y, "y");
  TORCH_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
  auto out = torch::empty_like(x);
  add_relu_run(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), x.numel());
  return out;
}

static void register_add_relu(pybind11::module& m) { m.def("add_relu_forward", &add_relu_forward); }
REGISTER_BINDING(add_relu, register_add_relu)
