// What a policy is to the rest of the system: something that, given the conversation so far,
// produces the agent's next turn. Backends block (HTTP, file reads); the policy actor runs each
// call on a thread of its own.
//
//   auto backend = make_policy_backend(policy_settings::from(config));
//   policy_response next = backend->complete(request);
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>

#include "config/settings.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::policy {

// The policy could not produce a turn: the server is unreachable or kept failing, the log has no
// such turn, a demonstration is broken. Says nothing about the agent (an episode that gets it
// ends with termination::infrastructure_failure). The message names the cause and the fix.
struct policy_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The [policy] settings (config/README.md documents each key).
struct policy_settings {
  std::string backend = "openai";  // openai | torch | replay | demo

  // openai
  std::string base_url = "http://127.0.0.1:8000/v1";
  std::string model;
  std::string api_key_env = "OPENAI_API_KEY";
  double temperature = 1.0;
  double top_p = 1.0;
  int32_t max_tokens = 8192;
  int64_t timeout_ms = 600000;
  int32_t retries = 4;
  int64_t retry_backoff_ms = 500;
  int64_t context_tokens = 131072;
  bool token_ids = true;
  std::filesystem::path tools_dir = "skills/tools";

  // torch (also uses temperature, top_p, max_tokens, context_tokens, tools_dir)
  std::filesystem::path model_dir;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string chat_format = "auto";
  int64_t top_k = 0;
  int64_t seed = 0;
  int64_t max_batch = 32;
  int64_t prefill_batch_tokens = 16384;
  bool batched_decode = true;
  bool cuda_graphs = false;
  int64_t cache_budget_mb = 8192;
  int64_t decode_pool_slots = 0;   // 0: no decode pool
  int64_t decode_pool_tokens = 0;

  // the policy actor's credit
  int32_t max_concurrency = 64;
  int32_t max_queue = 1024;
  int64_t max_wait_s = 1800;

  // replay
  std::filesystem::path replay_log;
  std::string replay_episode;

  // demo
  std::filesystem::path demo_dir = "corpus/demos";

  static policy_settings from(const settings& config);
};

class policy_backend {
 public:
  virtual ~policy_backend() = default;

  // The next turn for the conversation in `request`. Thread-safe: the policy actor calls it
  // from several threads at once. Throws policy_error when no turn can be produced.
  virtual policy_response complete(const policy_request& request) = 0;

  // "openai", "torch", "replay", "demo": what episodes record as their policy.
  virtual std::string name() const = 0;
};

// The backend named by settings.backend. Throws config_error when a setting it needs is missing
// or wrong (no model for openai, no log for replay, a tools directory without the schemas).
std::shared_ptr<policy_backend> make_policy_backend(const policy_settings& settings);

}  // namespace cuda_agent::policy
