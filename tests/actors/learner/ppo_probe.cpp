// Drives the learner's math for test_ppo_math.py, which compares its outputs with references in
// PyTorch. Inputs are tensors in IN.safetensors, settings are its string metadata; outputs (and
// gradients) are written to OUT.safetensors, statistics as 0-d float64 tensors "stats.<name>".
//
//   ppo_probe logprobs IN OUT  logits, targets, weights u, h; {with_entropy}: logprobs, entropy,
//                              grad_logits of sum(u * logprobs) + sum(h * entropy)
//   ppo_probe logprobs_hidden IN OUT  hidden, weight, targets, u, h; {with_entropy, chunk, bf16}:
//                              logprobs_of_hidden's logprobs, entropy, grad_hidden, grad_weight
//                              (of the same objective, less the logprobs with use_logprobs=0 or the
//                              entropy with use_entropy=0), in float32 or bfloat16 (bf16=1)
//   ppo_probe gae IN OUT       values, mask, rewards; {gamma, lambda}: advantages, returns
//   ppo_probe policy IN OUT    logp, logp_old, logp_rollout, advantages, mask [, logp_ref, entropy];
//                              {clip_low, clip_high, is_cap, kl_coef, entropy_coef, chunks}: loss,
//                              grad_logp [, grad_entropy]; rows in `chunks` micro-batches whose
//                              losses and stats are added
//   ppo_probe value IN OUT     values, values_old, returns, mask; {value_clip}: loss, grad_values
//   ppo_probe sft IN OUT       logp, mask: loss, grad_logp
//   ppo_probe pack IN OUT      lengths; {budget}: group.<k> (sample indices)
//   ppo_probe micro_batch IN OUT  tokens.<k>, loss_mask.<k>, rollout_logprobs.<k>, rewards, indices:
//                              the micro_batch's tensors, samples, real_tokens, policy_tokens
//
// A learner_error prints "error: <message>" on stderr, exit 2.
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "actors/learner/packing.hpp"
#include "actors/learner/ppo.hpp"
#include "actors/model/safetensors.hpp"

namespace learner = cuda_agent::learner;
namespace model = cuda_agent::model;

namespace {

using tensors = std::vector<std::pair<std::string, torch::Tensor>>;

class input {
 public:
  explicit input(const std::string& path) : file_(path) {}
  bool has(const std::string& name) const { return file_.tensors().count(name) != 0; }
  torch::Tensor get(const std::string& name, torch::ScalarType dtype) const {
    return file_.load(name, torch::kCPU, dtype);
  }
  torch::Tensor get_or_undefined(const std::string& name, torch::ScalarType dtype) const {
    return has(name) ? get(name, dtype) : torch::Tensor{};
  }
  double number(const std::string& key, double fallback) const {
    const auto& m = file_.metadata();
    return m.contains(key) ? std::stod(m[key].get<std::string>()) : fallback;
  }

 private:
  model::safetensors_file file_;
};

torch::Tensor scalar(double v) { return torch::tensor(v, torch::kFloat64); }

void add_stats(tensors& out, const learner::loss_stats& s) {
  const std::pair<const char*, double> all[] = {
      {"tokens", double(s.tokens)},
      {"policy_loss_sum", s.policy_loss_sum},
      {"clipped", double(s.clipped)},
      {"approx_kl_sum", s.approx_kl_sum},
      {"entropy_sum", s.entropy_sum},
      {"ratio_sum", s.ratio_sum},
      {"ratio_max", s.ratio_max},
      {"is_weight_sum", s.is_weight_sum},
      {"is_weight_max", s.is_weight_max},
      {"is_capped", double(s.is_capped)},
      {"kl_ref_sum", s.kl_ref_sum},
      {"value_tokens", double(s.value_tokens)},
      {"value_loss_sum", s.value_loss_sum},
      {"value_clipped", double(s.value_clipped)},
      {"clip_fraction", s.clip_fraction()},
      {"approx_kl", s.approx_kl()},
      {"is_capped_fraction", s.is_capped_fraction()},
      {"value_clip_fraction", s.value_clip_fraction()},
  };
  for (const auto& [name, v] : all) out.emplace_back(std::string("stats.") + name, scalar(v));
}

torch::Tensor leaf(const torch::Tensor& t) { return t.detach().clone().requires_grad_(true); }

tensors run_logprobs(const input& in) {
  torch::Tensor logits = leaf(in.get("logits", torch::kFloat32));
  const bool with_entropy = in.number("with_entropy", 0) != 0;
  auto result = learner::logprobs_of(logits, in.get("targets", torch::kInt64), with_entropy);
  torch::Tensor objective = (result.logprobs * in.get("u", torch::kFloat32)).sum();
  if (with_entropy) objective = objective + (result.entropy * in.get("h", torch::kFloat32)).sum();
  objective.backward();
  tensors out{{"logprobs", result.logprobs}, {"grad_logits", logits.grad()}};
  if (with_entropy) out.emplace_back("entropy", result.entropy);
  return out;
}

tensors run_logprobs_hidden(const input& in) {
  // bf16: 0 float32, 1 bfloat16 hidden and weight, 2 bfloat16 hidden on a float32 weight.
  const int bf16 = static_cast<int>(in.number("bf16", 0));
  torch::Tensor hidden = leaf(in.get("hidden", bf16 != 0 ? torch::kBFloat16 : torch::kFloat32));
  torch::Tensor weight = leaf(in.get("weight", bf16 == 1 ? torch::kBFloat16 : torch::kFloat32));
  const bool with_entropy = in.number("with_entropy", 0) != 0;
  auto result = learner::logprobs_of_hidden(hidden, weight, in.get("targets", torch::kInt64), with_entropy,
                                            static_cast<int64_t>(in.number("chunk", 0)));
  // The objective takes the log-probabilities (u) and the entropy (h) unless told not to: an
  // output the loss leaves out must get no gradient, not a zero one worked through.
  torch::Tensor objective = torch::zeros({}, torch::kFloat32);
  if (in.number("use_logprobs", 1) != 0) objective = objective + (result.logprobs * in.get("u", torch::kFloat32)).sum();
  if (with_entropy && in.number("use_entropy", 1) != 0)
    objective = objective + (result.entropy * in.get("h", torch::kFloat32)).sum();
  objective.backward();
  tensors out{{"logprobs", result.logprobs},
              {"grad_hidden", hidden.grad().to(torch::kFloat32)},
              {"grad_weight", weight.grad().to(torch::kFloat32)},
              {"grad_dtypes", torch::tensor({hidden.grad().element_size(), weight.grad().element_size()})}};
  if (with_entropy) out.emplace_back("entropy", result.entropy);
  return out;
}

tensors run_gae(const input& in) {
  auto result = learner::gae(in.get("values", torch::kFloat32), in.get("mask", torch::kBool),
                             in.get("rewards", torch::kFloat32), in.number("gamma", 1.0), in.number("lambda", 0.95));
  return {{"advantages", result.advantages}, {"returns", result.returns}};
}

tensors run_policy(const input& in) {
  learner::ppo_options options;
  options.clip_low = in.number("clip_low", options.clip_low);
  options.clip_high = in.number("clip_high", options.clip_high);
  options.is_cap = in.number("is_cap", options.is_cap);
  options.kl_coef = in.number("kl_coef", options.kl_coef);
  options.entropy_coef = in.number("entropy_coef", options.entropy_coef);
  const auto chunks = static_cast<int64_t>(in.number("chunks", 1));
  torch::Tensor logp = leaf(in.get("logp", torch::kFloat32));
  torch::Tensor entropy = in.get_or_undefined("entropy", torch::kFloat32);
  if (entropy.defined()) entropy = leaf(entropy);
  const torch::Tensor logp_ref = in.get_or_undefined("logp_ref", torch::kFloat32);
  const auto part = [&](const torch::Tensor& t) { return t.defined() ? t.chunk(chunks, 0) : std::vector<torch::Tensor>(); };
  const auto lp = part(logp), old = part(in.get("logp_old", torch::kFloat32)),
             rollout = part(in.get("logp_rollout", torch::kFloat32)), adv = part(in.get("advantages", torch::kFloat32)),
             mask = part(in.get("mask", torch::kBool)), ref = part(logp_ref), ent = part(entropy);
  learner::loss_stats stats;
  torch::Tensor loss = torch::zeros({});
  for (std::size_t c = 0; c < lp.size(); ++c) {
    learner::loss_stats one;
    loss = loss + learner::policy_loss_sum(lp[c], old[c], rollout[c], adv[c], mask[c], options, one,
                                           ref.empty() ? torch::Tensor{} : ref[c],
                                           ent.empty() ? torch::Tensor{} : ent[c]);
    stats.add(one);
  }
  loss.backward();
  tensors out{{"loss", loss}, {"grad_logp", logp.grad()}};
  if (entropy.defined()) out.emplace_back("grad_entropy", entropy.grad());
  add_stats(out, stats);
  return out;
}

tensors run_value(const input& in) {
  torch::Tensor values = leaf(in.get("values", torch::kFloat32));
  learner::loss_stats stats;
  torch::Tensor loss = learner::value_loss_sum(values, in.get("values_old", torch::kFloat32),
                                               in.get("returns", torch::kFloat32), in.get("mask", torch::kBool),
                                               in.number("value_clip", 0.2), stats);
  loss.backward();
  tensors out{{"loss", loss}, {"grad_values", values.grad()}};
  add_stats(out, stats);
  return out;
}

tensors run_sft(const input& in) {
  torch::Tensor logp = leaf(in.get("logp", torch::kFloat32));
  torch::Tensor loss = learner::sft_loss_sum(logp, in.get("mask", torch::kBool));
  loss.backward();
  return {{"loss", loss}, {"grad_logp", logp.grad()}};
}

std::vector<int64_t> as_vector(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

tensors run_pack(const input& in) {
  const auto groups =
      learner::pack(as_vector(in.get("lengths", torch::kInt64)), static_cast<int64_t>(in.number("budget", 0)));
  tensors out;
  for (std::size_t k = 0; k < groups.size(); ++k) {
    std::vector<int64_t> g(groups[k].begin(), groups[k].end());
    out.emplace_back("group." + std::to_string(k), torch::tensor(g, torch::kInt64));
  }
  return out;
}

tensors run_micro_batch(const input& in) {
  const std::vector<int64_t> rewards = as_vector(in.get("rewards", torch::kInt64));
  std::vector<learner::episode_sample> samples(rewards.size());
  for (std::size_t k = 0; k < samples.size(); ++k) {
    const std::string n = std::to_string(k);
    auto& s = samples[k];
    s.episode_id = "episode-" + n;
    s.tokens = as_vector(in.get("tokens." + n, torch::kInt64));
    const torch::Tensor mask = in.get("loss_mask." + n, torch::kUInt8).contiguous();
    s.loss_mask.assign(mask.data_ptr<uint8_t>(), mask.data_ptr<uint8_t>() + mask.numel());
    const torch::Tensor lp = in.get("rollout_logprobs." + n, torch::kFloat32).contiguous();
    s.rollout_logprobs.assign(lp.data_ptr<float>(), lp.data_ptr<float>() + lp.numel());
    s.reward = static_cast<int32_t>(rewards[k]);
  }
  const std::vector<int64_t> picked = as_vector(in.get("indices", torch::kInt64));
  const auto batch = learner::make_micro_batch(samples, std::vector<std::size_t>(picked.begin(), picked.end()),
                                               torch::kCPU);
  std::vector<int64_t> rows(batch.samples.begin(), batch.samples.end());
  return {{"samples", torch::tensor(rows, torch::kInt64)},
          {"input_ids", batch.input_ids},
          {"attention_mask", batch.attention_mask},
          {"targets", batch.targets},
          {"target_mask", batch.target_mask},
          {"rollout_logprobs", batch.rollout_logprobs},
          {"rewards", batch.rewards},
          {"real_tokens", torch::tensor(batch.real_tokens, torch::kInt64)},
          {"policy_tokens", torch::tensor(batch.policy_tokens, torch::kInt64)}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: ppo_probe logprobs|logprobs_hidden|gae|policy|value|sft|pack|micro_batch IN.safetensors OUT.safetensors\n";
    return 1;
  }
  const std::string command = argv[1];
  try {
    const input in(argv[2]);
    tensors out;
    if (command == "logprobs") out = run_logprobs(in);
    else if (command == "logprobs_hidden") out = run_logprobs_hidden(in);
    else if (command == "gae") out = run_gae(in);
    else if (command == "policy") out = run_policy(in);
    else if (command == "value") out = run_value(in);
    else if (command == "sft") out = run_sft(in);
    else if (command == "pack") out = run_pack(in);
    else if (command == "micro_batch") out = run_micro_batch(in);
    else {
      std::cerr << "unknown command " << command << "\n";
      return 1;
    }
    model::write_safetensors(argv[3], out);
  } catch (const learner::learner_error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
