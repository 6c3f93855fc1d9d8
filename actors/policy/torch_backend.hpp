// The policy as a LibTorch model in this process (policy.backend = "torch"): a Hugging Face
// checkpoint of the Llama, Qwen2 or Qwen3 families (actors/model), sampled by the generation
// engine, which batches the turns of all episodes and keeps each episode's KV cache between its
// turns.
//
// Every turn's tokens are exact, never re-tokenised from text (episode_token_ledger.hpp): the
// episode's first prompt as rendered and encoded, then for each turn the sampled tokens as
// sampled, then the chat format's text for what came back encoded on its own. A turn's response
// carries the new prompt tokens (prompt_token_ids), the sampled ones with their log-probabilities
// (token_ids, logprobs) and the weight version that sampled them, so that the trajectory is the
// sequence the model saw. A conversation that is not the continuation of what the backend last
// answered for the episode is rendered and encoded again in full; its response says so in
// context_action ("rerendered").
//
// Sampling is deterministic: each turn draws from a generator seeded by policy.seed, the episode
// id and the turn, whatever else shares its batch.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/model/chat_format.hpp"
#include "actors/model/generation_engine.hpp"
#include "actors/model/tokenizer.hpp"
#include "actors/model/transformer.hpp"
#include "actors/policy/episode_token_ledger.hpp"
#include "actors/policy/policy_backend.hpp"

namespace cuda_agent::policy {

class torch_backend final : public policy_backend {
 public:
  // Loads policy.model_dir on policy.device in policy.dtype. Throws config_error for a missing
  // model_dir, a bad device or a stop string that is not one token; model::model_error for a
  // checkpoint that cannot be used.
  explicit torch_backend(const policy_settings& settings);
  // Logs what the engine did over the backend's life (prefill, cache reuse, decode steps,
  // evictions, decode pool handovers): the one place a rollout shows how generation went.
  ~torch_backend() override;

  policy_response complete(const policy_request& request) override;
  std::string name() const override { return "torch"; }

  // New weights (Hugging Face names) for the turns sampled from now on; see
  // model::generation_engine::update_weights.
  void update_weights(std::vector<std::pair<std::string, torch::Tensor>> weights, int64_t version);

  const model::tokenizer& tokenizer() const { return ledger_->tokenizer(); }
  const model::chat_format& format() const { return ledger_->format(); }
  model::engine_stats stats() const { return engine_->stats(); }

 private:
  policy_settings settings_;
  std::unique_ptr<episode_token_ledger> ledger_;
  std::vector<int64_t> stop_ids_;
  std::shared_ptr<model::transformer> model_;
  std::unique_ptr<model::generation_engine> engine_;
};

// The device and dtype that policy.device and policy.dtype name; throws config_error.
torch::Device torch_device(const std::string& name);
torch::ScalarType torch_dtype(const std::string& name, const torch::Device& device);

}  // namespace cuda_agent::policy
