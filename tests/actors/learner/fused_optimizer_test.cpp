// The learner's multi-tensor optimiser step against LibTorch's own: fused_adamw against
// torch::optim::AdamW over several steps (weight decay, amsgrad, a parameter that skips steps),
// their archives read by each other, and clip_gradient_norm fused against clip_grad_norm_.
// On CPU always; on CUDA too where LibTorch sees a device.
#include "actors/learner/fused_optimizer.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <vector>

namespace cuda_agent::learner {
namespace {

std::vector<torch::Device> devices() {
  std::vector<torch::Device> out{torch::kCPU};
  if (torch::cuda::is_available()) out.emplace_back(torch::kCUDA, 0);
  return out;
}

// Shapes of a transformer's tensors: matrices, a bias, a norm weight, a scalar-sized one.
std::vector<torch::Tensor> fresh_params(torch::Device device, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> out;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{64, 48}, {48}, {3, 5, 7}, {1}, {300}})
    out.push_back(torch::randn(shape, torch::TensorOptions().dtype(torch::kFloat32).device(device)).requires_grad_(true));
  return out;
}

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.detach().clone().requires_grad_(true));
  return out;
}

// Gradients of step `step`: the same on both sides; parameter 3 has none on odd steps, so that
// its step count falls behind the others'.
void set_grads(std::vector<torch::Tensor>& params, int step) {
  torch::manual_seed(1000 + step);
  for (size_t i = 0; i < params.size(); ++i) {
    if (i == 3 && step % 2 == 1) {
      params[i].mutable_grad() = torch::Tensor{};
      continue;
    }
    params[i].mutable_grad() = torch::randn(params[i].sizes(), params[i].options()).mul_(0.1 * (i + 1));
  }
}

void expect_close(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b, double rtol,
                  double atol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const double gap = (a[i].detach() - b[i].detach()).abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(a[i].detach().cpu(), b[i].detach().cpu(), rtol, atol))
        << "tensor " << i << " differs by up to " << gap;
  }
}

TEST(FusedAdamW, TakesTheStepsOfLibTorchsAdamW) {
  for (const auto device : devices())
    for (const bool amsgrad : {false, true}) {
      SCOPED_TRACE(device.str() + (amsgrad ? " amsgrad" : ""));
      auto fused_params = fresh_params(device, 7);
      auto plain_params = copies(fused_params);
      const auto options = torch::optim::AdamWOptions(3e-2).weight_decay(0.1).amsgrad(amsgrad);
      fused_adamw fused(fused_params, options);
      torch::optim::AdamW plain(plain_params, options);
      for (int step = 0; step < 6; ++step) {
        set_grads(fused_params, step);
        set_grads(plain_params, step);
        fused.step();
        plain.step();
      }
      // The parameters moved (about lr per step), and the same way on both sides.
      EXPECT_GT((fused_params[0] - fresh_params(device, 7)[0]).abs().max().item<double>(), 0.05);
      expect_close(fused_params, plain_params, 1e-5, 1e-6);
      for (size_t i = 0; i < fused_params.size(); ++i) {
        const auto& a = static_cast<torch::optim::AdamWParamState&>(
            *fused.state().at(fused_params[i].unsafeGetTensorImpl()));
        const auto& b = static_cast<torch::optim::AdamWParamState&>(
            *plain.state().at(plain_params[i].unsafeGetTensorImpl()));
        EXPECT_EQ(a.step(), b.step()) << "tensor " << i;
        EXPECT_EQ(a.step(), i == 3 ? 3 : 6) << "tensor " << i;
        expect_close({a.exp_avg(), a.exp_avg_sq()}, {b.exp_avg(), b.exp_avg_sq()}, 1e-5, 1e-7);
      }
    }
}

TEST(FusedAdamW, FollowsALearningRateChangedInItsGroup) {
  auto fused_params = fresh_params(torch::kCPU, 3);
  auto plain_params = copies(fused_params);
  fused_adamw fused(fused_params, torch::optim::AdamWOptions(1e-2));
  torch::optim::AdamW plain(plain_params, torch::optim::AdamWOptions(1e-2));
  for (int step = 0; step < 4; ++step) {
    if (step == 2) {  // as train's learning-rate schedule sets it
      static_cast<torch::optim::AdamWOptions&>(fused.param_groups()[0].options()).lr(1e-1);
      static_cast<torch::optim::AdamWOptions&>(plain.param_groups()[0].options()).lr(1e-1);
    }
    set_grads(fused_params, 2 * step);
    set_grads(plain_params, 2 * step);
    fused.step();
    plain.step();
  }
  expect_close(fused_params, plain_params, 1e-5, 1e-6);
}

TEST(FusedAdamW, ArchivesLoadIntoEitherOptimiserAndContinueAlike) {
  auto a_params = fresh_params(torch::kCPU, 11);
  fused_adamw a(a_params, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  for (int step = 0; step < 3; ++step) {
    set_grads(a_params, step);
    a.step();
  }
  std::ostringstream bytes;
  {
    torch::serialize::OutputArchive archive;
    a.save(archive);
    archive.save_to(bytes);
  }
  // The same weights with LibTorch's AdamW reading the fused optimiser's archive, and a second
  // fused one reading it too: all three take the next steps alike.
  auto b_params = copies(a_params);
  auto c_params = copies(a_params);
  torch::optim::AdamW b(b_params, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  fused_adamw c(c_params, torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
  for (torch::optim::Optimizer* o : std::vector<torch::optim::Optimizer*>{&b, &c}) {
    std::istringstream in(bytes.str());
    torch::serialize::InputArchive archive;
    archive.load_from(in);
    o->load(archive);
  }
  for (int step = 3; step < 6; ++step) {
    for (auto* params : {&a_params, &b_params, &c_params}) set_grads(*params, step);
    a.step();
    b.step();
    c.step();
  }
  for (size_t i = 0; i < a_params.size(); ++i) EXPECT_TRUE(torch::equal(a_params[i], c_params[i])) << i;
  expect_close(a_params, b_params, 1e-5, 1e-6);
}

TEST(FusedAdamW, RefusesSparseGradients) {
  auto p = torch::zeros({4, 3}).requires_grad_(true);
  fused_adamw opt({p}, torch::optim::AdamWOptions(1e-2));
  p.mutable_grad() = torch::sparse_coo_tensor(torch::tensor({{0}, {1}}), torch::tensor({1.0f}), {4, 3});
  EXPECT_THROW(opt.step(), c10::Error);
}

TEST(ClipGradientNorm, FusedGivesClipGradNormsNormAndScaledGradients) {
  for (const auto device : devices())
    for (const double max_norm : {0.5, 1e6, 0.0}) {
      SCOPED_TRACE(device.str() + " max_norm " + std::to_string(max_norm));
      auto fused_params = fresh_params(device, 5);
      auto plain_params = copies(fused_params);
      set_grads(fused_params, 1);  // one tensor without a gradient
      set_grads(plain_params, 1);
      const auto before = fused_params[0].grad().clone();
      const double fused_norm = clip_gradient_norm(fused_params, max_norm, /*fused=*/true);
      const double plain_norm = clip_gradient_norm(plain_params, max_norm, /*fused=*/false);
      EXPECT_NEAR(fused_norm, plain_norm, 1e-6 * plain_norm);
      EXPECT_GT(plain_norm, 0.5);
      EXPECT_FALSE(fused_params[3].grad().defined());
      std::vector<torch::Tensor> fused_grads, plain_grads;
      for (size_t i = 0; i < fused_params.size(); ++i)
        if (i != 3) {
          fused_grads.push_back(fused_params[i].grad());
          plain_grads.push_back(plain_params[i].grad());
        }
      expect_close(fused_grads, plain_grads, 1e-6, 1e-8);
      // Clipped only where the norm exceeds a positive limit.
      const bool clipped = max_norm > 0 && plain_norm > max_norm;
      EXPECT_EQ(clipped, !torch::equal(before, fused_params[0].grad()));
      if (clipped) {
        double total = 0;
        for (const auto& g : fused_grads) total += g.square().sum().item<double>();
        EXPECT_NEAR(std::sqrt(total), max_norm, 1e-4 * max_norm);
      }
    }
}

TEST(ClipGradientNorm, NoGradientsIsZero) {
  const auto p = torch::ones({3}).requires_grad_(true);
  EXPECT_EQ(clip_gradient_norm({p}, 1.0, true), 0.0);
  EXPECT_EQ(clip_gradient_norm({p}, 1.0, false), 0.0);
}

}  // namespace
}  // namespace cuda_agent::learner
