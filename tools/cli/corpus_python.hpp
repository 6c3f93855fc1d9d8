// Running the corpus package (`python -m cuda_agent_corpus ...`, corpus/cuda_agent_corpus) with
// the configured harness.python: the one way `corpus`, `check --kernelbench-file` and
// `eval --kernelbench-dir` start it, and read its last error line back.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "actors/process/subprocess.hpp"
#include "config/settings.hpp"

namespace cuda_agent::cli {

// argv and options for `harness.python -m cuda_agent_corpus PACKAGE_ARGS...`: corpus.timeout_s,
// the package's folder first on PYTHONPATH, at most `max_output_bytes` of output kept.
struct corpus_python_call {
  std::vector<std::string> argv;
  subprocess_options options;
};
corpus_python_call corpus_python(const settings& config, const std::vector<std::string>& package_args,
                                 std::size_t max_output_bytes);

// run_subprocess on the call; a python that cannot be started is a usage_error naming
// harness.python.
subprocess_result run_corpus_python_call(const corpus_python_call& call);

// The package's one-line reason: the last non-empty line of its standard error, without the
// "cuda-agent corpus: error: " prefix it writes before a usage error (exit status 2).
std::string corpus_error_line(const std::string& err);

}  // namespace cuda_agent::cli
