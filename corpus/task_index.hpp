// Reading a corpus set into task_spec records: what the rollout manager takes tasks from.
//
// A set directory holds index.json ({"set", "tasks": [{"id", "name", "level", "operators",
// "source", "sizes", "file", ...}]}) and one task program per entry (corpus/README.md).
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace cuda_agent::corpus {

// A set that cannot be read: one line naming the file, the problem and the fix.
struct corpus_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `set` is a directory holding index.json, or the name of a set under <corpus_dir>/tasks/.
std::filesystem::path resolve_set(const std::filesystem::path& corpus_dir, const std::string& set);

// Every task of the set, in index order, with its program text read into model_py. Metadata
// keys: "set", "file" (absolute path of the program), "sizes" (the JSON object as text), any
// other string or number field of the entry, and "demo" (absolute path of the demonstration
// folder) when the entry names one that exists.
std::vector<task_spec> load_task_set(const std::filesystem::path& set_dir);

}  // namespace cuda_agent::corpus
