// `cuda-agent train --out DIR [--resume]`: the recipe's three stages: rejection fine-tuning on
// the episodes the RFT filter keeps, value pretraining of the critic, then PPO, each for its
// learner.*_steps optimiser steps of learner.batch_episodes episodes. It writes
//   DIR/metrics.jsonl     one object per step (stage, losses, rewards, clip fraction, tokens/s);
//                         stderr shows each stage's progress (stage_progress)
//   DIR/checkpoints/      every learner.checkpoint_every steps and at each stage's end
//   DIR/final/            the actor as a Hugging Face checkpoint (`--policy torch` loads it)
// --resume continues from the newest complete checkpoint: weights, optimiser states, the batch
// draws' generator and metrics.jsonl cut back to that step, so that the steps after it are
// those of an uninterrupted run.
//
// The episodes come from the message logs of earlier rollouts (learner.logs) and from rollouts
// the command runs itself over learner.corpus / learner.tasks (--corpus, --tasks):
// - learner.init_model = "tiny" creates a tiny random model in an empty learner.model_dir first
//   (tools/learn/tiny_model.py), so that a learning run needs no downloaded checkpoint;
// - learner.record_demos plays the tasks' shipped demonstrations in the model's tokens
//   (DIR/demo_log), the positive episodes RFT starts from;
// - learner.live (--live) makes the PPO stage online: the torch policy rolls out
//   learner.batch_episodes episodes per step through the whole pipeline while the learner actor
//   (actors/learner/learner_actor.hpp) trains on the batches already settled; after each step
//   the new weights reach the policy with the step as their version, and admission keeps
//   sampling at most learner.staleness batches ahead of training (rollout_manager.hpp). Each
//   live step's metrics say which weight versions sampled its batch; the rollout's message log
//   is --log (default DIR/rollout_log);
// - learner.evaluate runs one greedy episode per task with the actor before training and after
//   RFT and PPO, each a line of DIR/eval.jsonl with its log under DIR/eval/.
//
// With learner.restarts > 0 the work runs in a child process that this one supervises
// (supervise_train): a child that dies by a signal is started again from the newest checkpoint.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <algorithm>
#include <cctype>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/learner/checkpoint.hpp"
#include "actors/learner/learner_actor.hpp"
#include "actors/learner/learner.hpp"
#include "actors/learner/rank_group.hpp"
#include "actors/learner/rft_filter.hpp"
#include "actors/learner/trajectory_source.hpp"
#include "actors/policy/torch_backend.hpp"
#include "actors/process/subprocess.hpp"
#include "actors/recorder.hpp"
#include "actors/rollout_manager.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"
#include "tools/cli/progress.hpp"
#include "tools/cli/supervised_children.hpp"

namespace cuda_agent::cli {
namespace {

// Where train's own rollouts run, from the flags and learner.corpus / learner.tasks.
struct train_rollouts {
  std::string set_name;
  std::vector<task_spec> tasks;  // empty when no rollout is asked for
  std::string device;            // resolved: cpu or cuda
  int32_t concurrency = 1;
  std::filesystem::path live_log;  // the live PPO stage's message log
};

struct train_flags {
  std::filesystem::path out;
  bool resume = false;
  bool live = false;
  std::string corpus;
  std::vector<std::string> task_globs;
  std::string device = "auto";
  int concurrency = 0;  // 0: rollout.concurrency
  std::filesystem::path log_dir;
};

// learner.init_model = "tiny": a tiny random checkpoint in the empty (or missing) model_dir,
// made in a sibling directory and renamed into place, so that a run killed while it is made
// leaves no half checkpoint behind.
void create_tiny_model(const settings& config, const std::filesystem::path& model_dir) {
  const std::filesystem::path script = std::filesystem::path{CUDA_AGENT_SOURCE_DIR} / "tools" / "learn" / "tiny_model.py";
  const std::filesystem::path staging = model_dir.string() + ".creating";
  std::filesystem::remove_all(staging);
  const std::string python = config.get_string("harness.python");
  const std::vector<std::string> argv{python, script.string(), "--out", staging.string(), "--hidden",
                                      std::to_string(config.get_int("learner.init_hidden")), "--layers",
                                      std::to_string(config.get_int("learner.init_layers")), "--seed",
                                      std::to_string(config.get_int("learner.seed"))};
  subprocess_options options;
  options.timeout = std::chrono::minutes{10};
  subprocess_result result;
  try {
    result = run_subprocess(argv, options);
  } catch (const std::system_error& e) {
    throw usage_error{"learner.init_model: the harness python '" + python + "' cannot be started (" + e.what() +
                      "); set harness.python to a Python with transformers and tokenizers"};
  }
  if (!result.ok()) {
    std::string err = result.err;
    while (!err.empty() && std::isspace(static_cast<unsigned char>(err.back()))) err.pop_back();
    const auto nl = err.rfind('\n');
    throw std::runtime_error{"learner.init_model: " + script.string() + " failed, " + result.describe() + ": " +
                             (nl == std::string::npos ? err : err.substr(nl + 1))};
  }
  std::filesystem::remove_all(model_dir);  // empty, or missing
  if (model_dir.has_parent_path()) std::filesystem::create_directories(model_dir.parent_path());
  std::filesystem::rename(staging, model_dir);
  std::string line = result.out;
  while (!line.empty() && line.back() == '\n') line.pop_back();
  std::cerr << "train: created a tiny random model: " << line << "\n";
}

// Episodes counted by the milestones their rewards reached: reward >= 1 passes, 2 beats eager,
// 3 beats compile.
struct milestone_counts {
  int64_t episodes = 0, passed = 0, beat_eager = 0, beat_compile = 0, reward_sum = 0;
  void add(int32_t reward) {
    ++episodes;
    reward_sum += reward;
    passed += reward >= 1;
    beat_eager += reward >= 2;
    beat_compile += reward >= 3;
  }
  double rate(int64_t k) const { return episodes == 0 ? 0.0 : static_cast<double>(k) / static_cast<double>(episodes); }
};

bool is_empty_dir_or_missing(const std::filesystem::path& dir) {
  return !std::filesystem::exists(dir) || (std::filesystem::is_directory(dir) && std::filesystem::is_empty(dir));
}

// A plan for `episodes` episodes over `tasks`, in `dir`.
rollout_plan plan_of(const settings& config, const train_rollouts& r, std::string run_id,
                     const std::vector<task_spec>& tasks, int64_t episodes, const std::filesystem::path& dir) {
  rollout_plan plan;
  plan.run_id = std::move(run_id);
  plan.tasks = tasks;
  plan.episodes = static_cast<int32_t>(episodes);
  plan.concurrency = r.concurrency;
  plan.retries = static_cast<int32_t>(config.get_int("rollout.retries"));
  plan.episodes_dir = dir;
  plan.sources = default_workdir_sources();
  plan.base = base_episode_config(config, r.device, config.get_string("policy.backend"));
  return plan;
}

// Runs once the node's actors are up, before any episode: may push weights into the policy
// backend, and returns the learner actor the rollout manager feeds (an empty handle for none).
using prepare_node = std::function<learner_actor(caf::actor_system&, const node_services&)>;

// One rollout of `plan` through a node started from `config`, its messages into `log_dir`.
// A learner actor that `prepare` starts is flushed (its last, partial batch trained) once every
// episode settled. Returns the settled episodes; throws std::runtime_error when the run fails.
std::vector<episode_summary> run_pipeline(const settings& config, const rollout_plan& plan, const std::string& device,
                                          const std::filesystem::path& log_dir, const prepare_node& prepare) {
  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  caf::actor_system system{cfg};
  auto results = std::make_shared<rollout_results>();
  std::string run_error;  // thrown only once every actor is stopped: the system waits for them
  {
    auto node = start_node_services(system, config, device, log_dir, true);
    learner_actor live_learner;
    try {
      if (prepare) live_learner = prepare(system, node);
    } catch (const std::exception& e) {
      run_error = e.what();
    }
    caf::scoped_actor self{system};
    if (run_error.empty()) {
      rollout_services services{{}, node.compiler.pool, node.gpu.pool, node.recorder, node.make_tools,
                                node.policy_supervisor, live_learner};
      auto manager = spawn_rollout_manager(system, plan, std::move(services), results);
      self->request(manager, caf::infinite, run_atom::value)
          .receive([](int32_t) {}, [&](caf::error& e) { run_error = system.render(e); });
      if (run_error.empty() && live_learner)  // the last batch may be partial (retries ran out)
        self->request(live_learner, caf::infinite, flush_atom::value)
            .receive([](const learner_update&) {}, [&](caf::error& e) { run_error = "the learner: " + system.render(e); });
      self->send_exit(manager, caf::exit_reason::user_shutdown);
    }
    if (node.recorder)
      self->request(node.recorder, std::chrono::seconds{30}, flush_atom::value).receive([] {}, [](caf::error&) {});
    if (live_learner) self->send_exit(live_learner, caf::exit_reason::user_shutdown);
    node.stop();
  }
  system.await_all_actors_done();
  if (!run_error.empty()) throw std::runtime_error{run_error};
  std::lock_guard<std::mutex> lock{results->mutex};
  return results->episodes;
}

// The torch policy over the learner's actor: `config` with the torch backend, whose checkpoint
// (policy.model_dir, by default learner.model_dir) gives the architecture and tokenizer; the
// weights are pushed from the learner (prepare_node).
settings torch_policy_settings(const settings& config) {
  settings out = config;
  out.apply_override("policy.backend=torch");
  if (out.get_string("policy.model_dir").empty())
    out.apply_override("policy.model_dir=" + config.get_string("learner.model_dir"));
  return out;
}

policy::torch_backend& torch_backend_of(const node_services& node) {
  auto* policy = dynamic_cast<policy::torch_backend*>(node.policy_backend.get());
  if (!policy) throw std::logic_error{"train: the policy backend is not the torch one"};
  return *policy;
}

// learner.record_demos: the tasks' shipped demonstrations played by the demo policy in the
// learner's checkpoint's tokens, into DIR/demo_log. A log that holds every task's trajectory
// (a resumed run) is used as it is; a partial one is recorded again.
std::filesystem::path record_demos(const settings& config, const train_rollouts& r, const std::filesystem::path& out) {
  const auto log = out / "demo_log";
  const auto episodes = out / "demo_episodes";
  if (std::filesystem::exists(log)) {
    std::set<std::string> have;
    for (const auto& t : learner::read_trajectories({log}).trajectories) have.insert(t.task_id);
    if (have.size() == r.tasks.size()) {
      std::cerr << "train: the demonstrations are recorded in " << log.string() << " already\n";
      return log;
    }
    std::filesystem::remove_all(log);
    std::filesystem::remove_all(episodes);
  }
  settings demo = config;
  demo.apply_override("policy.backend=demo");
  demo.apply_override("policy.model_dir=" + config.get_string("learner.model_dir"));
  const auto plan = plan_of(demo, r, "demo", r.tasks, static_cast<int64_t>(r.tasks.size()), episodes);
  std::cerr << fmt::format("train: recording the demonstrations of {} tasks of {} in the model's tokens into {}\n",
                           r.tasks.size(), r.set_name, log.string());
  const auto settled = run_pipeline(demo, plan, r.device, log, {});
  const auto passed = std::count_if(settled.begin(), settled.end(), [](const auto& s) { return s.verdict.reward >= 1; });
  std::cerr << fmt::format("train: {} of {} demonstrations earn a reward of 1 or more\n", passed, settled.size());
  return log;
}

// learner.evaluate: one greedy episode per task with the actor's weights as of `step`; the line
// eval.jsonl keeps for it.
nlohmann::json evaluate(const settings& config, const train_rollouts& r, const std::filesystem::path& out,
                        const std::string& after, int64_t step, const model::transformer& actor) {
  settings greedy = torch_policy_settings(config);
  greedy.apply_override("policy.temperature=0");
  const auto dir = out / "eval" / after;
  std::filesystem::remove_all(dir);  // what an interrupted evaluation left
  const auto plan = plan_of(greedy, r, fmt::format("eval{:06d}", step), r.tasks,
                            static_cast<int64_t>(r.tasks.size()), dir / "episodes");
  std::cerr << fmt::format("train: evaluating the actor after {} (step {}): a greedy episode of each of {} tasks\n",
                           after, step, r.tasks.size());
  auto push_weights = [&actor, step](caf::actor_system&, const node_services& node) {
    torch_backend_of(node).update_weights(actor.named_parameters(), step);
    return learner_actor{};
  };
  auto settled = run_pipeline(greedy, plan, r.device, dir / "log", push_weights);
  std::sort(settled.begin(), settled.end(), [](const auto& a, const auto& b) { return a.index < b.index; });
  nlohmann::json tasks = nlohmann::json::array();
  milestone_counts ended;
  int64_t failures = 0;
  for (const auto& s : settled) {
    tasks.push_back({{"task", s.task.id}, {"episode", s.episode_id}, {"reason", to_string(s.ended.reason)},
                     {"reward", s.verdict.reward}});
    if (s.ended.reason == termination::infrastructure_failure) {
      ++failures;  // not the actor's doing: listed, left out of the rates
      continue;
    }
    ended.add(s.verdict.reward);
  }
  nlohmann::json line{{"after", after},
                      {"step", step},
                      {"episodes", ended.episodes},
                      {"infrastructure_failures", failures},
                      {"reward_mean", ended.rate(ended.reward_sum)},
                      {"pass_rate", ended.rate(ended.passed)},
                      {"faster_than_eager", ended.rate(ended.beat_eager)},
                      {"faster_than_compile", ended.rate(ended.beat_compile)},
                      {"tasks", tasks},
                      {"log", (dir / "log").string()}};
  std::cerr << fmt::format("train: eval after {}: {} of {} pass, reward mean {:.2f}\n", after, ended.passed,
                           ended.episodes, ended.rate(ended.reward_sum));
  return line;
}

// eval.jsonl's lines up to `step` (a resumed run evaluates again what came after it).
std::vector<nlohmann::json> read_evals(const std::filesystem::path& path, int64_t up_to_step) {
  std::vector<nlohmann::json> kept;
  std::ifstream in{path};
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) break;  // a line torn by a kill: it and anything after it are redone
    if (j.value("step", int64_t{-1}) <= up_to_step) kept.push_back(std::move(j));
  }
  in.close();
  std::ofstream rewrite{path, std::ios::trunc};
  for (const auto& j : kept) rewrite << j.dump() << "\n";
  return kept;
}

struct stage_plan {
  std::string name;  // "rft", "value_pretrain", "ppo"
  int64_t steps = 0;
  std::vector<learner::episode_sample> pool;
};

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

nlohmann::json metrics_of(const learner::step_report& r, int64_t step, int64_t stage_step, double seconds,
                          const learner::rank_group& ranks) {
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
  if (ranks.world() > 1) {
    j["ranks"] = ranks.world();
    j["rank_restarts"] = ranks.restarts();  // so far in this process
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
  learner::rank_group* trainer = nullptr;
  model::transformer* actor = nullptr;
  int64_t* step = nullptr;
  int64_t stage_start = 0;
  int64_t stage_end = 0;
  std::function<void(const nlohmann::json&)> write_metrics;
  std::function<std::string()> checkpoint;  // after a step; "" when none was due
};

// The progress of a stage on stderr, one status per stage: `train rft: step 12/200 | 2.1/s |
// 1m30s left | sft_loss 0.3612`, redrawn in place on a terminal (a plain line at most every 10 s
// otherwise), its last state kept as a line when the stage ends. metrics.jsonl is the record.
class stage_progress {
 public:
  // A stage of steps (stage_start, stage_end], resumed after `done_step`.
  void begin(const std::string& stage, int64_t stage_start, int64_t stage_end, int64_t done_step, bool in_place) {
    display_.emplace(std::cerr, in_place && ::isatty(2) != 0, std::chrono::seconds{10});
    stage_ = stage;
    start_ = stage_start;
    end_ = stage_end;
    meter_.emplace(done_step - stage_start);
  }

  void step(const nlohmann::json& metrics) {
    if (!display_) return;
    const int64_t done = metrics.at("step").get<int64_t>() - start_;
    std::string text =
        fmt::format("train {}: step {}/{} | {}", stage_, done, end_ - start_, meter_->pace(done, end_ - start_ - done));
    for (const char* key : {"sft_loss", "value_loss", "policy_loss", "reward_mean", "pass_rate"})
      if (metrics.contains(key) && metrics.at(key).is_number())
        text += fmt::format(" | {} {:.4g}", key, metrics.at(key).get<double>());
    if (metrics.contains("skipped")) text += " | skipped: " + metrics.at("skipped").get<std::string>();
    display_->status(text);
  }

  void end() {
    if (display_) display_->finish();
    display_.reset();
  }

 private:
  std::optional<status_display> display_;
  std::optional<progress_meter> meter_;
  std::string stage_;
  int64_t start_ = 0, end_ = 0;
};

// PPO on live rollouts (the file comment). Returns once every batch is trained.
void run_live_ppo(const settings& learner_config, const train_rollouts& r, const live_stage& stage) {
  const settings config = torch_policy_settings(learner_config);
  const int64_t batch = config.get_int("learner.batch_episodes");
  const int64_t batches = stage.stage_end - *stage.step;
  auto plan = plan_of(config, r, fmt::format("train{:06d}", *stage.step), r.tasks, batches * batch,
                      r.live_log.parent_path() / "episodes" / fmt::format("train{:06d}", *stage.step));
  plan.batch_episodes = static_cast<int32_t>(batch);
  plan.staleness = static_cast<int32_t>(config.get_int("learner.staleness"));

  auto train = [&stage](policy::torch_backend& policy, std::vector<trajectory> trajectories) {
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
      report = stage.trainer->step("ppo", samples);
    } catch (const learner::learner_error& e) {
      skipped = e.what();  // the batch counts; the weights stay as they were
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const int64_t step = ++*stage.step;
    auto line = metrics_of(report, step, step - stage.stage_start, seconds, *stage.trainer);
    const auto [oldest, newest] = version_range(samples);
    line["live"] = true;
    line["rollout_episodes"] = trajectories.size();
    line["sampled_versions"] = {oldest, newest};
    line["version_lag"] = oldest < 0 ? 0 : sampled_at - oldest;
    // The batch's outcomes by the milestones (reward >= 1 passes, 2 beats eager, 3 compile),
    // over the episodes the agent ended (the learner actor leaves infrastructure failures out).
    milestone_counts outcomes;
    for (const auto& t : trajectories) outcomes.add(t.reward);
    line["pass_rate"] = outcomes.rate(outcomes.passed);
    line["faster_than_eager"] = outcomes.rate(outcomes.beat_eager);
    line["faster_than_compile"] = outcomes.rate(outcomes.beat_compile);
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
    policy.update_weights(stage.actor->named_parameters(), step);
    return update;
  };
  // The policy samples with the learner's weights from the first episode on (after RFT, value
  // pretraining or a resumed checkpoint they differ from policy.model_dir's).
  auto start_learner = [&](caf::actor_system& system, const node_services& node) {
    auto& policy = torch_backend_of(node);
    policy.update_weights(stage.actor->named_parameters(), *stage.step);
    return learner::spawn_learner_actor(
        system, static_cast<int32_t>(batch),
        [train, &policy](std::vector<trajectory> trajectories) { return train(policy, std::move(trajectories)); },
        node.recorder);
  };
  std::cerr << fmt::format("train: live PPO, {} steps of {} episodes over {} tasks of {} on {}, {} at a "
                           "time, staleness {}; log {}\n",
                           batches, batch, plan.tasks.size(), r.set_name, r.device, plan.concurrency, plan.staleness,
                           r.live_log.string());
  try {
    run_pipeline(config, plan, r.device, r.live_log, start_learner);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error{std::string{"train --live: "} + e.what()};
  }
}

// The data-parallel ranks of learner.ranks / learner.collective (auto: NCCL for more than one
// rank on CUDA where it was built, else tcp).
learner::rank_group_options rank_options(const settings& config, const std::filesystem::path& model_dir,
                                         bool critic, const learner::learner_options& options,
                                         const torch::Device& device) {
  learner::rank_group_options out;
  out.world = static_cast<int>(config.get_int("learner.ranks"));
  out.collective = config.get_string("learner.collective");
  if (out.collective == "auto")
    out.collective = device.is_cuda() && out.world > 1 && learner::nccl_available() ? "nccl" : "tcp";
  out.timeout = std::chrono::seconds{config.get_int("learner.rank_timeout_s")};
  out.retries = static_cast<int>(config.get_int("learner.rank_retries"));
  out.binary = std::filesystem::read_symlink("/proc/self/exe");
  out.model_dir = std::filesystem::absolute(model_dir);
  out.critic = critic;
  out.learner = options;
  return out;
}

int run_train(const settings& config, const train_flags& flags) {
  const auto& out = flags.out;
  const std::filesystem::path model_dir = config.get_string("learner.model_dir");
  if (model_dir.empty())
    throw usage_error{"set learner.model_dir to the checkpoint to train (config.json, *.safetensors, tokenizer.json)"};
  const bool live = config.get_bool("learner.live");
  const bool demos = config.get_bool("learner.record_demos");
  const bool evaluating = config.get_bool("learner.evaluate");
  std::vector<std::filesystem::path> logs;
  for (const auto& item : split_list(config.get_string("learner.logs"))) logs.emplace_back(item);
  if (logs.empty() && !live && !demos)
    throw usage_error{"set learner.logs to the message logs of rollouts to train on (comma-separated), "
                      "learner.record_demos = true, or train on live rollouts with --live"};
  const auto ckpt_root = out / "checkpoints";
  for (const char* earlier : {"metrics.jsonl", "eval.jsonl", "demo_log"})
    if (!flags.resume && std::filesystem::exists(out / earlier))
      throw usage_error{out.string() + " holds a training run already; pass --resume to continue it or choose another --out"};
  if (is_empty_dir_or_missing(model_dir) && config.get_string("learner.init_model") == "none")
    throw usage_error{"learner.model_dir " + model_dir.string() + " holds no checkpoint; point it at one, or set "
                      "learner.init_model = \"tiny\" to create a tiny random model there"};
  train_rollouts rollouts;
  if (live || demos || evaluating) {
    rollouts.device = resolve_device(flags.device);
    rollouts.set_name = config.get_string("learner.corpus");
    if (rollouts.set_name.empty()) rollouts.set_name = rollouts.device == "cuda" ? "bench" : "smoke";
    rollouts.tasks = load_tasks(config, rollouts.set_name, split_list(config.get_string("learner.tasks")));
    require_device(rollouts.device);
    check_tasks(config, rollouts.tasks);
    rollouts.concurrency = flags.concurrency > 0 ? flags.concurrency
                                                 : static_cast<int32_t>(config.get_int("rollout.concurrency"));
    rollouts.live_log = flags.log_dir.empty() ? out / "rollout_log" : flags.log_dir;
  }
  std::filesystem::create_directories(out);
  if (is_empty_dir_or_missing(model_dir)) create_tiny_model(config, model_dir);
  // A CPU rollout keeps this process off the harness's timing core; offline steps after it use
  // every core again. (Live PPO trains beside its rollout, off that core.)
  const cpu_affinity all_cores;
  if (demos) {
    logs.push_back(record_demos(config, rollouts, out));
    all_cores.restore();
  }

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
  const auto critic = need_critic ? model::transformer::load(model_dir, device, torch::kFloat32) : nullptr;
  learner::learner_options options;
  options.actor_lr = config.get_real("learner.actor_lr");
  options.critic_lr = config.get_real("learner.critic_lr");
  options.max_grad_norm = config.get_real("learner.max_grad_norm");
  options.token_budget = config.get_int("learner.token_budget");
  options.lambda = config.get_real("learner.gae_lambda");
  options.ppo.is_cap = config.get_real("learner.is_cap");
  options.truncated = config.get_string("learner.truncated");
  options.ppo_epochs = config.get_int("learner.ppo_epochs");
  options.logit_chunk_tokens = config.get_int("learner.logit_chunk_tokens");
  options.activation_checkpointing = config.get_bool("learner.activation_checkpointing");
  options.compute_dtype = config.get_string("learner.compute_dtype");
  options.bf16_working_weights = config.get_bool("learner.bf16_working_weights");
  options.attention = config.get_string("learner.attention");
  options.fused_optimizer = config.get_bool("learner.fused_optimizer");
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
  if (flags.resume) {
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
  // The evaluations done (up to the resumed step) and the one due at a stage's end.
  std::set<std::string> evaluated;
  for (const auto& j : read_evals(out / "eval.jsonl", step)) evaluated.insert(j.value("after", ""));
  std::ofstream evals{out / "eval.jsonl", std::ios::app};
  auto evaluate_after = [&](const std::string& after) {
    if (!evaluating || evaluated.count(after)) return;
    evals << evaluate(config, rollouts, out, after, step, *actor).dump() << "\n" << std::flush;
    all_cores.restore();
    evaluated.insert(after);
  };
  evaluate_after("start");
  // The data-parallel ranks start from the (resumed) state; one tcp rank is the learner itself.
  learner::rank_group group{rank_options(config, model_dir, need_critic, options, device), trainer};

  const int64_t every = config.get_int("learner.checkpoint_every");
  const int keep = static_cast<int>(config.get_int("learner.keep_checkpoints"));
  const int64_t batch = config.get_int("learner.batch_episodes");
  std::ofstream metrics{out / "metrics.jsonl", std::ios::app};
  stage_progress progress;
  auto write_metrics = [&metrics, &progress](const nlohmann::json& line) {
    metrics << line.dump() << "\n" << std::flush;
    progress.step(line);
  };
  // After step `step` of a stage ending at `stage_end`: a checkpoint where one is due.
  auto checkpoint = [&](const std::string& stage, int64_t stage_end) -> std::string {
    if (step % every != 0 && step != stage_end) return {};
    contents.state = {{"step", step}, {"stage", stage}, {"weight_version", step}};
    learner::write_checkpoint(ckpt_root, step, contents, keep);
    const auto latest = learner::latest_checkpoint(ckpt_root);
    return latest ? latest->string() : std::string{};
  };
  // RFT's own learning rate (learner.rft_lr; 0: the actor's), set on the actor's optimiser per stage.
  const double rft_lr = config.get_real("learner.rft_lr") > 0 ? config.get_real("learner.rft_lr") : options.actor_lr;
  auto set_actor_lr = [&trainer](double lr) {
    for (auto& group : trainer.actor_optimizer().param_groups())
      static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
  };
  int64_t stage_start = 0;
  for (const auto& stage : stages) {
    const int64_t stage_end = stage_start + stage.steps;
    set_actor_lr(stage.name == "rft" ? rft_lr : options.actor_lr);
    // Live PPO's rollout draws its own status: the stage's progress then comes as plain lines.
    if (step < stage_end) progress.begin(stage.name, stage_start, stage_end, step, !(stage.name == "ppo" && live));
    if (stage.name == "ppo" && live) {
      if (step < stage_end)
        run_live_ppo(config, rollouts, {&group, actor.get(), &step, stage_start, stage_end, write_metrics,
                                        [&, stage_end] { return checkpoint("ppo", stage_end); }});
    } else {
      for (int64_t global = std::max(step, stage_start); global < stage_end; ++global) {
        const auto samples = draw(stage.pool, batch, rng);
        const auto t0 = std::chrono::steady_clock::now();
        const auto report = group.step(stage.name, samples);
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        write_metrics(metrics_of(report, global + 1, global + 1 - stage_start, seconds, group));
        step = global + 1;
        checkpoint(stage.name, stage_end);
      }
    }
    progress.end();
    // Value pretraining leaves the actor as it was: nothing new to evaluate.
    if (stage.steps > 0 && stage.name != "value_pretrain") evaluate_after(stage.name);
    stage_start = stage_end;
  }
  learner::export_hugging_face(*actor, model_dir, out / "final");
  std::cerr << "train: " << step << " steps; the actor is in " << (out / "final").string() << "\n";
  return 0;
}

}  // namespace

std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in{list};
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> parse_positive_list(const std::string& option, const std::string& text) {
  std::vector<int64_t> values;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || value < 1)
      throw usage_error{option + ": '" + item + "' in '" + text +
                        "' is not a positive integer (give a comma list such as 1,8,32)"};
    values.push_back(value);
    start = comma + 1;
  }
  return values;
}

void add_learner_rank_command(CLI::App& app, invocation& inv) {
  struct flags_t {
    std::string join;
    int rank = 0;
    int world = 0;
  };
  auto flags = std::make_shared<flags_t>();
  auto* cmd = app.add_subcommand("learner-rank", "One data-parallel learner rank; train starts these (learner.ranks)");
  cmd->group("");  // started by train, not by people
  cmd->add_option("--join", flags->join, "Rank 0's HOST:PORT")->required();
  cmd->add_option("--rank", flags->rank, "This rank")->required()->check(CLI::Range(1, 63));
  cmd->add_option("--world", flags->world, "Ranks in all")->required()->check(CLI::Range(2, 64));
  cmd->callback([&inv, flags] {
    inv.action = [flags] {
      const auto colon = flags->join.rfind(':');
      if (colon == std::string::npos) throw usage_error{"--join wants HOST:PORT, got '" + flags->join + "'"};
      return learner::serve_rank(flags->join.substr(0, colon), std::stoi(flags->join.substr(colon + 1)), flags->rank,
                                 flags->world);
    };
  });
}

// The learner's supervisor (learner.restarts). train's work runs in a child process, forked
// before anything of LibTorch, CUDA or CAF starts; a child that dies by a signal (a SIGKILL, a
// crash, the out-of-memory killer) is started again as --resume, from the newest checkpoint,
// whose steps after it are those of an uninterrupted run. A child that exits with a status
// (done, or an error that a restart would only repeat) ends train with that status.
int supervise_train(const settings& config, train_flags flags) {
  const int64_t restarts = config.get_int("learner.restarts");
  supervised_children children;
  for (int64_t restart = 0;; ++restart) {
    const pid_t pid = children.start();
    if (pid == 0) return run_train(config, flags);  // the child: through main's error handling
    const int status = children.wait()->status;
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    const std::string how = fmt::format("the learner process {} {}", pid, supervised_children::describe(status));
    if (children.stop_requested()) {
      std::cerr << "train: stopped; `train --resume --out " << flags.out.string() << "` continues from the newest checkpoint\n";
      return 128 + WTERMSIG(status);
    }
    if (restart >= restarts)
      throw std::runtime_error{fmt::format("{}, and learner.restarts = {} restarts are used up; `train --resume --out {}` "
                                           "continues from the newest checkpoint",
                                           how, restarts, flags.out.string())};
    std::cerr << fmt::format("train: {}; restarting it from the newest checkpoint (restart {} of {})\n", how,
                             restart + 1, restarts);
    flags.resume = true;
  }
}

void add_train_command(CLI::App& app, invocation& inv) {
  auto flags = std::make_shared<train_flags>();
  auto* cmd = app.add_subcommand("train", "Train the policy: RFT, value pretraining, PPO (settings learner.*)");
  cmd->add_option("--out", flags->out, "Directory for metrics.jsonl, checkpoints/, final/ (and eval.jsonl, demo_log/)")
      ->required();
  cmd->add_flag("--resume", flags->resume, "Continue from the newest complete checkpoint in --out");
  cmd->add_flag("--live", flags->live, "PPO on live rollouts of the torch policy (learner.live = true)");
  cmd->add_option("--corpus", flags->corpus, "The task set of train's rollouts (learner.corpus; default bench on "
                                             "cuda, smoke on cpu)");
  cmd->add_option("--tasks", flags->task_globs, "Only tasks whose ids match these globs (learner.tasks)")
      ->delimiter(',');
  cmd->add_option("--device", flags->device, "Where the rollouts' candidates run")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--concurrency", flags->concurrency, "Episodes at a time (default rollout.concurrency)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--log", flags->log_dir, "The live PPO rollout's message log (default DIR/rollout_log)");
  cmd->callback([&inv, flags] {
    inv.action = [&inv, flags] {
      if (flags->live) inv.config.apply_override("learner.live=true");
      if (!flags->corpus.empty()) inv.config.apply_override("learner.corpus=" + flags->corpus);
      if (!flags->task_globs.empty()) {
        std::string globs;
        for (const auto& g : flags->task_globs) globs += (globs.empty() ? "" : ",") + g;
        inv.config.apply_override("learner.tasks=" + globs);
      }
      try {
        if (inv.config.get_int("learner.restarts") > 0) return supervise_train(inv.config, *flags);
        return run_train(inv.config, *flags);
      } catch (const learner::learner_error& e) {
        throw usage_error{e.what()};
      }
    };
  });
}

}  // namespace cuda_agent::cli
