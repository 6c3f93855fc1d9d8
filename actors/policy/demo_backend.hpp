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
//
// In a checkpoint's tokens (policy.model_dir set: its tokenizer.json and chat format, no weights),
// for rejection fine-tuning on the demonstrations: each response also carries the exact token
// bookkeeping of the torch backend (episode_token_ledger.hpp). prompt_token_ids are the prompt
// tokens new to the episode; token_ids are the tokenizer's encoding of what the chat format
// renders as the turn's generated text (its content, tool call and end-of-turn token), as if the
// model had written the turn in canonical form. The demonstrator is not the model:
//   - logprobs are all 0, not log-probabilities of any weights (RFT does not use them);
//   - weight_version is -1, "sampled by no weights". Versions count the learner's updates from 0
//     (the checkpoint as loaded); the only use of a turn's version is staleness, current -
//     min(version), which for a demonstration is then larger than for any sampled turn, so an
//     off-policy filter drops it rather than taking its 0 log-probabilities for a rollout's.
// The turns are the demonstration's whatever the context budget.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/policy/episode_token_ledger.hpp"
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
  // policy.demo_dir, and with policy.model_dir set that checkpoint's tokens. Throws config_error
  // for a demo_dir that is not a directory or a model_dir without tokenizer.json;
  // model::model_error for a tokenizer or chat format that cannot be used.
  explicit demo_backend(const policy_settings& settings);

  policy_response complete(const policy_request& request) override;
  std::string name() const override { return "demo"; }

 private:
  // The response's tokens, for the checkpoint's tokenizer.
  void add_tokens(const policy_request& request, policy_response& response);

  std::filesystem::path root_;
  std::unique_ptr<episode_token_ledger> tokens_;  // null without policy.model_dir
  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<const demonstration>> loaded_;  // by task id
};

}  // namespace cuda_agent::policy
