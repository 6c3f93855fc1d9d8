// ATen compute in the binding, with nothing switched off (aten_forward) and with the Python
// dispatch keys excluded, which hides it from the dispatch mode but not from RecordFunction
// (aten_python_key_excluded). Either way the module imports at::_ops::relu::call and its kin,
// which the harness's check of its symbols refuses before loading it (native_code.py).
#include <torch/extension.h>

#include <c10/core/impl/LocalDispatchKeySet.h>

#include "../binding_registry.h"

namespace {

torch::Tensor aten_forward(torch::Tensor x) { return at::relu(x * 2.0 + 1.0); }

// A TorchDispatchMode on the stack (the harness's ForwardDispatchGuard) is never consulted.
torch::Tensor aten_python_key_excluded(torch::Tensor x) {
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return at::relu(x * 2.0 + 1.0);
}

void register_redteam_aten(pybind11::module& m) {
  m.def("aten_forward", &aten_forward);
  m.def("aten_python_key_excluded", &aten_python_key_excluded);
}

}  // namespace

REGISTER_BINDING(redteam_aten, register_redteam_aten);
