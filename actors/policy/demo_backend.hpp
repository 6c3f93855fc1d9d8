// The policy that plays demonstrations: a scripted agent that runs through the live pipeline
// (tools, compiler, GPU pool, reward) exactly as a model would.
//
// A demonstration is corpus/demos/<set>/<task_id>/demo.json:
//   {"task_id": "L1-19", "device": "cpu" | "cuda",
//    "steps": [{"thought": "...", "tool": "Write", "arguments": {...}}, ...],
//    "final": "..."}
// Turn i (the number of assistant messages already in the conversation) answers with step i:
// its thought as the content and one call of its tool with a fresh call id. An argument written
// {"$file": "relative/path"} is replaced by the text of that file inside the demo folder, so
// solution files stay real files. After the last step it answers `final` with no tool call and
// finish_reason "stop" (the agent is done); a request after that is a policy_error.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/policy_backend.hpp"

namespace cuda_agent::policy {

struct demo_step {
  std::string thought;
  std::string tool;
  nlohmann::json arguments;  // with every {"$file": ...} already replaced by the file's text
};

struct demonstration {
  std::filesystem::path dir;  // the folder holding demo.json and its files
  std::string task_id;
  std::string device;
  std::vector<demo_step> steps;
  std::string final;
};

// Reads and checks one demo.json, resolving its {"$file": ...} arguments. Throws policy_error
// naming the file and what is wrong with it (a missing field, an unknown tool, a $file that is
// absent or points outside the demo folder).
demonstration load_demonstration(const std::filesystem::path& demo_json);

// <root>/<task_id>/demo.json, else the one <root>/<set>/<task_id>/demo.json. Throws
// policy_error when there is none or when several sets hold the task.
std::filesystem::path find_demonstration(const std::filesystem::path& root,
                                         const std::string& task_id);

// The response for turn `step` of a demonstration (step == steps.size(): the final answer).
policy_response demo_turn(const demonstration& demo, size_t step, const policy_request& request);

class demo_backend final : public policy_backend {
 public:
  // Throws config_error when `root` is not a directory.
  explicit demo_backend(std::filesystem::path root);

  policy_response complete(const policy_request& request) override;
  std::string name() const override { return "demo"; }

 private:
  std::filesystem::path root_;
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const demonstration>> loaded_;  // by task id
};

}  // namespace cuda_agent::policy
