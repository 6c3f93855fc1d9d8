// ATen's CPU kernels called past the dispatcher: at::cpu::add and at::cpu::clamp_min (structured
// kernels; at::cpu::relu would dispatch clamp_min) run the kernel itself, so there is no
// RecordFunction event and no dispatch-mode call to see, and nothing needs switching off. The one
// operator that is dispatched is an allowed allocation.
#include <torch/extension.h>

#include <ATen/ops/add_cpu_dispatch.h>
#include <ATen/ops/clamp_min_cpu_dispatch.h>

#include "../binding_registry.h"

namespace {

torch::Tensor aten_cpu_kernels(torch::Tensor x) {
  auto one = torch::empty({}, x.options());
  *one.data_ptr<float>() = 1.0f;  // the only element written by hand
  return at::cpu::clamp_min(at::cpu::add(at::cpu::add(x, x), one), 0);
}

void register_redteam_aten_kernels(pybind11::module& m) { m.def("aten_cpu_kernels", &aten_cpu_kernels); }

}  // namespace

REGISTER_BINDING(redteam_aten_kernels, register_redteam_aten_kernels);
