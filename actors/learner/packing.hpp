// Episodes into padded micro-batches: which samples share a forward pass (pack), and the
// right-padded tensors of one micro-batch (make_micro_batch).
//
// Alignment (as veRL aligns it): position i of a row is the state x_{<=i} before the action
// x_{i+1}. The model's outputs at position i - the log-probability of x_{i+1}, the critic's value
// V(x_{<=i}) and so the advantage and return of x_{i+1} - all live at position i, and
//   targets[b,i]          = x_{i+1}                     (0 past the end)
//   target_mask[b,i]      = loss_mask of x_{i+1}        (false past the end and at the last token)
//   rollout_logprobs[b,i] = rollout log p of x_{i+1}    (0 past the end)
// so every [B,L] tensor of ppo.hpp is indexed the same way and target_mask is its `mask`. x_1 is
// never a target (nothing predicts it); the last position of a row predicts nothing.
//
//   for (const auto& group : pack(lengths, 16384)) {
//     micro_batch batch = make_micro_batch(samples, group, torch::kCUDA);
//     ...
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "actors/learner/episode_sample.hpp"

namespace cuda_agent::learner {

// Groups sample indices into micro-batches whose padded size (rows x longest row) is at most
// token_budget; a sample longer than the budget is a micro-batch of its own. First-fit-decreasing
// by length, ties by index, so the same lengths always give the same groups; within a group the
// indices are in decreasing length. Throws learner_error for a budget < 1 or a negative length.
std::vector<std::vector<std::size_t>> pack(const std::vector<int64_t>& lengths, int64_t token_budget);

struct micro_batch {
  std::vector<std::size_t> samples;  // indices into the samples given to make_micro_batch, row order
  torch::Tensor input_ids;           // [B,L] int64, right-padded with 0; L = the longest row
  torch::Tensor attention_mask;      // [B,L] int64, 1 on real tokens
  torch::Tensor targets;             // [B,L] int64, x_{i+1}
  torch::Tensor target_mask;         // [B,L] bool, loss_mask of x_{i+1}
  torch::Tensor rollout_logprobs;    // [B,L] float32, of x_{i+1}
  torch::Tensor rewards;             // [B] float32
  int64_t real_tokens = 0;    // sum of the rows' lengths
  int64_t policy_tokens = 0;  // true entries of target_mask: the tokens the losses sum over
};

// The padded tensors of samples[indices], on `device`. Throws learner_error naming the episode
// when its tokens, loss_mask and rollout_logprobs differ in length or it has no tokens, and for an
// empty or out-of-range selection.
micro_batch make_micro_batch(const std::vector<episode_sample>& samples, const std::vector<std::size_t>& indices,
                             torch::Device device);

}  // namespace cuda_agent::learner
