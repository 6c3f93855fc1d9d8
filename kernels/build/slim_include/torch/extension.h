// The slim <torch/extension.h> the kernel build puts first on the include path of every source.
// It keeps what bindings use (ATen, torch::Tensor and its factories, pybind11 with the tensor
// casters) and leaves out the C++ frontend that torch/all.h adds (nn, optim, data, jit,
// serialize), which is most of the compile time. A file that needs more is compiled again
// with the real header, so no honest solution is rejected for this.
#pragma once

#include <torch/types.h>
#include <torch/utils.h>
#include <torch/csrc/Device.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/DynamicTypes.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/python_headers.h>
#include <torch/csrc/utils/pybind.h>
