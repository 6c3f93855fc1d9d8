#include "actors/learner/learner.hpp"

#include <cmath>
#include <limits>

namespace cuda_agent::learner {
namespace {

bool is_truncated(termination reason) {
  return reason == termination::turn_budget || reason == termination::token_budget ||
         reason == termination::timeout;
}

std::vector<torch::Tensor> tensors_of(const std::vector<std::pair<std::string, torch::Tensor>>& named) {
  std::vector<torch::Tensor> out;
  out.reserve(named.size());
  for (const auto& [name, tensor] : named) out.push_back(tensor);
  return out;
}

// The gradient norm before clipping (clipping only where max_norm > 0).
double clip_gradients(const std::vector<torch::Tensor>& params, double max_norm) {
  std::vector<torch::Tensor> with_grad;
  for (const auto& p : params)
    if (p.grad().defined()) with_grad.push_back(p);
  if (with_grad.empty()) return 0.0;
  const double limit = max_norm > 0 ? max_norm : std::numeric_limits<double>::infinity();
  return torch::nn::utils::clip_grad_norm_(with_grad, limit);
}

torch::optim::AdamW adamw(const std::vector<torch::Tensor>& params, double lr, double weight_decay) {
  return torch::optim::AdamW(params, torch::optim::AdamWOptions(lr).weight_decay(weight_decay));
}

}  // namespace

learner::learner(std::shared_ptr<model::transformer> actor, std::shared_ptr<model::transformer> critic,
                 learner_options options)
    : actor_(std::move(actor)), critic_(std::move(critic)), options_(std::move(options)) {
  if (!actor_) throw learner_error{"the learner needs an actor model"};
  if (options_.truncated != "penalty" && options_.truncated != "reward" && options_.truncated != "drop")
    throw learner_error{"learner.truncated must be penalty, reward or drop, got '" + options_.truncated + "'"};
  if (!(options_.actor_lr > 0) || !(options_.critic_lr > 0))
    throw learner_error{"learner.actor_lr and learner.critic_lr must be positive"};
  if (options_.gamma < 0 || options_.gamma > 1 || options_.lambda < 0 || options_.lambda > 1)
    throw learner_error{"learner.gamma and learner.lambda must lie in [0, 1]"};
  actor_params_ = tensors_of(actor_->named_parameters());
  actor_optimizer_ = std::make_unique<torch::optim::AdamW>(
      adamw(actor_params_, options_.actor_lr, options_.weight_decay));
  if (critic_) {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(critic_->device());
    value_weight_ = torch::zeros({1, critic_->config().hidden_size}, opts).set_requires_grad(true);
    value_bias_ = torch::zeros({1}, opts).set_requires_grad(true);
    critic_params_ = tensors_of(critic_->named_parameters());
    critic_params_.push_back(value_weight_);
    critic_params_.push_back(value_bias_);
    critic_optimizer_ = std::make_unique<torch::optim::AdamW>(
        adamw(critic_params_, options_.critic_lr, options_.weight_decay));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> learner::critic_parameters() const {
  if (!critic_) return {};
  auto out = critic_->named_parameters();
  out.emplace_back("score.weight", value_weight_);
  out.emplace_back("score.bias", value_bias_);
  return out;
}

void learner::require_critic(const char* stage) const {
  if (!critic_) throw learner_error{std::string{stage} + " needs a critic; give the learner one"};
}

torch::Tensor learner::values(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const torch::Tensor hidden = critic_->hidden_states(input_ids, attention_mask).to(torch::kFloat32);
  return torch::linear(hidden, value_weight_, value_bias_).squeeze(-1);
}

std::vector<episode_sample> learner::prepared(const std::vector<episode_sample>& samples,
                                              step_report& report) const {
  if (samples.empty()) throw learner_error{"a learner step needs at least one episode"};
  std::vector<episode_sample> out;
  out.reserve(samples.size());
  double reward_sum = 0;
  for (const auto& s : samples) {
    if (is_truncated(s.reason) && options_.truncated == "drop") {
      ++report.dropped;
      continue;
    }
    out.push_back(s);
    if (is_truncated(s.reason) && options_.truncated == "penalty") out.back().reward = -1;
    reward_sum += out.back().reward;
  }
  if (out.empty()) throw learner_error{"every episode of the step was truncated and learner.truncated is drop"};
  report.samples = static_cast<int64_t>(out.size());
  report.reward_mean = reward_sum / static_cast<double>(out.size());
  return out;
}

std::vector<micro_batch> learner::micro_batches(const std::vector<episode_sample>& samples, torch::Device device,
                                                step_report& report) const {
  std::vector<int64_t> lengths;
  lengths.reserve(samples.size());
  for (const auto& s : samples) lengths.push_back(s.size());
  std::vector<micro_batch> out;
  for (const auto& group : pack(lengths, options_.token_budget)) {
    out.push_back(make_micro_batch(samples, group, device));
    report.policy_tokens += out.back().policy_tokens;
    report.tokens += out.back().real_tokens;
  }
  if (report.policy_tokens == 0)
    throw learner_error{"the " + report.stage + " step needs episodes with policy tokens"};
  report.micro_batches = static_cast<int64_t>(out.size());
  return out;
}

step_report learner::rft_step(const std::vector<episode_sample>& input) {
  step_report report;
  report.stage = "rft";
  const auto samples = prepared(input, report);
  const auto batches = micro_batches(samples, actor_->device(), report);
  const double total = static_cast<double>(report.policy_tokens);
  actor_optimizer_->zero_grad();
  double nll = 0;
  for (const auto& b : batches) {
    const auto logp = logprobs_of(actor_->forward(b.input_ids, b.attention_mask), b.targets, false).logprobs;
    const torch::Tensor loss = sft_loss_sum(logp, b.target_mask);
    nll += loss.item<double>();
    (loss / total).backward();
  }
  report.sft_loss = nll / total;
  report.actor_grad_norm = clip_gradients(actor_params_, options_.max_grad_norm);
  actor_optimizer_->step();
  return report;
}

step_report learner::value_step(const std::vector<episode_sample>& input) {
  require_critic("value pretraining");
  step_report report;
  report.stage = "value_pretrain";
  const auto samples = prepared(input, report);
  struct prepared_batch {
    micro_batch batch;
    torch::Tensor values_old, returns;
  };
  std::vector<prepared_batch> batches;
  for (auto& batch : micro_batches(samples, critic_->device(), report)) {
    prepared_batch p{std::move(batch), {}, {}};
    {
      torch::NoGradGuard no_grad;
      p.values_old = values(p.batch.input_ids, p.batch.attention_mask);
    }
    // The Monte-Carlo return with gamma = 1: R at every policy token.
    p.returns = p.batch.rewards.to(p.values_old.device()).unsqueeze(1).expand_as(p.values_old).contiguous();
    batches.push_back(std::move(p));
  }
  const double total = static_cast<double>(report.policy_tokens);
  critic_optimizer_->zero_grad();
  for (const auto& p : batches) {
    const torch::Tensor v = values(p.batch.input_ids, p.batch.attention_mask);
    (value_loss_sum(v, p.values_old, p.returns, p.batch.target_mask, options_.ppo.value_clip, report.stats) / total)
        .backward();
  }
  report.critic_grad_norm = clip_gradients(critic_params_, options_.max_grad_norm);
  critic_optimizer_->step();
  return report;
}

step_report learner::ppo_step(const std::vector<episode_sample>& input) {
  require_critic("a PPO step");
  step_report report;
  report.stage = "ppo";
  const auto samples = prepared(input, report);
  struct prepared_batch {
    micro_batch batch;
    torch::Tensor logp_old, values_old, advantages, returns;
  };
  std::vector<prepared_batch> batches;
  for (auto& batch : micro_batches(samples, actor_->device(), report)) {
    prepared_batch p{std::move(batch), {}, {}, {}, {}};
    {
      torch::NoGradGuard no_grad;
      p.logp_old = logprobs_of(actor_->forward(p.batch.input_ids, p.batch.attention_mask), p.batch.targets, false)
                       .logprobs;
      p.values_old = values(p.batch.input_ids, p.batch.attention_mask);
    }
    auto adv = gae(p.values_old, p.batch.target_mask, p.batch.rewards, options_.gamma, options_.lambda);
    p.advantages = adv.advantages.to(actor_->device());
    p.returns = adv.returns;
    batches.push_back(std::move(p));
  }
  const double total = static_cast<double>(report.policy_tokens);
  actor_optimizer_->zero_grad();
  critic_optimizer_->zero_grad();
  for (const auto& p : batches) {
    const auto out = logprobs_of(actor_->forward(p.batch.input_ids, p.batch.attention_mask), p.batch.targets, true);
    (policy_loss_sum(out.logprobs, p.logp_old, p.batch.rollout_logprobs.to(out.logprobs.device()), p.advantages,
                     p.batch.target_mask, options_.ppo, report.stats, {}, out.entropy) /
     total)
        .backward();
    const torch::Tensor v = values(p.batch.input_ids, p.batch.attention_mask);
    (value_loss_sum(v, p.values_old, p.returns, p.batch.target_mask, options_.ppo.value_clip, report.stats) / total)
        .backward();
  }
  report.actor_grad_norm = clip_gradients(actor_params_, options_.max_grad_norm);
  report.critic_grad_norm = clip_gradients(critic_params_, options_.max_grad_norm);
  actor_optimizer_->step();
  critic_optimizer_->step();
  return report;
}

}  // namespace cuda_agent::learner
