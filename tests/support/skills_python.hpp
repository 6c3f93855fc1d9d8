// Runs Python code against the skills/ packages (the harness's own modules) and reads what it
// prints as JSON: how C++ tests compare a definition with its Python twin. Needs the test to
// define CUDA_AGENT_SOURCE_DIR and CUDA_AGENT_PYTHON; throws with Python's stderr on failure.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "actors/process/subprocess.hpp"

namespace cuda_agent::testing_support {

inline nlohmann::json skills_python_json(const std::string& code) {
  subprocess_options options;
  options.extra_env["PYTHONPATH"] = (std::filesystem::path{CUDA_AGENT_SOURCE_DIR} / "skills").string();
  const auto result = run_subprocess({CUDA_AGENT_PYTHON, "-c", code}, options);
  if (!result.ok()) throw std::runtime_error{"python: " + result.describe() + "\n" + result.err};
  return nlohmann::json::parse(result.out);
}

}  // namespace cuda_agent::testing_support
