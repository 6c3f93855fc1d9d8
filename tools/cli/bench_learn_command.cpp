// `cuda-agent bench learn`: the learner's step time, tokens/s and model FLOP utilisation for a
// model of a named shape (random weights) at given episode lengths, on the train path itself
// (learner::rft_step and ppo_step, fp32 weights and AdamW as `train` runs them).
//
// Each cell is E episodes of T random tokens (the first tenth a prompt, loss mask 0; the rest
// policy tokens), in one micro-batch (token budget E * T). One warm-up step, then --repeats timed
// steps, the device synchronised around each. FLOPs per forward of T tokens: 2 * (matrix
// parameters) * T + 2 * layers * T^2 * (heads * head_dim) (causal attention's two products);
// a backward is twice a forward. RFT = 3 forwards of the actor; PPO = a forward and backward of
// each model = 3 (F_actor + F_critic), the critic without the lm_head (its first epoch's forwards
// give the old log-probabilities and values themselves). MFU is against --peak-tflops (on cuda by default the H200's
// 67 TFLOP/s of fp32 without tensor cores: the learner computes in fp32 and LibTorch leaves TF32
// off). A cell that runs out of memory says so and the others go on. Each row also carries the
// warm-up step's losses and gradient norm: the same weights and episodes in every run, so two runs
// that differ only in a kernel (--attention) or a dtype can be compared number for number.
// --profile-top N runs one more step per cell under LibTorch's profiler and lists where it went.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <set>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "actors/learner/learner.hpp"
#include "actors/model/transformer.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/random_checkpoint.hpp"

namespace cuda_agent::cli {
namespace {

struct bench_learn_options {
  std::string device = "cuda";
  std::string shape;
  std::string tokens;
  int episodes = 1;
  int repeats = 3;
  std::string stages = "rft,ppo";
  double peak_tflops = 0;
  int64_t logit_chunk = learner::learner_options{}.logit_chunk_tokens;
  bool recompute_layers = learner::learner_options{}.activation_checkpointing;
  std::string compute_dtype = learner::learner_options{}.compute_dtype;
  bool bf16_working_weights = learner::learner_options{}.bf16_working_weights;
  std::string attention = learner::learner_options{}.attention;
  bool fused_optimizer = learner::learner_options{}.fused_optimizer;
  int profile_top = 0;  // > 0: one more step under the profiler, its N costliest names
  bool json = false;
};

// One step under LibTorch's Kineto profiler: on CUDA the kernels' own GPU time by name (kernels
// of one stream do not overlap, so the names' times add up to the GPU's busy time, and the rest
// of the step's wall time is the GPU waiting for the host); on CPU the aten operators' wall time
// by name, inclusive of the operators they call, so those times overlap and do not add up.
nlohmann::json profiled_step(const std::function<void()>& step, const std::function<void()>& sync, bool cuda,
                             int top) {
  namespace prof = torch::autograd::profiler;
  using activity = torch::profiler::impl::ActivityType;
  const prof::ProfilerConfig config{prof::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                    /*profile_memory=*/false};
  const std::set<activity> activities = cuda ? std::set<activity>{activity::CPU, activity::CUDA}
                                             : std::set<activity>{activity::CPU};
  prof::prepareProfiler(config, activities);
  sync();
  prof::enableProfiler(config, activities);
  const auto t0 = std::chrono::steady_clock::now();
  step();
  sync();
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto result = prof::disableProfiler();
  struct total {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::map<std::string, total> by_name;
  std::vector<std::pair<uint64_t, uint64_t>> busy;  // device intervals, for the busy time
  for (const auto& e : result->events()) {
    const bool on_device = e.deviceType() == c10::DeviceType::CUDA;
    if (cuda ? !on_device : e.name().rfind("aten::", 0) != 0) continue;
    total& t = by_name[e.name().substr(0, 120)];
    t.seconds += static_cast<double>(e.durationNs()) * 1e-9;
    ++t.calls;
    if (on_device) busy.emplace_back(e.startNs(), e.endNs());
  }
  std::sort(busy.begin(), busy.end());
  double busy_s = 0;
  uint64_t reach = 0;
  for (const auto& [start, end] : busy) {  // the union of the intervals
    const uint64_t from = std::max(start, reach);
    if (end > from) busy_s += static_cast<double>(end - from) * 1e-9;
    reach = std::max(reach, end);
  }
  std::vector<std::pair<std::string, total>> ranked(by_name.begin(), by_name.end());
  std::sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  nlohmann::json out{{"wall_s", wall_s}, {"what", cuda ? "CUDA kernels, GPU time" : "aten operators, inclusive wall time"}};
  if (cuda) out["device_busy_s"] = busy_s;
  out["top"] = nlohmann::json::array();
  for (size_t i = 0; i < ranked.size() && int(i) < top; ++i)
    out["top"].push_back({{"name", ranked[i].first}, {"seconds", ranked[i].second.seconds}, {"calls", ranked[i].second.calls}});
  return out;
}

std::vector<learner::episode_sample> random_episodes(int count, int64_t length, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<learner::episode_sample> out;
  for (int e = 0; e < count; ++e) {
    learner::episode_sample s;
    s.episode_id = "bench-" + std::to_string(e);
    s.task_id = "bench";
    const int64_t prompt = std::max<int64_t>(1, length / 10);
    for (int64_t t = 0; t < length; ++t) {
      s.tokens.push_back(token(rng));
      s.loss_mask.push_back(t >= prompt ? 1 : 0);
      s.rollout_logprobs.push_back(t >= prompt ? -static_cast<float>(std::log(static_cast<double>(vocab))) : 0.0f);
    }
    s.turn_versions = {0};
    s.reward = e % 2 == 0 ? 1 : -1;
    s.turns = 1;
    out.push_back(std::move(s));
  }
  return out;
}

double forward_flops(const model::model_config& c, int64_t tokens, bool with_lm_head) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t q = c.num_attention_heads * D, kv = c.num_key_value_heads * D;
  const double per_layer = static_cast<double>(H * q + 2 * H * kv + q * H + 3 * H * I);
  double matrices = per_layer * static_cast<double>(c.num_hidden_layers);
  if (with_lm_head) matrices += static_cast<double>(c.vocab_size * H);
  const double t = static_cast<double>(tokens);
  return 2.0 * matrices * t + 2.0 * static_cast<double>(c.num_hidden_layers) * t * t * static_cast<double>(q);
}

// {median, min, max} of timed steps (the upper median for an even count); sorts xs.
nlohmann::json spread_of(std::vector<double>& xs) {
  std::sort(xs.begin(), xs.end());
  return {{"median", xs[xs.size() / 2]}, {"min", xs.front()}, {"max", xs.back()}};
}

int run_bench_learn(bench_learn_options opt) {
  const bool cuda = opt.device == "cuda";
  if (cuda && !torch::cuda::is_available())
    throw usage_error{"--device cuda: LibTorch sees no CUDA device here (use --device cpu)"};
  if (opt.shape.empty()) opt.shape = cuda ? "qwen2-0.5b" : "tiny";
  if (opt.tokens.empty()) opt.tokens = cuda ? "2048,8192,32768" : "256,1024";
  if (opt.episodes < 1 || opt.repeats < 1) throw usage_error{"--episodes and --repeats must be at least 1"};
  if (opt.logit_chunk < 0) throw usage_error{"--logit-chunk must be 0 (all positions at once) or positive"};
  const std::vector<int64_t> lengths = parse_positive_list("--tokens", opt.tokens);
  for (const auto t : lengths)
    if (t < 2) throw usage_error{"--tokens: an episode needs at least 2 tokens"};
  const auto stages = split_list(opt.stages);
  for (const auto& s : stages)
    if (s != "rft" && s != "ppo") throw usage_error{"--stages: '" + s + "' is not rft or ppo"};
  const bool bf16 = opt.compute_dtype == "bfloat16";
  if (opt.bf16_working_weights && !bf16)
    throw usage_error{"--bf16-working-weights true needs --compute-dtype bfloat16"};
  // The H200's dense peaks: fp32 without tensor cores, bf16 on them.
  const double peak = opt.peak_tflops > 0 ? opt.peak_tflops : (cuda ? (bf16 ? 989.0 : 67.0) : 0.0);

  auto config = named_shape(opt.shape);
  config.torch_dtype = "float32";
  for (const auto t : lengths)
    if (t > config.max_position_embeddings)
      throw usage_error{"--tokens: " + std::to_string(t) + " exceeds the shape's max_position_embeddings"};
  temp_dir temp{std::filesystem::temp_directory_path() / ("cuda-agent-bench-learn-" + std::to_string(::getpid()))};
  const torch::Device device = cuda ? torch::Device{torch::kCUDA, 0} : torch::Device{torch::kCPU};
  write_random_checkpoint(temp.path, config, torch::kFloat32, device);
  auto sync = [&] {
    if (cuda) torch::cuda::synchronize(0);
  };

  nlohmann::json rows = nlohmann::json::array();
  if (!opt.json)
    std::printf(
        "bench learn: %s (random fp32 weights), %s, %d episode(s) per step, %d timed steps per cell, "
        "logits %lld positions at a time, activation checkpointing %s, compute %s%s, attention %s, fused optimizer %s\n",
        opt.shape.c_str(), device.str().c_str(), opt.episodes, opt.repeats, static_cast<long long>(opt.logit_chunk),
        opt.recompute_layers ? "on" : "off", opt.compute_dtype.c_str(),
        opt.bf16_working_weights ? " (bfloat16 working weights)" : "", opt.attention.c_str(),
        opt.fused_optimizer ? "on" : "off");
  if (!opt.json)
    std::printf("%-5s %8s %14s %12s %10s %7s %9s  %s\n", "stage", "tokens", "step s (min-max)", "tokens/s", "TFLOP/s",
                "MFU", "optim s", "first step: loss, actor grad norm");
  for (const auto& stage : stages)
    for (const auto length : lengths) {
      nlohmann::json row{{"stage", stage}, {"tokens_per_episode", length}, {"episodes", opt.episodes}};
      try {
        auto actor = model::transformer::load(temp.path, device, torch::kFloat32);
        auto critic = stage == "ppo" ? model::transformer::load(temp.path, device, torch::kFloat32) : nullptr;
        learner::learner_options options;
        options.token_budget = length * opt.episodes;
        options.logit_chunk_tokens = opt.logit_chunk;
        options.activation_checkpointing = opt.recompute_layers;
        options.compute_dtype = opt.compute_dtype;
        options.bf16_working_weights = opt.bf16_working_weights;
        options.attention = opt.attention;
        options.fused_optimizer = opt.fused_optimizer;
        learner::learner l{actor, critic, options};
        const auto samples = random_episodes(opt.episodes, length, config.vocab_size, 7);
        std::vector<double> seconds;
        auto run_step = [&] { return stage == "rft" ? l.rft_step(samples) : l.ppo_step(samples); };
        learner::step_report first;  // the warm-up step's: same weights and episodes in every run
        for (int i = 0; i <= opt.repeats; ++i) {
          sync();
          const auto t0 = std::chrono::steady_clock::now();
          const auto report = run_step();
          sync();
          if (i == 0) first = report;
          if (i > 0) seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        // The optimiser steps alone (AdamW of the actor, and of the critic in PPO), on the last
        // step's gradients: the part of a step that does not grow with the tokens.
        std::vector<double> optimizer_seconds;
        for (int i = 0; i < opt.repeats; ++i) {
          sync();
          const auto t0 = std::chrono::steady_clock::now();
          l.actor_optimizer().step();
          if (stage == "ppo") l.critic_optimizer()->step();
          sync();
          optimizer_seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
        row["optimizer_step_s"] = spread_of(optimizer_seconds);
        // The first step's losses, to compare runs that differ in a kernel or a dtype only.
        const double loss = stage == "rft" ? first.sft_loss : first.stats.policy_loss();
        if (opt.profile_top > 0) {
          row["profile"] = profiled_step([&] { run_step(); }, sync,
                                         cuda, opt.profile_top);
        }
        row["first_step"] = {{"loss", loss},
                             {"actor_grad_norm", first.actor_grad_norm},
                             {"critic_grad_norm", first.critic_grad_norm}};
        if (stage == "ppo") {
          row["first_step"]["value_loss"] =
              first.stats.value_tokens > 0 ? first.stats.value_loss_sum / double(first.stats.value_tokens) : 0.0;
          row["first_step"]["entropy"] = first.stats.entropy();
        }
        row["step_s"] = spread_of(seconds);
        const double median = row["step_s"]["median"];
        const double tokens = static_cast<double>(length * opt.episodes);
        const double flops = static_cast<double>(opt.episodes) *
                             (stage == "rft" ? 3.0 * forward_flops(config, length, true)
                                             : 3.0 * (forward_flops(config, length, true) +
                                                      forward_flops(config, length, false)));
        const double tflops = flops / median / 1e12;
        row["tokens_per_s"] = tokens / median;
        row["tflops"] = tflops;
        if (peak > 0) row["mfu"] = tflops / peak;
        if (!opt.json) {
          char mfu[32] = "-";
          if (peak > 0) std::snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * tflops / peak);
          std::printf("%-5s %8lld %6.3f (%.3f-%.3f) %12.0f %10.2f %7s %9.4f  %.6g, %.6g\n", stage.c_str(),
                      static_cast<long long>(length), median, seconds.front(), seconds.back(), tokens / median,
                      tflops, mfu, row["optimizer_step_s"]["median"].get<double>(), loss,
                      first.actor_grad_norm);
          if (row.contains("profile")) {
            const auto& p = row["profile"];
            std::printf("      profiled step: %.3f s wall", p["wall_s"].get<double>());
            if (p.contains("device_busy_s")) std::printf(", GPU busy %.3f s", p["device_busy_s"].get<double>());
            std::printf("; %s:\n", p["what"].get<std::string>().c_str());
            for (const auto& t : p["top"])
              std::printf("        %8.2f ms %6lld x  %s\n", 1e3 * t["seconds"].get<double>(),
                          static_cast<long long>(t["calls"].get<int64_t>()), t["name"].get<std::string>().c_str());
          }
        }
      } catch (const c10::OutOfMemoryError& e) {
        row["error"] = "out of memory";
        if (!opt.json)
          std::printf("%-5s %8lld out of memory\n", stage.c_str(), static_cast<long long>(length));
      }
      rows.push_back(row);
    }
  if (opt.json)
    std::cout << nlohmann::json{{"shape", opt.shape}, {"device", device.str()}, {"peak_tflops", peak}, {"logit_chunk_tokens", opt.logit_chunk},
                                 {"activation_checkpointing", opt.recompute_layers},
                                 {"compute_dtype", opt.compute_dtype},
                                 {"bf16_working_weights", opt.bf16_working_weights}, {"attention", opt.attention},
                                 {"fused_optimizer", opt.fused_optimizer}, {"rows", rows}}
                     .dump()
              << "\n";
  else if (peak > 0)
    std::printf("MFU against %.0f TFLOP/s%s\n", peak,
                opt.peak_tflops > 0 ? "" : bf16 ? " (H200 bf16 dense, tensor cores)" : " (H200 fp32 without tensor cores)");
  return 0;
}

}  // namespace

void add_bench_learn_command(CLI::App& bench, invocation& inv) {
  auto opt = std::make_shared<bench_learn_options>();
  CLI::App* cmd = bench.add_subcommand(
      "learn", "Step time, tokens/s and MFU of the learner's RFT and PPO steps for a model shape");
  cmd->add_option("--device", opt->device, "Where the learner runs")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--shape", opt->shape,
                  "A random model of this shape: qwen2-0.5b, qwen2.5-7b, tiny (default: qwen2-0.5b on cuda, tiny on cpu)");
  cmd->add_option("--tokens", opt->tokens,
                  "Tokens per episode, a comma list (default: 2048,8192,32768 on cuda, 256,1024 on cpu)");
  cmd->add_option("--episodes", opt->episodes, "Episodes per step, one micro-batch");
  cmd->add_option("--repeats", opt->repeats, "Timed steps per cell (after one warm-up step)");
  cmd->add_option("--stages", opt->stages, "rft, ppo or both, a comma list");
  cmd->add_option("--peak-tflops", opt->peak_tflops,
                  "Peak for the MFU column (default on cuda: 67 in float32, 989 in bfloat16; none on cpu)");
  cmd->add_option("--logit-chunk", opt->logit_chunk,
                  "Positions whose logits exist at once (learner.logit_chunk_tokens; 0: all)");
  cmd->add_option("--activation-checkpointing", opt->recompute_layers,
                  "Recompute each layer in the backward (learner.activation_checkpointing): true or false");
  cmd->add_option("--compute-dtype", opt->compute_dtype, "learner.compute_dtype: float32 or bfloat16 (autocast)")
      ->check(CLI::IsMember({"float32", "bfloat16"}));
  cmd->add_option("--bf16-working-weights", opt->bf16_working_weights,
                  "With --compute-dtype bfloat16: compute on bfloat16 copies of the models refreshed once a step "
                  "(learner.bf16_working_weights): true or false");
  cmd->add_option("--attention", opt->attention, "learner.attention: default (flash first) or cudnn")
      ->check(CLI::IsMember({"default", "cudnn"}));
  cmd->add_option("--fused-optimizer", opt->fused_optimizer,
                  "AdamW and clipping in multi-tensor kernels (learner.fused_optimizer): true or false");
  cmd->add_option("--profile-top", opt->profile_top,
                  "Run one more step per cell under the profiler and list its N costliest names (CUDA kernels' GPU "
                  "time on cuda, aten operators' inclusive time on cpu)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of the table");
  cmd->callback([opt, &inv] { inv.action = [opt] { return run_bench_learn(*opt); }; });
}

}  // namespace cuda_agent::cli
