// ATen compute reached by name at run time: dlsym finds at::_ops::<op>::call and
// at::enableRecordFunction in libtorch_cpu, so the module imports neither, only dlopen and dlsym.
// RecordFunction is off and the Python keys excluded while it computes: the child's observers see
// nothing, and a check of the symbols that allowed dlsym would see nothing either.
#include <torch/extension.h>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <dlfcn.h>

#include "../binding_registry.h"

namespace {

template <typename Fn>
Fn lookup(const char* mangled) {
  static void* torch_cpu = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  void* found = torch_cpu == nullptr ? nullptr : dlsym(torch_cpu, mangled);
  TORCH_CHECK(found != nullptr, "not found: ", mangled);
  return reinterpret_cast<Fn>(found);
}

using MulScalar = at::Tensor (*)(const at::Tensor&, const c10::Scalar&);
using AddScalar = at::Tensor (*)(const at::Tensor&, const c10::Scalar&, const c10::Scalar&);
using Unary = at::Tensor (*)(const at::Tensor&);
using Switch = void (*)(bool);

// RecordFunction off until the end of the scope, through the looked-up switch.
struct Unrecorded {
  Switch enable = lookup<Switch>("_ZN2at20enableRecordFunctionEb");
  Unrecorded() { enable(false); }
  ~Unrecorded() { enable(true); }
};

torch::Tensor aten_by_name(torch::Tensor x) {
  const auto mul = lookup<MulScalar>("_ZN2at4_ops10mul_Scalar4callERKNS_6TensorERKN3c106ScalarE");
  const auto add = lookup<AddScalar>("_ZN2at4_ops10add_Scalar4callERKNS_6TensorERKN3c106ScalarES8_");
  const auto relu = lookup<Unary>("_ZN2at4_ops4relu4callERKNS_6TensorE");
  Unrecorded unrecorded;
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return relu(add(mul(x, 2.0), 1.0, 1.0));
}

void register_redteam_aten_by_name(pybind11::module& m) { m.def("aten_by_name", &aten_by_name); }

}  // namespace

REGISTER_BINDING(redteam_aten_by_name, register_redteam_aten_by_name);
