// ATen compute in the binding that neither of the child's observers sees: RecordFunction off on
// this thread (at::DisableRecordFunctionGuard: no callback runs, neither the profiler's nor the
// execution trace's) and the Python dispatch keys excluded (the dispatch mode), both set back
// before returning. Only the module's symbols tell: at::enableRecordFunction and at::_ops calls.
#include <torch/extension.h>

#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include "../binding_registry.h"

namespace {

torch::Tensor aten_unobserved(torch::Tensor x) {
  at::DisableRecordFunctionGuard no_record_function;
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return at::relu(x * 2.0 + 1.0);
}

void register_redteam_aten_unobserved(pybind11::module& m) { m.def("aten_unobserved", &aten_unobserved); }

}  // namespace

REGISTER_BINDING(redteam_aten_unobserved, register_redteam_aten_unobserved);
