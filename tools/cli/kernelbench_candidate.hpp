// KernelBench-format candidates (one model_new.py whose ModelNew builds its kernels with
// torch.utils.cpp_extension.load_inline) turned into what cuda-agent judges: a solution workdir
// for `check --kernelbench-file`, demonstrations that write and judge them for
// `eval --kernelbench-dir`. The conversion reads the program text without running it
// (corpus/cuda_agent_corpus/kernelbench_candidate.py says what it accepts).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/settings.hpp"

namespace cuda_agent::cli {

// The candidate `file` laid out as a solution in `out_dir`. Returns the conversion record
// ({"ok": true, "format", "built_with", "modules", "files"} or {"ok": false, "error"}): a program
// that cannot be converted is the candidate's failure, not an error of the run.
nlohmann::json convert_kernelbench_candidate(const settings& config, const std::filesystem::path& file,
                                             const std::filesystem::path& out_dir);

// One demonstration per task under `out_root` (policy.demo_dir for the eval) from the generations
// in `generations` (<task>.py or <task>/model_new.py). Returns {"converted", "not_converted",
// "tasks": {id: record}}; a task without a generation is a usage_error naming it.
nlohmann::json write_kernelbench_demonstrations(const settings& config,
                                                const std::filesystem::path& generations,
                                                const std::vector<std::string>& task_ids,
                                                const std::filesystem::path& out_root,
                                                const std::string& device);

}  // namespace cuda_agent::cli
