#include "tools/cli/libtorch_check.hpp"

#include <ATen/ATen.h>
#include <torch/version.h>

namespace cuda_agent::cli {

std::string libtorch_version() { return TORCH_VERSION; }

std::string libtorch_smoke_test() {
  try {
    const auto x = at::arange(1, 5, at::kFloat);  // 1 2 3 4
    const float dot = (x * x).sum().item<float>();
    if (dot != 30.0f) return "sum of squares of 1..4 gave " + std::to_string(dot) + ", expected 30";
    return {};
  } catch (const std::exception& e) {
    const std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
}

}  // namespace cuda_agent::cli
