#include "actors/learner/learner.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <sstream>

#include "actors/learner/fused_optimizer.hpp"

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

std::unique_ptr<torch::optim::AdamW> adamw(const std::vector<torch::Tensor>& params, double lr, double weight_decay,
                                          bool fused) {
  const auto options = torch::optim::AdamWOptions(lr).weight_decay(weight_decay);
  if (fused) return std::make_unique<fused_adamw>(params, options);
  return std::make_unique<torch::optim::AdamW>(params, options);
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
  if (options_.ppo_epochs < 1) throw learner_error{"learner.ppo_epochs must be at least 1"};
  if (options_.logit_chunk_tokens < 0) {
    throw learner_error{"learner.logit_chunk_tokens must be 0 (all at once) or a positive count of positions"};
  }
  if (options_.compute_dtype == "bfloat16") {
    autocast_ = torch::kBFloat16;
  } else if (options_.compute_dtype != "float32") {
    throw learner_error{"learner.compute_dtype must be float32 or bfloat16, got '" + options_.compute_dtype + "'"};
  }
  if (options_.attention != "default" && options_.attention != "cudnn") {
    throw learner_error{"learner.attention must be default or cudnn, got '" + options_.attention + "'"};
  }
  model::prefer_cudnn_attention(options_.attention == "cudnn");
  if (autocast_ && actor_->dtype() != torch::kFloat32) {
    throw learner_error{"learner.compute_dtype = bfloat16 keeps float32 master weights; load the model in float32"};
  }
  if (options_.bf16_working_weights) {
    if (!autocast_) throw learner_error{"learner.bf16_working_weights needs learner.compute_dtype = bfloat16"};
    autocast_.reset();  // the copies compute in bfloat16 themselves
    auto copy_of = [](const model::transformer& master) {
      working_copy w;
      w.model = master.training_copy(torch::kBFloat16);
      w.params = tensors_of(w.model->named_parameters());
      w.master = tensors_of(master.named_parameters());  // the same order
      return w;
    };
    actor_work_ = copy_of(*actor_);
    if (critic_) critic_work_ = copy_of(*critic_);
  }
  actor_params_ = tensors_of(actor_->named_parameters());
  actor_optimizer_ = adamw(actor_params_, options_.actor_lr, options_.weight_decay, options_.fused_optimizer);
  if (critic_) {
    const auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(critic_->device());
    value_weight_ = torch::zeros({1, critic_->config().hidden_size}, opts).set_requires_grad(true);
    value_bias_ = torch::zeros({1}, opts).set_requires_grad(true);
    critic_params_ = tensors_of(critic_->named_parameters());
    critic_params_.push_back(value_weight_);
    critic_params_.push_back(value_bias_);
    critic_optimizer_ = adamw(critic_params_, options_.critic_lr, options_.weight_decay, options_.fused_optimizer);
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

torch::Tensor learner::hidden_states(model::transformer& model, const torch::Tensor& input_ids,
                                     const torch::Tensor& attention_mask) const {
  const model::autocast_scope precision{model.device(), autocast_};
  const torch::Tensor hidden = model.hidden_states(input_ids, attention_mask, options_.activation_checkpointing);
  // Mixed precision leaves the residual stream, and so the final norm, in float32; the output
  // head is the biggest product of all, and runs in the hidden states' dtype.
  return autocast_ ? hidden.to(*autocast_) : hidden;
}

learner::working_copy& learner::working_copy_of(const std::shared_ptr<model::transformer>& master) {
  return master == actor_ ? actor_work_ : critic_work_;
}

model::transformer& learner::forward_model(const std::shared_ptr<model::transformer>& master) {
  const working_copy& w = working_copy_of(master);
  return w.model ? *w.model : *master;
}

void learner::refresh_working_copy(const std::shared_ptr<model::transformer>& master) {
  const working_copy& w = working_copy_of(master);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < w.params.size(); ++i) w.params[i].copy_(w.master[i]);  // casts in place
}

void learner::gradients_to_master(const std::shared_ptr<model::transformer>& master) {
  working_copy& w = working_copy_of(master);
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < w.params.size(); ++i) {
    torch::Tensor& g = w.params[i].mutable_grad();
    if (!g.defined()) continue;
    torch::Tensor& m = w.master[i].mutable_grad();
    if (m.defined()) {
      m.add_(g);
    } else {
      m = g.to(torch::kFloat32);
    }
    g = torch::Tensor{};
  }
}

torch::Tensor learner::values(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  const torch::Tensor hidden = hidden_states(forward_model(critic_), input_ids, attention_mask).to(torch::kFloat32);
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
  report.micro_batches = static_cast<int64_t>(out.size());
  sum_counts(report);
  return out;
}

std::vector<std::size_t> shard_of(const std::vector<int64_t>& lengths, int rank, int world) {
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return lengths[a] > lengths[b]; });
  std::vector<int64_t> load(static_cast<std::size_t>(world), 0);
  std::vector<std::size_t> mine;
  for (const auto i : order) {
    const auto least = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[static_cast<std::size_t>(least)] += lengths[i];
    if (least == rank) mine.push_back(i);
  }
  std::sort(mine.begin(), mine.end());
  return mine;
}

std::vector<episode_sample> learner::share_of(const std::vector<episode_sample>& samples) const {
  if (!group_) return samples;
  std::vector<int64_t> lengths;
  for (const auto& s : samples) lengths.push_back(s.size());
  std::vector<episode_sample> out;
  for (const auto i : shard_of(lengths, group_->rank(), group_->world())) out.push_back(samples[i]);
  return out;
}

void learner::sum_counts(step_report& report) const {
  if (group_) {
    std::vector<torch::Tensor> counts{torch::tensor(
        {static_cast<double>(report.policy_tokens), static_cast<double>(report.tokens),
         static_cast<double>(report.micro_batches)},
        torch::kFloat64)};
    group_->all_reduce(counts, reduce_op::sum);
    report.policy_tokens = static_cast<int64_t>(counts[0][0].item<double>());
    report.tokens = static_cast<int64_t>(counts[0][1].item<double>());
    report.micro_batches = static_cast<int64_t>(counts[0][2].item<double>());
  }
  if (report.policy_tokens == 0)
    throw learner_error{"the " + report.stage + " step needs episodes with policy tokens"};
}

void learner::reduce(const std::vector<torch::Tensor>& params, loss_stats& s, double* extra_sum) const {
  if (!group_) return;
  std::vector<torch::Tensor> sums;
  sums.reserve(params.size() + 1);
  for (const auto& p : params) {
    if (!p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::zeros_like(p);
    sums.push_back(p.grad());
  }
  const std::vector<double> counters{static_cast<double>(s.tokens), s.policy_loss_sum, static_cast<double>(s.clipped),
                                     s.approx_kl_sum, s.entropy_sum, s.ratio_sum, s.is_weight_sum,
                                     static_cast<double>(s.is_capped), s.kl_ref_sum,
                                     static_cast<double>(s.value_tokens), s.value_loss_sum,
                                     static_cast<double>(s.value_clipped), extra_sum ? *extra_sum : 0.0};
  sums.push_back(torch::tensor(counters, torch::kFloat64));
  group_->all_reduce(sums, reduce_op::sum);
  std::vector<torch::Tensor> maxima{torch::tensor({s.ratio_max, s.is_weight_max}, torch::kFloat64)};
  group_->all_reduce(maxima, reduce_op::max);
  const auto c = sums.back();
  auto at = [&c](int64_t i) { return c[i].item<double>(); };
  s.tokens = static_cast<int64_t>(at(0));
  s.policy_loss_sum = at(1);
  s.clipped = static_cast<int64_t>(at(2));
  s.approx_kl_sum = at(3);
  s.entropy_sum = at(4);
  s.ratio_sum = at(5);
  s.is_weight_sum = at(6);
  s.is_capped = static_cast<int64_t>(at(7));
  s.kl_ref_sum = at(8);
  s.value_tokens = static_cast<int64_t>(at(9));
  s.value_loss_sum = at(10);
  s.value_clipped = static_cast<int64_t>(at(11));
  if (extra_sum) *extra_sum = at(12);
  s.ratio_max = maxima[0][0].item<double>();
  s.is_weight_max = maxima[0][1].item<double>();
}

std::string learner::save_state() {
  torch::serialize::OutputArchive archive;
  for (std::size_t i = 0; i < actor_params_.size(); ++i) archive.write("actor" + std::to_string(i), actor_params_[i]);
  for (std::size_t i = 0; i < critic_params_.size(); ++i) archive.write("critic" + std::to_string(i), critic_params_[i]);
  torch::serialize::OutputArchive actor_optimizer;
  actor_optimizer_->save(actor_optimizer);
  archive.write("actor_optimizer", actor_optimizer);
  if (critic_optimizer_) {
    torch::serialize::OutputArchive critic_optimizer;
    critic_optimizer_->save(critic_optimizer);
    archive.write("critic_optimizer", critic_optimizer);
  }
  std::ostringstream out;
  archive.save_to(out);
  return out.str();
}

void learner::load_state(const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size());
  torch::NoGradGuard no_grad;
  auto read_into = [&archive](const std::string& key, torch::Tensor& param) {
    torch::Tensor t;
    if (!archive.try_read(key, t) || !t.sizes().equals(param.sizes()))
      throw learner_error{"a learner state without '" + key + "' of the right shape: the ranks were built from "
                          "different checkpoints or settings"};
    param.copy_(t);
  };
  for (std::size_t i = 0; i < actor_params_.size(); ++i) read_into("actor" + std::to_string(i), actor_params_[i]);
  for (std::size_t i = 0; i < critic_params_.size(); ++i) read_into("critic" + std::to_string(i), critic_params_[i]);
  torch::serialize::InputArchive actor_optimizer;
  archive.read("actor_optimizer", actor_optimizer);
  actor_optimizer_->load(actor_optimizer);
  if (critic_optimizer_) {
    torch::serialize::InputArchive critic_optimizer;
    archive.read("critic_optimizer", critic_optimizer);
    critic_optimizer_->load(critic_optimizer);
  }
}

double learner::weights_digest() const {
  torch::NoGradGuard no_grad;
  // Position-weighted, so that two weights swapped or a sign flipped show.
  double digest = 0;
  int64_t k = 0;
  for (const auto* params : {&actor_params_, &critic_params_})
    for (const auto& p : *params) {
      const auto flat = p.detach().reshape({-1}).to(torch::kFloat64);
      const auto ramp = torch::arange(1, flat.numel() + 1, flat.options()).mul_(1e-3).add_(static_cast<double>(++k));
      digest += (flat * ramp).sum().item<double>();
    }
  return digest;
}

token_logprobs learner::actor_logprobs(const micro_batch& b, bool with_entropy) {
  model::transformer& model = forward_model(actor_);
  return logprobs_of_hidden(hidden_states(model, b.input_ids, b.attention_mask), model.output_weight(), b.targets,
                            with_entropy, options_.logit_chunk_tokens);
}

step_report learner::rft_step(const std::vector<episode_sample>& input) {
  step_report report;
  report.stage = "rft";
  const auto samples = prepared(input, report);
  const auto batches = micro_batches(share_of(samples), actor_->device(), report);
  const double total = static_cast<double>(report.policy_tokens);
  actor_optimizer_->zero_grad();
  refresh_working_copy(actor_);
  double nll = 0;
  for (const auto& b : batches) {
    const auto logp = actor_logprobs(b, false).logprobs;
    const torch::Tensor loss = sft_loss_sum(logp, b.target_mask);
    nll += loss.item<double>();
    (loss / total).backward();
    gradients_to_master(actor_);
  }
  reduce(actor_params_, report.stats, &nll);
  report.sft_loss = nll / total;
  report.actor_grad_norm = clip_gradient_norm(actor_params_, options_.max_grad_norm, options_.fused_optimizer);
  actor_optimizer_->step();
  return report;
}

step_report learner::value_step(const std::vector<episode_sample>& input) {
  require_critic("value pretraining");
  step_report report;
  report.stage = "value_pretrain";
  const auto samples = prepared(input, report);
  refresh_working_copy(critic_);
  struct prepared_batch {
    micro_batch batch;
    torch::Tensor values_old, returns;
  };
  std::vector<prepared_batch> batches;
  for (auto& batch : micro_batches(share_of(samples), critic_->device(), report)) {
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
    gradients_to_master(critic_);
  }
  reduce(critic_params_, report.stats, nullptr);
  report.critic_grad_norm = clip_gradient_norm(critic_params_, options_.max_grad_norm, options_.fused_optimizer);
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
  for (auto& batch : micro_batches(share_of(samples), actor_->device(), report)) {
    batches.push_back({std::move(batch), {}, {}, {}, {}});
  }
  const double total = static_cast<double>(report.policy_tokens);
  std::vector<torch::Tensor> both = actor_params_;
  both.insert(both.end(), critic_params_.begin(), critic_params_.end());
  for (int64_t epoch = 0; epoch < options_.ppo_epochs; ++epoch) {
    loss_stats stats;
    actor_optimizer_->zero_grad();
    critic_optimizer_->zero_grad();
    refresh_working_copy(actor_);
    refresh_working_copy(critic_);
    for (auto& p : batches) {
      // No update has happened before the first epoch's backward passes, so its forwards give
      // the old values and log-probabilities themselves: no separate no-grad forward of either
      // model. The critic goes first, since GAE needs its values.
      const torch::Tensor v = values(p.batch.input_ids, p.batch.attention_mask);
      if (epoch == 0) {
        p.values_old = v.detach();
        auto adv = gae(p.values_old, p.batch.target_mask, p.batch.rewards, options_.gamma, options_.lambda);
        p.advantages = adv.advantages.to(actor_->device());
        p.returns = adv.returns;
      }
      (value_loss_sum(v, p.values_old, p.returns, p.batch.target_mask, options_.ppo.value_clip, stats) / total)
          .backward();
      gradients_to_master(critic_);
      const auto out = actor_logprobs(p.batch, true);
      if (epoch == 0) p.logp_old = out.logprobs.detach();
      (policy_loss_sum(out.logprobs, p.logp_old, p.batch.rollout_logprobs.to(out.logprobs.device()), p.advantages,
                       p.batch.target_mask, options_.ppo, stats, {}, out.entropy) /
       total)
          .backward();
      gradients_to_master(actor_);
    }
    reduce(both, stats, nullptr);
    report.stats.add(stats);
    report.actor_grad_norm = clip_gradient_norm(actor_params_, options_.max_grad_norm, options_.fused_optimizer);
    report.critic_grad_norm = clip_gradient_norm(critic_params_, options_.max_grad_norm, options_.fused_optimizer);
    actor_optimizer_->step();
    critic_optimizer_->step();
  }
  return report;
}

}  // namespace cuda_agent::learner
