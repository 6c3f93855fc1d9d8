#include "actors/learner/fused_optimizer.hpp"

#include <limits>
#include <map>
#include <tuple>

namespace cuda_agent::learner {
namespace {

// The fused kernel takes lists of one device and dtype, and a step tensor per parameter;
// parameters that skipped a step (no gradient) have their own count, so the step is a key too.
using bucket_key = std::tuple<int, int, int, int64_t>;  // device type, device index, dtype, step

struct bucket {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
};

std::map<std::pair<int, int>, std::vector<torch::Tensor>> by_device(const std::vector<torch::Tensor>& tensors) {
  std::map<std::pair<int, int>, std::vector<torch::Tensor>> out;
  for (const auto& t : tensors) out[{int(t.device().type()), int(t.device().index())}].push_back(t);
  return out;
}

}  // namespace

torch::Tensor fused_adamw::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::map<bucket_key, bucket> buckets;
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const torch::Tensor& grad = p.grad();
      TORCH_CHECK(!grad.is_sparse(), "AdamW does not support sparse gradients");
      auto found = state_.find(p.unsafeGetTensorImpl());
      if (found == state_.end()) {
        // As AdamW::step initialises it, so that save() writes the same archive.
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        if (options.amsgrad()) fresh->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        found = state_.emplace(p.unsafeGetTensorImpl(), std::move(fresh)).first;
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*found->second);
      state.step(state.step() + 1);
      const bucket_key key{int(p.device().type()), int(p.device().index()), int(p.scalar_type()), state.step()};
      bucket& b = buckets[key];
      b.params.push_back(p);
      b.grads.push_back(grad);
      b.exp_avgs.push_back(state.exp_avg());
      b.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (options.amsgrad()) b.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
    }
    const auto [beta1, beta2] = options.betas();
    for (auto& [key, b] : buckets) {
      // The kernel reads the step (already counted) from a float32 tensor on the parameters' device.
      const auto options_f32 = torch::TensorOptions().dtype(torch::kFloat32).device(b.params.front().device());
      const torch::Tensor step = torch::full({}, static_cast<double>(std::get<3>(key)), options_f32);
      const std::vector<torch::Tensor> steps(b.params.size(), step);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, b.max_exp_avg_sqs, steps, options.lr(), beta1,
                        beta2, options.weight_decay(), options.eps(), options.amsgrad(), /*maximize=*/false);
    }
  }
  return loss;
}

double clip_gradient_norm(const std::vector<torch::Tensor>& params, double max_norm, bool fused) {
  std::vector<torch::Tensor> with_grad, grads;
  for (const auto& p : params) {
    if (!p.grad().defined()) continue;
    with_grad.push_back(p);
    grads.push_back(p.grad());
  }
  if (grads.empty()) return 0.0;
  if (!fused) {
    const double limit = max_norm > 0 ? max_norm : std::numeric_limits<double>::infinity();
    return torch::nn::utils::clip_grad_norm_(with_grad, limit);
  }
  torch::NoGradGuard no_grad;
  const torch::Device where = grads.front().device();
  const auto grads_by_device = by_device(grads);
  std::vector<torch::Tensor> norms;
  for (const auto& [device, list] : grads_by_device)
    for (const auto& n : at::_foreach_norm(list, 2)) norms.push_back(n.to(where));
  const torch::Tensor total = norms.size() == 1 ? norms.front() : torch::stack(norms).norm(2);
  if (max_norm > 0) {
    const torch::Tensor coef = (max_norm / (total + 1e-6)).clamp_max(1.0);
    for (const auto& [device, list] : grads_by_device) at::_foreach_mul_(list, coef.to(list.front().device()));
  }
  return total.item<double>();
}

}  // namespace cuda_agent::learner
