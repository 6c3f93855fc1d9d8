// The learner's per-token math on torch::Tensor (formulas in /work/shared/RL.md): log-probabilities
// and entropies from logits, token-level GAE over the policy tokens, and the PPO, value and SFT
// losses, each as a SUM over the masked tokens of a micro-batch.
//
// Aggregation is the token mean over the whole batch, as DAPO does: the caller sums each loss
// over all micro-batches of a step and divides by the batch's policy-token count (the sum of
// micro_batch::policy_tokens), so a long episode weighs by its length and a micro-batch split
// changes nothing. loss_stats keeps sums and counts for the same reason.
//
// All [B,L] tensors use make_micro_batch's alignment (packing.hpp): position i holds what belongs
// to the policy token x_{i+1} (its log-probability, the value of the state before it, its
// advantage), and `mask` is micro_batch::target_mask.
//
//   auto [logp, entropy] = logprobs_of(logits, batch.targets, true);
//   auto adv = gae(values_old, batch.target_mask, batch.rewards, 1.0, 0.95);
//   loss_stats stats;
//   auto loss = policy_loss_sum(logp, logp_old, batch.rollout_logprobs, adv.advantages,
//                               batch.target_mask, options, stats, {}, entropy) / batch_tokens;
#pragma once

#include <cstdint>

#include <torch/torch.h>

namespace cuda_agent::learner {

struct token_logprobs {
  torch::Tensor logprobs;  // [B,L] log p(target)
  torch::Tensor entropy;   // [B,L] entropy of each position's distribution; undefined if not asked
};

// log p of each target under softmax(logits) and, with_entropy, each position's entropy, both
// differentiable. logits [B,L,V] float32, targets [B,L] int64. Without entropy nothing of size
// V is kept beyond what autograd needs: log p = logit[target] - logsumexp(logits). The entropy
// uses the same logsumexp: H = logsumexp(z) - sum(softmax(z) * z).
token_logprobs logprobs_of(const torch::Tensor& logits, const torch::Tensor& targets, bool with_entropy);

// The same values and gradients from the hidden states [B,L,H] and the output head's weight
// [V,H], chunk_tokens positions at a time, never holding more than one chunk's [chunk,V]
// logits: the backward recomputes each chunk's logits instead of keeping them (a 32k-token
// episode over a 152k vocabulary is 20 GB of float32 logits per copy). The logits are
// linear(hidden, weight) cast to float32, as transformer::logits computes them, with the
// weight cast to hidden's dtype first (bfloat16 hidden states: a bfloat16 head, float32
// gradients for a float32 weight); gradients flow to both hidden and weight. chunk_tokens <= 0:
// one chunk of all positions.
token_logprobs logprobs_of_hidden(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, bool with_entropy, int64_t chunk_tokens);

struct gae_result {
  torch::Tensor advantages;  // [B,L], 0 where mask is 0
  torch::Tensor returns;     // advantages + values (the value target G), 0 where mask is 0
};

// Token-level GAE over each row's masked (policy) positions only: positions with mask 0 are
// skipped, not steps, so observation tokens between turns neither discount nor add a delta. The
// row's reward sits at its last masked position and V after it is 0; gamma = lambda = 1 gives
// R - V. values [B,L] (detached here), mask [B,L] bool, rewards [B]. Computed on the CPU in
// float64 (one pass per row; a CUDA input is copied over and the result copied back), returned
// in the dtype and on the device of values.
gae_result gae(const torch::Tensor& values, const torch::Tensor& mask, const torch::Tensor& rewards,
               double gamma, double lambda);

struct ppo_options {
  double clip_low = 0.2;    // rho is clipped to [1 - clip_low, 1 + clip_high] (DAPO's clip-higher)
  double clip_high = 0.28;
  double value_clip = 0.2;  // V may move at most this far from V_old before its loss is clipped
  double is_cap = 2.0;      // C of the truncated importance weight min(pi_old / pi_rollout, C)
  double kl_coef = 0.0;     // k3 KL to a frozen reference; 0 = off
  double entropy_coef = 0.0;
};

// Sums and counts over tokens, so that micro-batches (and data-parallel ranks) add up; the
// accessors divide. The policy statistics count over policy_loss_sum's tokens, the value ones
// over value_loss_sum's value_tokens.
struct loss_stats {
  int64_t tokens = 0;
  double policy_loss_sum = 0;  // of w * L_pi
  int64_t clipped = 0;         // tokens where the clipped term was the larger loss
  double approx_kl_sum = 0;    // of 0.5 * (logp_old - logp)^2
  double entropy_sum = 0;      // where an entropy was given
  double ratio_sum = 0;
  double ratio_max = 0;
  double is_weight_sum = 0;
  double is_weight_max = 0;
  int64_t is_capped = 0;   // tokens whose weight exceeded is_cap
  double kl_ref_sum = 0;   // of k3, where a reference was given
  int64_t value_tokens = 0;
  double value_loss_sum = 0;
  int64_t value_clipped = 0;  // tokens where the clipped value loss was the larger

  void add(const loss_stats& other);

  double policy_loss() const { return per_token(policy_loss_sum, tokens); }
  double clip_fraction() const { return per_token(static_cast<double>(clipped), tokens); }
  double approx_kl() const { return per_token(approx_kl_sum, tokens); }
  double entropy() const { return per_token(entropy_sum, tokens); }
  double ratio_mean() const { return per_token(ratio_sum, tokens); }
  double is_weight_mean() const { return per_token(is_weight_sum, tokens); }
  double is_capped_fraction() const { return per_token(static_cast<double>(is_capped), tokens); }
  double kl_ref() const { return per_token(kl_ref_sum, tokens); }
  double value_loss() const { return per_token(value_loss_sum, value_tokens); }
  double value_clip_fraction() const { return per_token(static_cast<double>(value_clipped), value_tokens); }

 private:
  static double per_token(double sum, int64_t n) { return n == 0 ? 0.0 : sum / static_cast<double>(n); }
};

// The SUM over masked tokens of w * L_pi (+ kl_coef * k3 where logp_ref is defined,
// - entropy_coef * entropy where entropy is defined), with
//   rho  = exp(logp - logp_old),  L_pi = -min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A),
//   w    = min(exp(logp_old - logp_rollout), is_cap)  (no gradient through w),
//   k3   = exp(q) - q - 1, q = logp_ref - logp.
// The gradient flows through logp (and entropy) only. Divide by the batch's policy-token count.
// Adds this micro-batch's statistics to `stats`.
torch::Tensor policy_loss_sum(const torch::Tensor& logp, const torch::Tensor& logp_old,
                              const torch::Tensor& logp_rollout, const torch::Tensor& advantages,
                              const torch::Tensor& mask, const ppo_options& options, loss_stats& stats,
                              const torch::Tensor& logp_ref = {}, const torch::Tensor& entropy = {});

// The SUM over masked tokens of 0.5 * max((V - G)^2, (V_old + clip(V - V_old, -eps, eps) - G)^2),
// eps = value_clip; the gradient flows through values only.
torch::Tensor value_loss_sum(const torch::Tensor& values, const torch::Tensor& values_old,
                             const torch::Tensor& returns, const torch::Tensor& mask, double value_clip,
                             loss_stats& stats);

// RFT's next-token loss: -(sum of logp over masked tokens).
torch::Tensor sft_loss_sum(const torch::Tensor& logp, const torch::Tensor& mask);

}  // namespace cuda_agent::learner
