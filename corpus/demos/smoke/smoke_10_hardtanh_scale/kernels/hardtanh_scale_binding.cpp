#include <torch/extension.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CPU tensors; outputs are allocated here, computed in C++.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

extern "C" void hardtanh_scale_run(const float* x, float* y, long n);

static torch::Tensor hardtanh_scale_forward(torch::Tensor x) {
  check_input(x, "x");
  auto y = torch::empty_like(x);
  hardtanh_scale_run(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

static void register_hardtanh_scale(pybind11::module& m) { m.def("hardtanh_scale_forward", &hardtanh_scale_forward, "Clamp to [-1, 1], then times 3."); }
REGISTER_BINDING(hardtanh_scale, register_hardtanh_scale)
