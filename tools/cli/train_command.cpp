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
//
// --live makes the PPO stage online: the torch policy (policy.model_dir, by default the
// learner's checkpoint) rolls out learner.batch_episodes episodes per step over a corpus set
// through the whole pipeline while the learner actor (actors/learner/learner_actor.hpp) trains
// on the batches already settled; after each step the new weights reach the policy with the
// step as their version, and admission keeps sampling at most learner.staleness batches ahead
// of training (rollout_manager.hpp). Each live step's metrics say which weight versions sampled
// its batch. The rollout's message log (--log, default DIR/rollout_log) holds every episode.
// RFT and value pretraining still train on learner.logs, and are skipped when it is empty.
#include <chrono>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/learner/checkpoint.hpp"
#include "actors/learner/learner_actor.hpp"
#include "actors/learner/learner.hpp"
#include "actors/learner/rft_filter.hpp"
#include "actors/learner/trajectory_source.hpp"
#include "actors/policy/torch_backend.hpp"
#include "actors/recorder.hpp"
#include "actors/rollout_manager.hpp"
#include "corpus/task_index.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"

namespace cuda_agent::cli {
namespace {

struct live_options {
  bool live = false;
  std::string corpus;  // empty: bench on cuda, smoke on cpu
  std::vector<std::string> task_globs;
  std::string device = "auto";  // where the episodes' candidates run
  int concurrency = 0;          // 0: rollout.concurrency
  std::filesystem::path log_dir;
  std::vector<task_spec> tasks;  // resolved by run_train before anything loads
};

// The live stage's tasks; a one-line usage_error for an unknown set or globs that match nothing.
std::vector<task_spec> live_tasks(const settings& config, const live_options& lo) {
  const std::string device = resolve_device(lo.device);
  const std::string set_name = lo.corpus.empty() ? (device == "cuda" ? "bench" : "smoke") : lo.corpus;
  std::filesystem::path set_dir;
  std::vector<task_spec> all;
  try {
    set_dir = corpus::resolve_set(corpus_root(config), set_name);
    all = corpus::load_task_set(set_dir);
  } catch (const usage_error&) {
    throw;
  } catch (const std::exception& e) {  // an unknown set or a broken index: the command line's fault
    throw usage_error{std::string{"--corpus: "} + e.what()};
  }
  if (all.empty()) throw usage_error{"corpus set " + set_dir.string() + " has no tasks"};
  return select_tasks(std::move(all), lo.task_globs, set_name);
}

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

// The oldest and newest weight versions that sampled a batch's turns.
std::pair<int64_t, int64_t> version_range(const std::vector<learner::episode_sample>& samples) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const auto& s : samples)
    for (const auto v : s.turn_versions) lo = std::min(lo, v), hi = std::max(hi, v);
  return lo > hi ? std::pair<int64_t, int64_t>{-1, -1} : std::pair{lo, hi};  // no turns at all
}

// What a live PPO stage needs from run_train: the learner, its actor, the step counter and how
// a step is written down (metrics line, checkpoint).
struct live_stage {
  learner::learner* trainer = nullptr;
  model::transformer* actor = nullptr;
  int64_t* step = nullptr;
  int64_t stage_start = 0;
  int64_t stage_end = 0;
  std::function<void(const nlohmann::json&)> write_metrics;
  std::function<std::string()> checkpoint;  // after a step; "" when none was due
};

// PPO on live rollouts (the file comment). Returns once every batch is trained.
void run_live_ppo(const settings& learner_config, const live_options& lo, const live_stage& stage) {
  settings config = learner_config;
  config.apply_override("policy.backend=torch");
  if (config.get_string("policy.model_dir").empty())
    config.apply_override("policy.model_dir=" + config.get_string("learner.model_dir"));
  const std::string device = resolve_device(lo.device);
  const int64_t batch = config.get_int("learner.batch_episodes");
  const int64_t batches = stage.stage_end - *stage.step;

  rollout_plan plan;
  plan.run_id = fmt::format("train{:06d}", *stage.step);
  plan.tasks = lo.tasks;
  plan.episodes = static_cast<int32_t>(batches * batch);
  plan.concurrency = lo.concurrency > 0 ? lo.concurrency : static_cast<int32_t>(config.get_int("rollout.concurrency"));
  plan.retries = static_cast<int32_t>(config.get_int("rollout.retries"));
  plan.episodes_dir = lo.log_dir.parent_path() / "episodes" / plan.run_id;
  plan.sources = default_workdir_sources();
  plan.base = base_episode_config(config, device, "torch");
  plan.batch_episodes = static_cast<int32_t>(batch);
  plan.staleness = static_cast<int32_t>(config.get_int("learner.staleness"));

  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  caf::actor_system system{cfg};
  auto results = std::make_shared<rollout_results>();
  std::string run_error;
  {
    auto node = start_node_services(system, config, device, lo.log_dir, true);
    auto* policy = dynamic_cast<policy::torch_backend*>(node.policy_backend.get());
    if (!policy) throw std::logic_error{"train --live: the policy backend is not the torch one"};
    // The policy samples with the learner's weights from the first episode on (after RFT, value
    // pretraining or a resumed checkpoint they differ from policy.model_dir's).
    policy->update_weights(stage.actor->named_parameters(), *stage.step);
    auto train = [&stage, policy](std::vector<trajectory> trajectories) {
      std::vector<learner::episode_sample> samples;
      for (const auto& t : trajectories) {
        try {
          samples.push_back(learner::sample_of(t));
        } catch (const learner::learner_error& e) {
          std::cerr << "train: skipped " << e.what() << "\n";
        }
      }
      const int64_t sampled_at = *stage.step;
      const auto t0 = std::chrono::steady_clock::now();
      learner::step_report report;
      report.stage = "ppo";
      std::string skipped;
      try {
        if (samples.empty()) throw learner::learner_error{"no trajectory of the batch holds tokens"};
        report = stage.trainer->ppo_step(samples);
      } catch (const learner::learner_error& e) {
        skipped = e.what();  // the batch counts; the weights stay as they were
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const int64_t step = ++*stage.step;
      auto line = metrics_of(report, step, step - stage.stage_start, seconds);
      const auto [oldest, newest] = version_range(samples);
      line["live"] = true;
      line["rollout_episodes"] = trajectories.size();
      line["sampled_versions"] = {oldest, newest};
      line["version_lag"] = oldest < 0 ? 0 : sampled_at - oldest;
      // The batch's outcomes by the milestones (reward >= 1 passes, 2 beats eager, 3 compile),
      // over the episodes the agent ended (the learner actor leaves infrastructure failures out).
      int64_t passed = 0, beat_eager = 0, beat_compile = 0;
      for (const auto& t : trajectories) {
        passed += t.reward >= 1;
        beat_eager += t.reward >= 2;
        beat_compile += t.reward >= 3;
      }
      auto rate = [n = trajectories.size()](int64_t k) { return static_cast<double>(k) / static_cast<double>(n); };
      line["pass_rate"] = rate(passed);
      line["faster_than_eager"] = rate(beat_eager);
      line["faster_than_compile"] = rate(beat_compile);
      if (!skipped.empty()) line["skipped"] = skipped;
      stage.write_metrics(line);
      learner_update update;
      update.phase = learner_phase::ppo;
      update.weight_version = step;
      update.samples = report.samples;
      update.policy_loss = report.stats.policy_loss();
      update.value_loss = report.stats.value_loss();
      update.kl = report.stats.approx_kl();
      update.entropy = report.stats.entropy();
      update.clip_fraction = report.stats.clip_fraction();
      update.checkpoint_path = stage.checkpoint();
      policy->update_weights(stage.actor->named_parameters(), step);
      return update;
    };
    auto learner_actor = learner::spawn_learner_actor(system, static_cast<int32_t>(batch), train, node.recorder);
    rollout_services services{{}, node.compiler.pool, node.gpu.pool, node.recorder, node.make_tools,
                              node.policy_supervisor, learner_actor};
    auto manager = spawn_rollout_manager(system, plan, std::move(services), results);
    std::cerr << fmt::format("train: live PPO, {} steps of {} episodes over {} tasks of {} on {}, {} at a "
                             "time, staleness {}; log {}\n",
                             batches, batch, plan.tasks.size(), lo.corpus.empty() ? "the default set" : lo.corpus,
                             device, plan.concurrency,
                             plan.staleness, lo.log_dir.string());
    caf::scoped_actor self{system};
    self->request(manager, caf::infinite, run_atom::value)
        .receive([](int32_t) {}, [&](caf::error& e) { run_error = system.render(e); });
    if (run_error.empty())  // the last batch may be partial (retries ran out) or still training
      self->request(learner_actor, caf::infinite, flush_atom::value)
          .receive([](const learner_update&) {}, [&](caf::error& e) { run_error = "the learner: " + system.render(e); });
    if (node.recorder)
      self->request(node.recorder, std::chrono::seconds{30}, flush_atom::value).receive([] {}, [](caf::error&) {});
    self->send_exit(manager, caf::exit_reason::user_shutdown);
    self->send_exit(learner_actor, caf::exit_reason::user_shutdown);
    node.stop();
  }
  system.await_all_actors_done();
  if (!run_error.empty()) throw std::runtime_error{"train --live: " + run_error};
}

int run_train(const settings& config, const std::filesystem::path& out, bool resume, live_options live) {
  const std::filesystem::path model_dir = config.get_string("learner.model_dir");
  if (model_dir.empty())
    throw usage_error{"set learner.model_dir to the checkpoint to train (config.json, *.safetensors, tokenizer.json)"};
  const auto logs = log_dirs_of(config.get_string("learner.logs"));
  if (logs.empty() && !live.live)
    throw usage_error{"set learner.logs to the message logs of rollouts to train on (comma-separated), "
                      "or train on live rollouts with --live"};
  const auto ckpt_root = out / "checkpoints";
  if (!resume && std::filesystem::exists(out / "metrics.jsonl"))
    throw usage_error{out.string() + " holds a training run already; pass --resume to continue it or choose another --out"};
  if (live.live) live.tasks = live_tasks(config, live);
  std::filesystem::create_directories(out);

  // The episodes: every trajectory with tokens; RFT's pool is what the filter keeps.
  const auto read = logs.empty() ? learner::log_trajectories{} : learner::read_trajectories(logs);
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
  if (all.empty() && !logs.empty())
    throw usage_error{"the logs hold no trajectory with tokens; record them with --policy torch, or "
                      "--policy demo with policy.model_dir set"};
  learner::rft_filter_options filter;
  filter.min_reward = static_cast<int32_t>(config.get_int("learner.rft_min_reward"));
  const auto selection = learner::select_for_rft(with_tokens, filter);
  std::vector<stage_plan> stages{{"rft", config.get_int("learner.rft_steps"), {}},
                                 {"value_pretrain", config.get_int("learner.value_steps"), all},
                                 {"ppo", config.get_int("learner.ppo_steps"), all}};
  for (const auto i : selection.kept) stages[0].pool.push_back(all[i]);
  if (logs.empty()) {
    std::cerr << "train: learner.logs is empty, so RFT and value pretraining are skipped\n";
    stages[0].steps = stages[1].steps = 0;
  }
  if (!logs.empty()) {
    std::cerr << "train: " << all.size() << " episodes; RFT keeps " << stages[0].pool.size();
    for (const auto& [why, n] : selection.dropped) std::cerr << ", drops " << n << " (" << why << ")";
    std::cerr << "\n";
  }
  if (stages[0].steps > 0 && stages[0].pool.empty())
    throw usage_error{"no episode passes the RFT filter (learner.rft_min_reward = " +
                      std::to_string(filter.min_reward) + "); set learner.rft_steps = 0 to skip RFT"};

  const auto device = policy::torch_device(config.get_string("learner.device"));
  const auto actor = model::transformer::load(model_dir, device, torch::kFloat32);
  const bool need_critic = stages[1].steps > 0 || stages[2].steps > 0;
  if (live.live && live.log_dir.empty()) live.log_dir = out / "rollout_log";
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
  auto write_metrics = [&metrics](const nlohmann::json& line) {
    metrics << line.dump() << "\n" << std::flush;
    std::cerr << "train: " << line.at("stage").get<std::string>() << " " << line.at("stage_step") << " "
              << line.dump() << "\n";
  };
  // After step `step` of a stage ending at `stage_end`: a checkpoint where one is due.
  auto checkpoint = [&](const std::string& stage, int64_t stage_end) -> std::string {
    if (step % every != 0 && step != stage_end) return {};
    contents.state = {{"step", step}, {"stage", stage}, {"weight_version", step}};
    learner::write_checkpoint(ckpt_root, step, contents, keep);
    const auto latest = learner::latest_checkpoint(ckpt_root);
    return latest ? latest->string() : std::string{};
  };
  int64_t stage_start = 0;
  for (const auto& stage : stages) {
    const int64_t stage_end = stage_start + stage.steps;
    if (stage.name == "ppo" && live.live) {
      if (step < stage_end)
        run_live_ppo(config, live, {&trainer, actor.get(), &step, stage_start, stage_end, write_metrics,
                                    [&, stage_end] { return checkpoint("ppo", stage_end); }});
      stage_start = stage_end;
      continue;
    }
    for (int64_t global = std::max(step, stage_start); global < stage_end; ++global) {
      const auto samples = draw(stage.pool, batch, rng);
      const auto t0 = std::chrono::steady_clock::now();
      const auto report = stage.name == "rft"              ? trainer.rft_step(samples)
                          : stage.name == "value_pretrain" ? trainer.value_step(samples)
                                                           : trainer.ppo_step(samples);
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      write_metrics(metrics_of(report, global + 1, global + 1 - stage_start, seconds));
      step = global + 1;
      checkpoint(stage.name, stage_end);
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
    live_options live;
  };
  auto opts = std::make_shared<options>();
  auto* cmd = app.add_subcommand("train", "Train the policy on recorded trajectories: RFT, value pretraining, PPO");
  cmd->add_option("--out", opts->out, "Directory for metrics.jsonl, checkpoints/ and final/")->required();
  cmd->add_flag("--resume", opts->resume, "Continue from the newest complete checkpoint in --out");
  cmd->add_flag("--live", opts->live.live, "PPO on live rollouts of the torch policy instead of learner.logs");
  cmd->add_option("--corpus", opts->live.corpus, "--live: the task set (default bench on cuda, smoke on cpu)");
  cmd->add_option("--tasks", opts->live.task_globs, "--live: only tasks whose ids match these globs")
      ->delimiter(',');
  cmd->add_option("--device", opts->live.device, "--live: where candidates run")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--concurrency", opts->live.concurrency, "--live: episodes at a time (default rollout.concurrency)");
  cmd->add_option("--log", opts->live.log_dir, "--live: the rollout's message log (default DIR/rollout_log)");
  cmd->callback([&inv, opts] {
    inv.action = [&inv, opts] {
      try {
        return run_train(inv.config, opts->out, opts->resume, opts->live);
      } catch (const learner::learner_error& e) {
        throw usage_error{e.what()};
      }
    };
  });
}

}  // namespace cuda_agent::cli
