// Runs the cuda-agent binary under test (CUDA_AGENT_BINARY, set by CTest) with arguments.
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/process/subprocess.hpp"

namespace cuda_agent::testing {

inline subprocess_result cli(std::vector<std::string> args,
                             std::chrono::milliseconds timeout = std::chrono::seconds{120},
                             const std::filesystem::path& working_dir = {}) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  if (!binary) throw std::runtime_error{"CUDA_AGENT_BINARY is not set (run through ctest)"};
  args.insert(args.begin(), binary);
  subprocess_options options;
  options.timeout = timeout;
  options.working_dir = working_dir;
  return run_subprocess(args, options);
}

}  // namespace cuda_agent::testing
