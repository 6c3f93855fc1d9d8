// The binding registry of the CUDA Agent workdir convention: each kernels/*.cpp registers its
// functions with REGISTER_BINDING(name, register_function); binding.cpp applies them all.
#pragma once

#include <torch/extension.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

class BindingRegistry {
 public:
  using Registrar = std::function<void(pybind11::module&)>;
  static BindingRegistry& getInstance() {
    static BindingRegistry registry;
    return registry;
  }
  void registerBinding(const std::string& name, Registrar registrar) {
    entries_.emplace_back(name, std::move(registrar));
  }
  void applyBindings(pybind11::module& m) {
    for (auto& entry : entries_) entry.second(m);
  }

 private:
  std::vector<std::pair<std::string, Registrar>> entries_;
};

#define REGISTER_BINDING(name, func)                                     \
  static bool binding_registered_##name = [] {                          \
    BindingRegistry::getInstance().registerBinding(#name, func);         \
    return true;                                                         \
  }();
