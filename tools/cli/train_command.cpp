// `cuda-agent train --out DIR [--resume]`: the recipe's three stages on the trajectories that
// earlier rollouts recorded (learner.logs): rejection fine-tuning on the episodes the RFT filter
// keeps, value pretraining of the critic, then PPO, each for its learner.*_steps optimiser
// steps of learner.batch_episodes episodes. It writes
//   DIR/metrics.jsonl     one object per step (stage, losses, rewards, clip fraction, tokens/s)
//   DIR/checkpoints/      every learner.checkpoint_every steps and at each stage's end
//   DIR/final/            the actor as a Hugging Face checkpoint (`--policy torch` loads it)
// --resume continues from the newest complete checkpoint: weights, optimiser states, the batch
// draws' generator and metrics.jsonl cut back to that step, so that the steps after it are
// those of an uninterrupted run.
#include <chrono>
#include <fstream>
#include <iostream>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/learner/checkpoint.hpp"
#include "actors/learner/learner.hpp"
#include "actors/learner/rft_filter.hpp"
#include "actors/learner/trajectory_source.hpp"
#include "actors/policy/torch_backend.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

struct stage_plan {
  std::string name;  // "rft", "value_pretrain", "ppo"
  int64_t steps = 0;
  std::vector<learner::episode_sample> pool;
};

std::vector<std::filesystem::path> log_dirs_of(const std::string& list) {
  std::vector<std::filesystem::path> out;
  std::stringstream in{list};
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.emplace_back(item);
  return out;
}

// The episodes of one step: batch draws without replacement, from the generator the checkpoint
// keeps.
std::vector<learner::episode_sample> draw(const std::vector<learner::episode_sample>& pool, int64_t n,
                                          std::mt19937_64& rng) {
  std::vector<std::size_t> order(pool.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = order.size(); i > 1; --i)  // Fisher-Yates, not std::shuffle: the same on every library
    std::swap(order[i - 1], order[static_cast<std::size_t>(rng() % i)]);
  order.resize(std::min<std::size_t>(order.size(), static_cast<std::size_t>(n)));
  std::vector<learner::episode_sample> out;
  for (const auto i : order) out.push_back(pool[i]);
  return out;
}

nlohmann::json metrics_of(const learner::step_report& r, int64_t step, int64_t stage_step, double seconds) {
  const auto& s = r.stats;
  nlohmann::json j{{"step", step},
                   {"stage", r.stage},
                   {"stage_step", stage_step},
                   {"episodes", r.samples},
                   {"dropped_truncated", r.dropped},
                   {"tokens", r.tokens},
                   {"policy_tokens", r.policy_tokens},
                   {"reward_mean", r.reward_mean},
                   {"tokens_per_s", seconds > 0 ? static_cast<double>(r.tokens) / seconds : 0.0},
                   {"actor_grad_norm", r.actor_grad_norm},
                   {"critic_grad_norm", r.critic_grad_norm}};
  if (r.stage == "rft") j["sft_loss"] = r.sft_loss;
  if (r.stage != "rft") {
    j["value_loss"] = s.value_loss();
    j["value_clip_fraction"] = s.value_clip_fraction();
  }
  if (r.stage == "ppo") {
    j["policy_loss"] = s.policy_loss();
    j["clip_fraction"] = s.clip_fraction();
    j["approx_kl"] = s.approx_kl();
    j["entropy"] = s.entropy();
    j["is_weight_mean"] = s.is_weight_mean();
    j["is_weight_max"] = s.is_weight_max;
    j["is_capped_fraction"] = s.is_capped_fraction();
  }
  return j;
}

// metrics.jsonl up to the first `lines` lines (a resumed run rewrites what came after its
// checkpoint).
void cut_metrics(const std::filesystem::path& path, int64_t lines) {
  std::ifstream in{path};
  std::string kept, line;
  for (int64_t i = 0; i < lines && std::getline(in, line); ++i) kept += line + "\n";
  in.close();
  std::ofstream out{path, std::ios::trunc};
  out << kept;
}

int run_train(const settings& config, const std::filesystem::path& out, bool resume) {
  const std::filesystem::path model_dir = config.get_string("learner.model_dir");
  if (model_dir.empty())
    throw usage_error{"set learner.model_dir to the checkpoint to train (config.json, *.safetensors, tokenizer.json)"};
  const auto logs = log_dirs_of(config.get_string("learner.logs"));
  if (logs.empty())
    throw usage_error{"set learner.logs to the message logs of rollouts to train on (comma-separated)"};
  const auto ckpt_root = out / "checkpoints";
  if (!resume && std::filesystem::exists(out / "metrics.jsonl"))
    throw usage_error{out.string() + " holds a training run already; pass --resume to continue it or choose another --out"};
  std::filesystem::create_directories(out);

  // The episodes: every trajectory with tokens; RFT's pool is what the filter keeps.
  const auto read = learner::read_trajectories(logs);
  for (const auto& why : read.skipped) std::cerr << "train: skipped " << why << "\n";
  std::vector<learner::episode_sample> all;
  std::vector<trajectory> with_tokens;
  for (const auto& t : read.trajectories) {
    try {
      all.push_back(learner::sample_of(t));
      with_tokens.push_back(t);
    } catch (const learner::learner_error& e) {
      std::cerr << "train: skipped " << e.what() << "\n";
    }
  }
  if (all.empty())
    throw usage_error{"the logs hold no trajectory with tokens; record them with --policy torch, or "
                      "--policy demo with policy.model_dir set"};
  learner::rft_filter_options filter;
  filter.min_reward = static_cast<int32_t>(config.get_int("learner.rft_min_reward"));
  const auto selection = learner::select_for_rft(with_tokens, filter);
  std::vector<stage_plan> stages{{"rft", config.get_int("learner.rft_steps"), {}},
                                 {"value_pretrain", config.get_int("learner.value_steps"), all},
                                 {"ppo", config.get_int("learner.ppo_steps"), all}};
  for (const auto i : selection.kept) stages[0].pool.push_back(all[i]);
  std::cerr << "train: " << all.size() << " episodes; RFT keeps " << stages[0].pool.size();
  for (const auto& [why, n] : selection.dropped) std::cerr << ", drops " << n << " (" << why << ")";
  std::cerr << "\n";
  if (stages[0].steps > 0 && stages[0].pool.empty())
    throw usage_error{"no episode passes the RFT filter (learner.rft_min_reward = " +
                      std::to_string(filter.min_reward) + "); set learner.rft_steps = 0 to skip RFT"};

  const auto device = policy::torch_device(config.get_string("learner.device"));
  const auto actor = model::transformer::load(model_dir, device, torch::kFloat32);
  const bool need_critic = stages[1].steps > 0 || stages[2].steps > 0;
  const auto critic = need_critic ? model::transformer::load(model_dir, device, torch::kFloat32) : nullptr;
  learner::learner_options options;
  options.actor_lr = config.get_real("learner.actor_lr");
  options.critic_lr = config.get_real("learner.critic_lr");
  options.max_grad_norm = config.get_real("learner.max_grad_norm");
  options.token_budget = config.get_int("learner.token_budget");
  options.lambda = config.get_real("learner.gae_lambda");
  options.ppo.is_cap = config.get_real("learner.is_cap");
  options.truncated = config.get_string("learner.truncated");
  learner::learner trainer{actor, critic, options};

  std::mt19937_64 rng{static_cast<uint64_t>(config.get_int("learner.seed"))};
  learner::checkpoint_contents contents;
  contents.tensor_sets.emplace_back("actor", actor->named_parameters());
  contents.optimizers.emplace_back("actor", &trainer.actor_optimizer());
  if (critic) {
    contents.tensor_sets.emplace_back("critic", trainer.critic_parameters());
    contents.optimizers.emplace_back("critic", trainer.critic_optimizer());
  }
  contents.engines.emplace_back("batches", &rng);
  int64_t step = 0;
  if (resume) {
    if (const auto latest = learner::latest_checkpoint(ckpt_root)) {
      learner::read_checkpoint(*latest, contents);
      step = contents.state.at("step").get<int64_t>();
      cut_metrics(out / "metrics.jsonl", step);
      std::cerr << "train: resumed from " << latest->string() << " at step " << step << "\n";
    } else {
      cut_metrics(out / "metrics.jsonl", 0);
      std::cerr << "train: no checkpoint in " << ckpt_root.string() << "; starting at step 0\n";
    }
  }
  const int64_t every = config.get_int("learner.checkpoint_every");
  const int keep = static_cast<int>(config.get_int("learner.keep_checkpoints"));
  const int64_t batch = config.get_int("learner.batch_episodes");
  std::ofstream metrics{out / "metrics.jsonl", std::ios::app};
  int64_t stage_start = 0;
  for (const auto& stage : stages) {
    const int64_t stage_end = stage_start + stage.steps;
    for (int64_t global = std::max(step, stage_start); global < stage_end; ++global) {
      const auto samples = draw(stage.pool, batch, rng);
      const auto t0 = std::chrono::steady_clock::now();
      const auto report = stage.name == "rft"              ? trainer.rft_step(samples)
                          : stage.name == "value_pretrain" ? trainer.value_step(samples)
                                                           : trainer.ppo_step(samples);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const auto line = metrics_of(report, global + 1, global + 1 - stage_start, seconds);
      metrics << line.dump() << "\n" << std::flush;
      std::cerr << "train: " << stage.name << " " << (global + 1 - stage_start) << "/" << stage.steps << " "
                << line.dump() << "\n";
      step = global + 1;
      if (step % every == 0 || step == stage_end) {
        contents.state = {{"step", step}, {"stage", stage.name}, {"weight_version", step}};
        learner::write_checkpoint(ckpt_root, step, contents, keep);
      }
    }
    stage_start = stage_end;
  }
  learner::export_hugging_face(*actor, model_dir, out / "final");
  std::cerr << "train: " << step << " steps; the actor is in " << (out / "final").string() << "\n";
  return 0;
}

}  // namespace

void add_train_command(CLI::App& app, invocation& inv) {
  struct options {
    std::filesystem::path out;
    bool resume = false;
  };
  auto opts = std::make_shared<options>();
  auto* cmd = app.add_subcommand("train", "Train the policy on recorded trajectories: RFT, value pretraining, PPO");
  cmd->add_option("--out", opts->out, "Directory for metrics.jsonl, checkpoints/ and final/")->required();
  cmd->add_flag("--resume", opts->resume, "Continue from the newest complete checkpoint in --out");
  cmd->callback([&inv, opts] {
    inv.action = [&inv, opts] {
      try {
        return run_train(inv.config, opts->out, opts->resume);
      } catch (const learner::learner_error& e) {
        throw usage_error{e.what()};
      }
    };
  });
}

}  // namespace cuda_agent::cli
