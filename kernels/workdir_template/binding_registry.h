// Provided by the system; the build always uses this copy, whatever a solution holds under
// this name. A binding file registers its Python functions at load time:
//
//   void register_my_op(pybind11::module& m) { m.def("my_op", &my_op); }
//   REGISTER_BINDING(my_op, register_my_op);
//
// binding.cpp then applies every registration to the module `cuda_extension` when Python
// imports it.
#pragma once

#include <torch/extension.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

// Hidden like pybind11's own types: one registry per module, shared by its files only.
class __attribute__((visibility("hidden"))) BindingRegistry {
 public:
  using BindingFunction = std::function<void(pybind11::module&)>;

  static BindingRegistry& getInstance() {
    static BindingRegistry registry;  // built on first use, so registration order never matters
    return registry;
  }

  void registerBinding(const std::string& name, BindingFunction function) {
    bindings_.emplace_back(name, std::move(function));
  }

  void applyBindings(pybind11::module& m) {
    for (auto& [name, function] : bindings_) function(m);
  }

 private:
  BindingRegistry() = default;
  std::vector<std::pair<std::string, BindingFunction>> bindings_;
};

#define REGISTER_BINDING(name, function)                                      \
  namespace {                                                                 \
  struct name##_binding_registrar {                                           \
    name##_binding_registrar() {                                              \
      BindingRegistry::getInstance().registerBinding(#name, function);        \
    }                                                                         \
  };                                                                          \
  const name##_binding_registrar name##_binding_registrar_instance;           \
  }
