// The learner's optimiser step in multi-tensor kernels. LibTorch's AdamW and clip_grad_norm_
// launch a handful of kernels per parameter tensor (about ten for AdamW, two for clipping); a
// 0.5B Qwen2 has 290 tensors, so an actor-and-critic PPO step launches some 7,000 small kernels
// after its backward. ATen's fused AdamW (the kernel behind torch.optim.AdamW(fused=True)) and
// its foreach norm and scale do the same arithmetic in a few launches per device and dtype.
//
//   auto opt = std::make_unique<fused_adamw>(params, torch::optim::AdamWOptions(lr));
//   double norm = clip_gradient_norm(params, 1.0, /*fused=*/true);
//   opt->step();
//
// fused_adamw is a torch::optim::AdamW: the same options, the same per-parameter state (step,
// exp_avg, exp_avg_sq) and the same save/load archives, so a checkpoint written with one loads
// into the other. Only step() differs, and only by the order of floating-point operations.
#pragma once

#include <vector>

#include <torch/torch.h>

namespace cuda_agent::learner {

class fused_adamw : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  // One AdamW step of every parameter with a gradient, as AdamW::step: decoupled weight decay,
  // bias-corrected moments, amsgrad where the group asks for it; parameters without a gradient
  // keep their state and step count. Throws c10::Error for sparse gradients.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

// The 2-norm of all of `params`' gradients together, before clipping; where max_norm > 0 and the
// norm exceeds it, every gradient is scaled by max_norm / (norm + 1e-6), as clip_grad_norm_.
// fused: the per-tensor norms and the scaling as foreach kernels; otherwise clip_grad_norm_
// itself. Parameters without a gradient are left out; none at all gives 0.
double clip_gradient_norm(const std::vector<torch::Tensor>& params, double max_norm, bool fused);

}  // namespace cuda_agent::learner
