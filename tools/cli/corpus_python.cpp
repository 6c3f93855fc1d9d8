#include "tools/cli/corpus_python.hpp"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"

namespace cuda_agent::cli {

corpus_python_call corpus_python(const settings& config, const std::vector<std::string>& package_args,
                                 std::size_t max_output_bytes) {
  corpus_python_call call;
  call.argv = {config.get_string("harness.python"), "-m", "cuda_agent_corpus"};
  call.argv.insert(call.argv.end(), package_args.begin(), package_args.end());
  call.options.timeout = std::chrono::seconds{config.get_int("corpus.timeout_s")};
  call.options.max_output_bytes = max_output_bytes;
  const char* existing = std::getenv("PYTHONPATH");
  call.options.extra_env["PYTHONPATH"] = std::filesystem::absolute(corpus_root(config)).string() +
                                         (existing && *existing ? std::string{":"} + existing : "");
  return call;
}

subprocess_result run_corpus_python_call(const corpus_python_call& call) {
  try {
    return run_subprocess(call.argv, call.options);
  } catch (const std::system_error& e) {
    throw usage_error{"harness.python '" + call.argv[0] + "' cannot be started (" + e.what() +
                      "); set harness.python to a Python with torch 2.11.0"};
  }
}

std::string corpus_error_line(const std::string& err) {
  const std::size_t last = err.find_last_not_of("\n ");
  if (last == std::string::npos) return {};
  const std::size_t newline = err.rfind('\n', last);
  const std::size_t begin = newline == std::string::npos ? 0 : newline + 1;
  std::string reason = err.substr(begin, last + 1 - begin);
  const std::string prefix = "cuda-agent corpus: error: ";
  if (reason.rfind(prefix, 0) == 0) reason.erase(0, prefix.size());
  return reason;
}

}  // namespace cuda_agent::cli
