#include "actors/learner/ppo.hpp"

#include <algorithm>
#include <string>

#include "actors/learner/episode_sample.hpp"

namespace cuda_agent::learner {

namespace {

std::string shape_of(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? "," : "") + std::to_string(t.size(d));
  return s + "]";
}

void require_shape(const char* what, const torch::Tensor& t, const torch::Tensor& like, const char* like_name) {
  if (!t.defined()) throw learner_error(std::string(what) + " is undefined; pass a tensor shaped like " + like_name);
  if (t.sizes() != like.sizes()) {
    throw learner_error(std::string(what) + " is " + shape_of(t) + " but " + like_name + " is " + shape_of(like) +
                        "; every per-token tensor must have the same [B,L] shape");
  }
}

void require_2d(const char* what, const torch::Tensor& t) {
  if (!t.defined() || t.dim() != 2) {
    throw learner_error(std::string(what) + " must be a [B,L] tensor, got " + (t.defined() ? shape_of(t) : "none"));
  }
}

// Zero where mask is false. torch::where instead of a product, so that garbage at padding
// (an infinite ratio, a NaN) never reaches the sum or the gradient.
torch::Tensor masked(const torch::Tensor& mask, const torch::Tensor& x) {
  return torch::where(mask, x, torch::zeros({}, x.options()));
}

}  // namespace

void loss_stats::add(const loss_stats& o) {
  tokens += o.tokens;
  policy_loss_sum += o.policy_loss_sum;
  clipped += o.clipped;
  approx_kl_sum += o.approx_kl_sum;
  entropy_sum += o.entropy_sum;
  ratio_sum += o.ratio_sum;
  ratio_max = std::max(ratio_max, o.ratio_max);
  is_weight_sum += o.is_weight_sum;
  is_weight_max = std::max(is_weight_max, o.is_weight_max);
  is_capped += o.is_capped;
  kl_ref_sum += o.kl_ref_sum;
  value_tokens += o.value_tokens;
  value_loss_sum += o.value_loss_sum;
  value_clipped += o.value_clipped;
}

token_logprobs logprobs_of(const torch::Tensor& logits, const torch::Tensor& targets, bool with_entropy) {
  if (!logits.defined() || logits.dim() != 3) {
    throw learner_error("logits must be [B,L,V], got " + (logits.defined() ? shape_of(logits) : std::string("none")));
  }
  require_2d("targets", targets);
  if (targets.size(0) != logits.size(0) || targets.size(1) != logits.size(1)) {
    throw learner_error("targets are " + shape_of(targets) + " but logits are " + shape_of(logits) +
                        "; targets must be the logits' [B,L]");
  }
  const torch::Tensor z = logits.to(torch::kFloat32);
  // The normaliser once; log p(target) = z[target] - logsumexp(z) gathers [B,L] values instead
  // of materialising the whole [B,L,V] log-softmax.
  const torch::Tensor lse = z.logsumexp(-1);
  token_logprobs out;
  out.logprobs = z.gather(-1, targets.to(torch::kInt64).unsqueeze(-1)).squeeze(-1) - lse;
  if (with_entropy) {
    const torch::Tensor p = (z - lse.unsqueeze(-1)).exp();
    out.entropy = lse - (p * z).sum(-1);
  }
  return out;
}

namespace {

// log softmax of one chunk's logits h w^T, in float32 whatever h's dtype: one softmax kernel
// instead of logsumexp's max, subtract, exp and sum passes over [chunk, vocab].
torch::Tensor chunk_log_softmax(const torch::Tensor& h, const torch::Tensor& w) {
  return torch::log_softmax(torch::linear(h, w), -1, torch::kFloat32);
}

// logprobs_of_hidden's autograd node. Saves hidden, weight and targets only; forward and
// backward walk the same chunks of the flattened [N,H] positions.
struct chunked_logprobs : torch::autograd::Function<chunked_logprobs> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                                                const torch::Tensor& weight, const torch::Tensor& targets,
                                                bool with_entropy, int64_t chunk) {
    const torch::Tensor h = hidden.reshape({-1, hidden.size(-1)});
    // The head runs in the hidden states' dtype (bfloat16 ones from a mixed-precision forward
    // against float32 master weights), here and again in the backward.
    const torch::Tensor w = weight.to(h.scalar_type());
    const torch::Tensor t = targets.reshape({-1}).to(h.device(), torch::kInt64);
    const int64_t n = h.size(0);
    auto opts = h.options().dtype(torch::kFloat32);
    torch::Tensor logp = torch::empty({n}, opts);
    torch::Tensor entropy = with_entropy ? torch::empty({n}, opts) : torch::empty({0}, opts);
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      const torch::Tensor lp = chunk_log_softmax(h.narrow(0, start, len), w);
      logp.narrow(0, start, len).copy_(lp.gather(-1, t.narrow(0, start, len).unsqueeze(-1)).squeeze(-1));
      if (with_entropy) entropy.narrow(0, start, len).copy_(lp.exp().mul_(lp).sum(-1).neg_());
    }
    ctx->save_for_backward({hidden, weight, t});
    // An output the loss leaves out (the entropy, a metric unless entropy_coef is set) reaches the
    // backward undefined rather than as zeros, so that its passes over [chunk, vocab] are skipped.
    ctx->set_materialize_grads(false);
    ctx->saved_data["with_entropy"] = with_entropy;
    ctx->saved_data["chunk"] = chunk;
    if (!with_entropy) return {logp.view(targets.sizes())};
    return {logp.view(targets.sizes()), entropy.view(targets.sizes())};
  }

  // With z a chunk's logits, p = softmax(z), log p = z - lse:
  //   d log p(t) / dz = onehot(t) - p,   dH / dz = -p * (log p + H).
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& hidden = saved[0];
    const torch::Tensor& weight = saved[1];
    const torch::Tensor& t = saved[2];
    const bool with_entropy = ctx->saved_data["with_entropy"].toBool();
    const int64_t chunk = ctx->saved_data["chunk"].toInt();
    const torch::Tensor h = hidden.reshape({-1, hidden.size(-1)});
    const torch::Tensor w = weight.to(h.scalar_type());
    const int64_t n = h.size(0);
    const torch::Tensor g_logp = grads[0].defined() ? grads[0].reshape({-1}) : torch::Tensor{};
    const torch::Tensor g_ent =
        with_entropy && grads.size() > 1 && grads[1].defined() ? grads[1].reshape({-1}) : torch::Tensor{};
    const bool any = g_logp.defined() || g_ent.defined();
    const bool need_h = any && ctx->needs_input_grad(0);
    const bool need_w = any && ctx->needs_input_grad(1);
    if (!need_h && !need_w) return {torch::Tensor{}, torch::Tensor{}, torch::Tensor{}, torch::Tensor{}, torch::Tensor{}};
    torch::Tensor grad_h = need_h ? torch::empty_like(h) : torch::Tensor{};
    // Summed over the chunks in float32 whatever the weight's dtype, rounded to it once at the end.
    torch::Tensor grad_w = need_w ? torch::zeros_like(weight, weight.options().dtype(torch::kFloat32)) : torch::Tensor{};
    for (int64_t start = 0; start < n; start += chunk) {
      const int64_t len = std::min(chunk, n - start);
      const torch::Tensor hc = h.narrow(0, start, len);
      const torch::Tensor log_p = chunk_log_softmax(hc, w);
      // d log p(t) / dz = g onehot(t) - g p as log-softmax's own backward of a one-hot gradient:
      // one kernel. Its input dtype is float32: ATen's CUDA kernel converts only from float16.
      torch::Tensor g_onehot = torch::zeros_like(log_p);
      if (g_logp.defined()) {
        g_onehot.scatter_(-1, t.narrow(0, start, len).unsqueeze(-1), g_logp.narrow(0, start, len).unsqueeze(-1));
      }
      torch::Tensor dz = torch::_log_softmax_backward_data(g_onehot, log_p, -1, torch::kFloat32);
      if (g_ent.defined()) {
        const torch::Tensor p = log_p.exp();
        const torch::Tensor entropy = -(p * log_p).sum(-1, true);
        dz.sub_(p * (log_p + entropy) * g_ent.narrow(0, start, len).unsqueeze(-1));
      }
      const torch::Tensor dz_w = dz.to(w.scalar_type());
      if (need_h) grad_h.narrow(0, start, len).copy_(dz_w.mm(w));
      if (need_w) grad_w.add_(dz_w.t().mm(hc));
    }
    return {need_h ? grad_h.view(hidden.sizes()) : torch::Tensor{},
            need_w ? grad_w.to(weight.scalar_type()) : torch::Tensor{}, torch::Tensor{}, torch::Tensor{},
            torch::Tensor{}};
  }
};

}  // namespace

token_logprobs logprobs_of_hidden(const torch::Tensor& hidden, const torch::Tensor& weight,
                                  const torch::Tensor& targets, bool with_entropy, int64_t chunk_tokens) {
  if (!hidden.defined() || hidden.dim() != 3) {
    throw learner_error("hidden states must be [B,L,H], got " +
                        (hidden.defined() ? shape_of(hidden) : std::string("none")));
  }
  if (!weight.defined() || weight.dim() != 2 || weight.size(1) != hidden.size(2)) {
    throw learner_error("the output head's weight must be [V," + std::to_string(hidden.size(2)) + "], got " +
                        (weight.defined() ? shape_of(weight) : std::string("none")));
  }
  require_2d("targets", targets);
  if (targets.size(0) != hidden.size(0) || targets.size(1) != hidden.size(1)) {
    throw learner_error("targets are " + shape_of(targets) + " but hidden states are " + shape_of(hidden) +
                        "; targets must be the hidden states' [B,L]");
  }
  const int64_t positions = targets.numel();
  const int64_t chunk = chunk_tokens > 0 ? std::min(chunk_tokens, std::max<int64_t>(positions, 1))
                                         : std::max<int64_t>(positions, 1);
  auto out = chunked_logprobs::apply(hidden, weight, targets, with_entropy, chunk);
  token_logprobs result;
  result.logprobs = out[0];
  if (with_entropy) result.entropy = out[1];
  return result;
}

gae_result gae(const torch::Tensor& values, const torch::Tensor& mask, const torch::Tensor& rewards, double gamma,
               double lambda) {
  require_2d("values", values);
  require_shape("mask", mask, values, "values");
  if (!rewards.defined() || rewards.dim() != 1 || rewards.size(0) != values.size(0)) {
    throw learner_error("rewards must be [B] with B = " + std::to_string(values.size(0)) + ", got " +
                        (rewards.defined() ? shape_of(rewards) : std::string("none")));
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor v = values.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  const torch::Tensor m = mask.to(torch::kCPU, torch::kBool).contiguous();
  const torch::Tensor r = rewards.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor adv = torch::zeros_like(v);
  torch::Tensor ret = torch::zeros_like(v);
  const auto va = v.accessor<double, 2>();
  const auto ma = m.accessor<bool, 2>();
  const auto ra = r.accessor<double, 1>();
  auto aa = adv.accessor<double, 2>();
  auto ga = ret.accessor<double, 2>();
  const double discount = gamma * lambda;
  for (int64_t b = 0; b < v.size(0); ++b) {
    // Backwards over the row; `last` until the first masked position met, which takes R.
    double next_value = 0.0;
    double next_advantage = 0.0;
    bool last = true;
    for (int64_t i = v.size(1) - 1; i >= 0; --i) {
      if (!ma[b][i]) continue;
      const double reward = last ? ra[b] : 0.0;
      last = false;
      const double delta = reward + gamma * next_value - va[b][i];
      next_advantage = delta + discount * next_advantage;
      next_value = va[b][i];
      aa[b][i] = next_advantage;
      ga[b][i] = next_advantage + va[b][i];
    }
  }
  return {adv.to(values.device(), values.scalar_type()), ret.to(values.device(), values.scalar_type())};
}

torch::Tensor policy_loss_sum(const torch::Tensor& logp, const torch::Tensor& logp_old,
                              const torch::Tensor& logp_rollout, const torch::Tensor& advantages,
                              const torch::Tensor& mask, const ppo_options& options, loss_stats& stats,
                              const torch::Tensor& logp_ref, const torch::Tensor& entropy) {
  require_2d("logp", logp);
  require_shape("logp_old", logp_old, logp, "logp");
  require_shape("logp_rollout", logp_rollout, logp, "logp");
  require_shape("advantages", advantages, logp, "logp");
  require_shape("mask", mask, logp, "logp");
  if (logp_ref.defined()) require_shape("logp_ref", logp_ref, logp, "logp");
  if (entropy.defined()) require_shape("entropy", entropy, logp, "logp");

  const torch::Tensor m = mask.to(torch::kBool);
  const torch::Tensor old = logp_old.detach();
  const torch::Tensor adv = advantages.detach();
  const torch::Tensor ratio = masked(m, logp - old).exp();
  const torch::Tensor unclipped = -adv * ratio;
  const torch::Tensor clipped = -adv * ratio.clamp(1.0 - options.clip_low, 1.0 + options.clip_high);
  const torch::Tensor pg = torch::max(unclipped, clipped);
  torch::Tensor raw_weight;
  torch::Tensor weight;
  {
    torch::NoGradGuard no_grad;
    raw_weight = masked(m, old - logp_rollout.detach()).exp();
    weight = raw_weight.clamp_max(options.is_cap);
  }
  const torch::Tensor policy = masked(m, weight * pg).sum();
  torch::Tensor loss = policy;

  torch::Tensor k3;
  if (logp_ref.defined()) {
    const torch::Tensor q = masked(m, logp_ref.detach() - logp);
    k3 = masked(m, q.exp() - q - 1.0).sum();
    if (options.kl_coef != 0.0) loss = loss + options.kl_coef * k3;
  }
  torch::Tensor entropy_total;
  if (entropy.defined()) {
    entropy_total = masked(m, entropy).sum();
    if (options.entropy_coef != 0.0) loss = loss - options.entropy_coef * entropy_total;
  }

  // Statistics in one device-to-host copy.
  torch::NoGradGuard no_grad;
  const auto zero = torch::zeros({}, logp.options().dtype(torch::kFloat64));
  const auto as_double = [](const torch::Tensor& t) { return t.detach().to(torch::kFloat64); };
  const bool any = m.numel() > 0;
  const torch::Tensor ratio_d = masked(m, ratio.detach());
  const torch::Tensor weight_d = masked(m, weight);
  const torch::Tensor row = torch::stack({
      as_double(m.sum()),
      as_double(policy),
      as_double((m & (clipped > unclipped)).sum()),
      as_double(masked(m, 0.5 * (old - logp.detach()).square()).sum()),
      entropy_total.defined() ? as_double(entropy_total) : zero,
      as_double(ratio_d.sum()),
      any ? as_double(ratio_d.max()) : zero,
      as_double(weight_d.sum()),
      any ? as_double(weight_d.max()) : zero,
      as_double((m & (raw_weight > options.is_cap)).sum()),
      k3.defined() ? as_double(k3) : zero,
  }).to(torch::kCPU);
  const auto s = row.accessor<double, 1>();
  loss_stats here;
  here.tokens = static_cast<int64_t>(s[0]);
  here.policy_loss_sum = s[1];
  here.clipped = static_cast<int64_t>(s[2]);
  here.approx_kl_sum = s[3];
  here.entropy_sum = s[4];
  here.ratio_sum = s[5];
  here.ratio_max = s[6];
  here.is_weight_sum = s[7];
  here.is_weight_max = s[8];
  here.is_capped = static_cast<int64_t>(s[9]);
  here.kl_ref_sum = s[10];
  stats.add(here);
  return loss;
}

torch::Tensor value_loss_sum(const torch::Tensor& values, const torch::Tensor& values_old,
                             const torch::Tensor& returns, const torch::Tensor& mask, double value_clip,
                             loss_stats& stats) {
  require_2d("values", values);
  require_shape("values_old", values_old, values, "values");
  require_shape("returns", returns, values, "values");
  require_shape("mask", mask, values, "values");
  const torch::Tensor m = mask.to(torch::kBool);
  const torch::Tensor old = values_old.detach();
  const torch::Tensor target = returns.detach();
  const torch::Tensor unclipped = (values - target).square();
  const torch::Tensor clipped = (old + (values - old).clamp(-value_clip, value_clip) - target).square();
  const torch::Tensor loss = masked(m, 0.5 * torch::max(unclipped, clipped)).sum();

  torch::NoGradGuard no_grad;
  const torch::Tensor row =
      torch::stack({m.sum().to(torch::kFloat64), loss.detach().to(torch::kFloat64),
                    (m & (clipped > unclipped)).sum().to(torch::kFloat64)})
          .to(torch::kCPU);
  const auto s = row.accessor<double, 1>();
  loss_stats here;
  here.value_tokens = static_cast<int64_t>(s[0]);
  here.value_loss_sum = s[1];
  here.value_clipped = static_cast<int64_t>(s[2]);
  stats.add(here);
  return loss;
}

torch::Tensor sft_loss_sum(const torch::Tensor& logp, const torch::Tensor& mask) {
  require_2d("logp", logp);
  require_shape("mask", mask, logp, "logp");
  return -masked(mask.to(torch::kBool), logp).sum();
}

}  // namespace cuda_agent::learner
