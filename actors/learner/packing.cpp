#include "actors/learner/packing.hpp"

#include <algorithm>
#include <numeric>
#include <string>

namespace cuda_agent::learner {

std::vector<std::vector<std::size_t>> pack(const std::vector<int64_t>& lengths, int64_t token_budget) {
  if (token_budget < 1) {
    throw learner_error("token budget " + std::to_string(token_budget) +
                        " cannot hold a token; set the micro-batch token budget to at least 1");
  }
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 0) {
      throw learner_error("sample " + std::to_string(i) + " has negative length " + std::to_string(lengths[i]));
    }
  }
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  // Decreasing order makes each group's first sample its longest row, so a group of n rows whose
  // first has length l pads to n * l.
  std::vector<std::vector<std::size_t>> groups;
  for (const std::size_t index : order) {
    auto fits = [&](const std::vector<std::size_t>& g) {
      return static_cast<int64_t>(g.size() + 1) * lengths[g.front()] <= token_budget;
    };
    auto it = std::find_if(groups.begin(), groups.end(), fits);
    if (it == groups.end()) {
      groups.push_back({index});
    } else {
      it->push_back(index);
    }
  }
  return groups;
}

micro_batch make_micro_batch(const std::vector<episode_sample>& samples, const std::vector<std::size_t>& indices,
                             torch::Device device) {
  if (indices.empty()) throw learner_error("a micro-batch needs at least one sample; pass a group from pack()");
  int64_t longest = 0;
  for (const std::size_t index : indices) {
    if (index >= samples.size()) {
      throw learner_error("sample index " + std::to_string(index) + " is out of range for " +
                          std::to_string(samples.size()) + " samples");
    }
    const episode_sample& s = samples[index];
    if (s.tokens.empty()) throw learner_error("episode " + s.episode_id + " has no tokens; drop it before packing");
    if (s.loss_mask.size() != s.tokens.size() || s.rollout_logprobs.size() != s.tokens.size()) {
      throw learner_error("episode " + s.episode_id + " has " + std::to_string(s.tokens.size()) + " tokens, " +
                          std::to_string(s.loss_mask.size()) + " loss_mask entries and " +
                          std::to_string(s.rollout_logprobs.size()) +
                          " rollout_logprobs; they must be one per token");
    }
    longest = std::max(longest, s.size());
  }
  const auto rows = static_cast<int64_t>(indices.size());
  micro_batch batch;
  batch.samples = indices;
  torch::Tensor input_ids = torch::zeros({rows, longest}, torch::kInt64);
  torch::Tensor attention_mask = torch::zeros({rows, longest}, torch::kInt64);
  torch::Tensor targets = torch::zeros({rows, longest}, torch::kInt64);
  torch::Tensor target_mask = torch::zeros({rows, longest}, torch::kBool);
  torch::Tensor rollout_logprobs = torch::zeros({rows, longest}, torch::kFloat32);
  torch::Tensor rewards = torch::zeros({rows}, torch::kFloat32);
  auto ids = input_ids.accessor<int64_t, 2>();
  auto attention = attention_mask.accessor<int64_t, 2>();
  auto next = targets.accessor<int64_t, 2>();
  auto next_mask = target_mask.accessor<bool, 2>();
  auto next_logprob = rollout_logprobs.accessor<float, 2>();
  auto reward = rewards.accessor<float, 1>();
  for (int64_t b = 0; b < rows; ++b) {
    const episode_sample& s = samples[indices[static_cast<std::size_t>(b)]];
    const int64_t n = s.size();
    for (int64_t i = 0; i < n; ++i) {
      const auto t = static_cast<std::size_t>(i);
      ids[b][i] = s.tokens[t];
      attention[b][i] = 1;
      if (i + 1 < n) {
        next[b][i] = s.tokens[t + 1];
        next_mask[b][i] = s.loss_mask[t + 1] != 0;
        next_logprob[b][i] = s.rollout_logprobs[t + 1];
        batch.policy_tokens += s.loss_mask[t + 1] != 0;
      }
    }
    reward[b] = static_cast<float>(s.reward);
    batch.real_tokens += n;
  }
  batch.input_ids = input_ids.to(device);
  batch.attention_mask = attention_mask.to(device);
  batch.targets = targets.to(device);
  batch.target_mask = target_mask.to(device);
  batch.rollout_logprobs = rollout_logprobs.to(device);
  batch.rewards = rewards.to(device);
  return batch;
}

}  // namespace cuda_agent::learner
