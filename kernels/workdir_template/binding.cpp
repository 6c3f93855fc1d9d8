// Provided by the system; the build always uses this copy. Defines the module `cuda_extension`
// from every REGISTER_BINDING in kernels/*_binding.cpp.
#include <torch/extension.h>

#include "binding_registry.h"

PYBIND11_MODULE(cuda_extension, m) { BindingRegistry::getInstance().applyBindings(m); }
