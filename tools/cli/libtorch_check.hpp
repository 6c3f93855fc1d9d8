// The LibTorch parts of `cuda-agent doctor`, compiled apart from the rest of the binary: torch's
// include directory carries its own fmt, which must not meet the system fmt that spdlog uses.
#pragma once

#include <string>

namespace cuda_agent::cli {

std::string libtorch_version();
// Runs a small tensor computation; returns an empty string on success, else what went wrong.
std::string libtorch_smoke_test();

}  // namespace cuda_agent::cli
