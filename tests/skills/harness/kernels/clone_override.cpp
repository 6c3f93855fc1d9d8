// For the red team, built beside linear.cpp: a CPU kernel registered over aten::clone from the
// extension's C++ (TORCH_LIBRARY_IMPL), which the harness's own clones of each input set would
// run outside the clock.
#include <torch/extension.h>
#include <torch/library.h>

#include <cstring>

#include "../binding_registry.h"

namespace {

torch::Tensor clone_of(const torch::Tensor& x, std::optional<c10::MemoryFormat>) {
  auto out = at::empty_like(x);
  if (x.is_contiguous()) std::memcpy(out.data_ptr(), x.data_ptr(), x.nbytes());
  return out;
}

void register_clone_override(pybind11::module&) {}

}  // namespace

TORCH_LIBRARY_IMPL(aten, CPU, m) { m.impl("clone", &clone_of); }

REGISTER_BINDING(clone_override, register_clone_override);
