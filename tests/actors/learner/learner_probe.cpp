// Drives actors/learner/learner.hpp for test_learner.py: loads a checkpoint as actor and critic,
// runs the named steps over the samples of a JSON file, and writes every weight and gradient
// after them (safetensors) and each step's report (JSON lines on stdout).
//
//   learner_probe MODEL_DIR SAMPLES.json OPTIONS.json OUT.safetensors STAGE...
//   (STAGE: rft, value or ppo; a learner_error exits 2 with "error: ..." on stderr)
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "actors/learner/learner.hpp"
#include "actors/model/safetensors.hpp"

using namespace cuda_agent;

namespace {

std::vector<learner::episode_sample> read_samples(const std::string& path) {
  std::ifstream in(path);
  const auto json = nlohmann::json::parse(in);
  std::vector<learner::episode_sample> out;
  for (const auto& j : json) {
    learner::episode_sample s;
    s.episode_id = j.at("episode_id").get<std::string>();
    s.tokens = j.at("tokens").get<std::vector<int64_t>>();
    s.loss_mask = j.at("loss_mask").get<std::vector<uint8_t>>();
    s.rollout_logprobs = j.at("rollout_logprobs").get<std::vector<float>>();
    s.reward = j.at("reward").get<int32_t>();
    if (j.value("truncated", false)) s.reason = termination::turn_budget;
    out.push_back(std::move(s));
  }
  return out;
}

nlohmann::json report_json(const learner::step_report& r) {
  const auto& s = r.stats;
  return {{"stage", r.stage},           {"samples", r.samples},
          {"dropped", r.dropped},       {"micro_batches", r.micro_batches},
          {"policy_tokens", r.policy_tokens}, {"sft_loss", r.sft_loss},
          {"policy_loss", s.policy_loss()}, {"value_loss", s.value_loss()},
          {"clip_fraction", s.clip_fraction()}, {"entropy", s.entropy()},
          {"is_weight_mean", s.is_weight_mean()}, {"is_weight_max", s.is_weight_max},
          {"actor_grad_norm", r.actor_grad_norm}, {"critic_grad_norm", r.critic_grad_norm},
          {"reward_mean", r.reward_mean}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::cerr << "usage: learner_probe MODEL_DIR SAMPLES.json OPTIONS.json OUT.safetensors STAGE...\n";
    return 64;
  }
  try {
    const auto actor = model::transformer::load(argv[1], torch::kCPU, torch::kFloat32);
    const auto critic = model::transformer::load(argv[1], torch::kCPU, torch::kFloat32);
    std::ifstream options_file(argv[3]);
    const auto o = nlohmann::json::parse(options_file);
    learner::learner_options options;
    options.actor_lr = o.at("actor_lr");
    options.critic_lr = o.at("critic_lr");
    options.max_grad_norm = o.at("max_grad_norm");
    options.token_budget = o.at("token_budget");
    options.lambda = o.at("lambda");
    options.truncated = o.at("truncated").get<std::string>();
    options.ppo.is_cap = o.at("is_cap");
    options.activation_checkpointing = o.value("activation_checkpointing", false);
    options.compute_dtype = o.value("compute_dtype", std::string("float32"));
    options.bf16_working_weights = o.value("bf16_working_weights", false);
    learner::learner l{actor, critic, options};
    const auto samples = read_samples(argv[2]);
    for (int i = 5; i < argc; ++i) {
      const std::string stage = argv[i];
      learner::step_report r;
      if (stage == "rft") r = l.rft_step(samples);
      else if (stage == "value") r = l.value_step(samples);
      else if (stage == "ppo") r = l.ppo_step(samples);
      else throw learner::learner_error{"unknown stage '" + stage + "'"};
      std::cout << report_json(r).dump() << "\n";
    }
    std::vector<std::pair<std::string, torch::Tensor>> out;
    for (const auto& [name, t] : actor->named_parameters()) {
      out.emplace_back("actor." + name, t.detach());
      if (t.grad().defined()) out.emplace_back("actor_grad." + name, t.grad());
    }
    for (const auto& [name, t] : l.critic_parameters()) {
      out.emplace_back("critic." + name, t.detach());
      if (t.grad().defined()) out.emplace_back("critic_grad." + name, t.grad());
    }
    model::write_safetensors(argv[4], out);
  } catch (const learner::learner_error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
