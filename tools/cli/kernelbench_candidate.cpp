#include "tools/cli/kernelbench_candidate.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "tools/cli/commands.hpp"
#include "tools/cli/corpus_python.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;

// `python -m cuda_agent_corpus --json kernelbench-candidate ARGS...`: its one JSON line, with
// exit status 0 or 1 (converted or not); 2 is bad usage, anything else a failure of the tool.
nlohmann::json run_converter(const settings& config, const std::vector<std::string>& args) {
  std::vector<std::string> package_args{"--json", "kernelbench-candidate"};
  package_args.insert(package_args.end(), args.begin(), args.end());
  const auto result = run_corpus_python_call(corpus_python(config, package_args, std::size_t{16} << 20));
  const std::string reason = corpus_error_line(result.err);
  if (result.exited && result.exit_code == 2) throw usage_error{reason};
  if (!(result.exited && (result.exit_code == 0 || result.exit_code == 1)))
    throw std::runtime_error{"the KernelBench candidate converter " + result.describe() +
                             (reason.empty() ? "" : ": " + reason)};
  try {
    return nlohmann::json::parse(result.out);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error{std::string{"the KernelBench candidate converter printed no JSON: "} + e.what()};
  }
}

}  // namespace

nlohmann::json convert_kernelbench_candidate(const settings& config, const fs::path& file,
                                             const fs::path& out_dir) {
  if (!fs::is_regular_file(file))
    throw usage_error{"--kernelbench-file " + file.string() + " is not a file; give the candidate's model_new.py"};
  return run_converter(config, {fs::absolute(file).string(), "--out", fs::absolute(out_dir).string()});
}

nlohmann::json write_kernelbench_demonstrations(const settings& config, const fs::path& generations,
                                                const std::vector<std::string>& task_ids,
                                                const fs::path& out_root, const std::string& device) {
  if (!fs::is_directory(generations))
    throw usage_error{"--kernelbench-dir " + generations.string() +
                      " is not a directory; give the folder of generations (<task>.py or <task>/model_new.py)"};
  return run_converter(config, {"--generations", fs::absolute(generations).string(), "--tasks",
                                fmt::format("{}", fmt::join(task_ids, ",")), "--out",
                                fs::absolute(out_root).string(), "--device", device});
}

}  // namespace cuda_agent::cli
