// The learner's updates on the LibTorch policy (actors/model): one optimiser step of rejection
// fine-tuning, of value pretraining or of PPO over a batch of episode samples. The learner actor
// and `cuda-agent train` drive it; the math is ppo.hpp's, the micro-batches packing.hpp's.
//
//   learner l{actor, critic_backbone, options};
//   step_report r = l.ppo_step(samples);   // logp_old and V_old, GAE, then one AdamW step each
//
// Every loss is the token mean over the whole batch (ppo.hpp): each micro-batch's sum is divided
// by the batch's policy-token count before backward, so gradients accumulate to the same step
// whatever the token budget splits the batch into.
//
// The critic is a copy of the actor's transformer with a value head (a [1, hidden] weight and a
// bias, zero at start, so that V = 0 until it learns) on the final hidden states; V at position
// i is the value of the state before the policy token x_{i+1} (packing.hpp's alignment).
//
// Data parallelism (set_collective): every rank gets the whole batch, trains on its share
// (shard_of: the episodes dealt longest first to the rank with the fewest tokens), and the
// ranks sum token counts, loss statistics and gradients (collective.hpp) before the clipping
// and the optimiser step, which every rank then takes on the same numbers. The losses are the
// same token means as on one rank; only the order of the floating-point sums differs.
//
// PPO runs learner_options::ppo_epochs passes over its batch, each one optimiser step of each
// model, against the logp_old, V_old and advantages computed once before the first.
//
// Truncated (runaway) episodes, whose reason is turn_budget, token_budget or timeout, are treated
// as learner_options::truncated says: "penalty" (the default) trains on them with reward -1
// whatever the harness gave the workdir, "reward" keeps the harness's reward, "drop" leaves them
// out of the step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "actors/learner/collective.hpp"
#include "actors/learner/episode_sample.hpp"
#include "actors/learner/packing.hpp"
#include "actors/learner/ppo.hpp"
#include "actors/model/transformer.hpp"

namespace cuda_agent::learner {

struct learner_options {
  ppo_options ppo;
  double gamma = 1.0;
  double lambda = 0.95;
  double actor_lr = 3e-6;
  double critic_lr = 6e-6;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;      // per model, before the step; <= 0: no clipping
  int64_t token_budget = 16384;    // padded tokens per micro-batch
  int64_t ppo_epochs = 1;          // passes (optimiser steps) over each PPO batch
  int64_t logit_chunk_tokens = 4096;  // positions whose [chunk, vocab] logits exist at once; 0: all
  bool activation_checkpointing = false;  // actor and critic recompute each layer in the backward
  // The forward's matrix products and attention: "float32", or "bfloat16" under autocast against
  // the float32 weights, which with AdamW's states, the gradients and the losses stay float32.
  std::string compute_dtype = "float32";
  // With compute_dtype bfloat16: forwards and backwards run on bfloat16 copies of actor and critic
  // (model::transformer::training_copy: residual stream and norms in bfloat16 too), refreshed from
  // the float32 master weights at the start of each step (and PPO epoch), instead of autocast's
  // casts of each weight at each use. Gradients go to the master weights in float32 after each
  // micro-batch.
  bool bf16_working_weights = false;
  // The fused attention SDPA tries first on CUDA: "default" (ATen's order, flash first) or
  // "cudnn" (model::prefer_cudnn_attention; process-wide, set when the learner is made).
  std::string attention = "default";
  // AdamW and gradient clipping in multi-tensor kernels (fused_optimizer.hpp) rather than a few
  // kernels per parameter tensor; the same arithmetic in another order.
  bool fused_optimizer = true;
  std::string truncated = "penalty";  // "penalty", "reward" or "drop"
};

// What one step did; the loss statistics are sums over the batch (ppo.hpp's loss_stats).
struct step_report {
  std::string stage;  // "rft", "value_pretrain", "ppo"
  int64_t samples = 0;
  int64_t dropped = 0;  // truncated episodes left out ("drop")
  int64_t micro_batches = 0;
  int64_t tokens = 0;         // real tokens forwarded
  int64_t policy_tokens = 0;  // tokens the losses are averaged over
  double sft_loss = 0;        // rft: mean negative log-likelihood per policy token
  loss_stats stats;
  double actor_grad_norm = 0;   // before clipping (PPO: of the last epoch)
  double critic_grad_norm = 0;
  double reward_mean = 0;
};

class learner {
 public:
  // `critic` is a second transformer loaded from the actor's checkpoint (nullptr: RFT only).
  // Throws learner_error for options out of range.
  learner(std::shared_ptr<model::transformer> actor, std::shared_ptr<model::transformer> critic,
          learner_options options);

  // Supervised next-token loss on the policy tokens (RFT; the caller selects the samples).
  step_report rft_step(const std::vector<episode_sample>& samples);
  // The critic regressed on the Monte-Carlo return (gamma = 1: the outcome reward R at every
  // policy token), clipped around its own values before the step; the actor is untouched.
  step_report value_step(const std::vector<episode_sample>& samples);
  // One PPO step: logp_old and V_old from the current weights, GAE, then one AdamW step of the
  // actor on the clipped, importance-weighted policy loss and one of the critic on the clipped
  // value loss.
  step_report ppo_step(const std::vector<episode_sample>& samples);

  // Trains as one rank of `group` from now on (nullptr: alone). The ranks must hold the same
  // weights and optimiser states (load_state) before their first step together.
  void set_collective(std::shared_ptr<collective> group) { group_ = std::move(group); }

  // Every weight and optimiser state, as bytes that load_state of a learner built from the same
  // checkpoint and options reads back exactly (a rank's start, a step's retry).
  std::string save_state();
  void load_state(const std::string& bytes);
  // A checksum of every weight (actor, critic and value head); equal on ranks in step.
  double weights_digest() const;

  model::transformer& actor() { return *actor_; }
  torch::optim::AdamW& actor_optimizer() { return *actor_optimizer_; }
  torch::optim::AdamW* critic_optimizer() { return critic_optimizer_.get(); }
  // The critic's weights: the backbone's under their Hugging Face names, then "score.weight"
  // and "score.bias". Empty without a critic.
  std::vector<std::pair<std::string, torch::Tensor>> critic_parameters() const;

  // Values [B, L] (float32) of a micro-batch's positions. These two run on the working copies
  // where there are any, as the last step's start refreshed them.
  torch::Tensor values(const torch::Tensor& input_ids, const torch::Tensor& attention_mask);
  // The actor's log p of b's targets (and entropies), logit_chunk_tokens positions at a time.
  token_logprobs actor_logprobs(const micro_batch& b, bool with_entropy);

 private:
  std::vector<episode_sample> prepared(const std::vector<episode_sample>& samples, step_report& report) const;
  // The samples packed under the token budget on `device`, their tokens counted into `report`;
  // throws learner_error when no sample holds a policy token.
  std::vector<micro_batch> micro_batches(const std::vector<episode_sample>& samples, torch::Device device,
                                         step_report& report) const;
  void require_critic(const char* stage) const;
  // The final-norm hidden states of `model` over a micro-batch's tokens, in compute_dtype.
  torch::Tensor hidden_states(model::transformer& model, const torch::Tensor& input_ids,
                              const torch::Tensor& attention_mask) const;
  // The model the forwards run for `master` (actor_ or critic_): its bfloat16 working copy where
  // learner.bf16_working_weights is on, else the master itself.
  model::transformer& forward_model(const std::shared_ptr<model::transformer>& master);
  // Casts the master weights of `master` into its working copy (a no-op without copies). Each
  // step calls it first, whatever changed the master since: an optimiser step, load_state, or
  // a checkpoint read into the master's tensors (train --resume).
  void refresh_working_copy(const std::shared_ptr<model::transformer>& master);
  // Adds the working copy's gradients to the master weights' (float32) and clears them; a no-op
  // without working copies.
  void gradients_to_master(const std::shared_ptr<model::transformer>& master);
  // This rank's share of the samples (all of them alone).
  std::vector<episode_sample> share_of(const std::vector<episode_sample>& samples) const;
  // Sums the micro-batch and token counts over the ranks; throws learner_error when the batch
  // holds no policy token.
  void sum_counts(step_report& report) const;
  // Sums the gradients of `params` (a rank without samples adds zeros) and the statistics over
  // the ranks; a no-op alone.
  void reduce(const std::vector<torch::Tensor>& params, loss_stats& stats, double* extra_sum) const;

  std::shared_ptr<model::transformer> actor_;
  std::shared_ptr<model::transformer> critic_;
  learner_options options_;
  std::optional<torch::ScalarType> autocast_;  // compute_dtype other than float32, without working copies
  // learner.bf16_working_weights: a bfloat16 training copy per model, its weights and the master
  // model's in the same order (none without copies).
  struct working_copy {
    std::shared_ptr<model::transformer> model;
    std::vector<torch::Tensor> params;
    std::vector<torch::Tensor> master;
  };
  working_copy actor_work_, critic_work_;
  working_copy& working_copy_of(const std::shared_ptr<model::transformer>& master);
  torch::Tensor value_weight_;  // [1, hidden]
  torch::Tensor value_bias_;    // [1]
  std::vector<torch::Tensor> actor_params_;
  std::vector<torch::Tensor> critic_params_;
  std::unique_ptr<torch::optim::AdamW> actor_optimizer_;
  std::unique_ptr<torch::optim::AdamW> critic_optimizer_;
  std::shared_ptr<collective> group_;
};

// The indices of `lengths` that rank `rank` of `world` trains on, ascending: longest first to
// the rank with the fewest tokens so far (ties to the lower rank), so that shares are balanced
// in tokens and the same on every rank.
std::vector<std::size_t> shard_of(const std::vector<int64_t>& lengths, int rank, int world);

}  // namespace cuda_agent::learner
