#include "actors/learner/rank_group.hpp"

#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

extern char** environ;

namespace cuda_agent::learner {
namespace {

using nlohmann::json;
constexpr const char* secret_variable = "CUDA_AGENT_LEARNER_SECRET";

std::string random_secret() {
  std::random_device device;
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (int i = 0; i < 32; ++i) {
    const auto word = device();
    out += hex[word & 15];
    out += hex[(word >> 4) & 15];
  }
  return out;
}

json options_json(const learner_options& o) {
  return {{"clip_low", o.ppo.clip_low},       {"clip_high", o.ppo.clip_high},   {"value_clip", o.ppo.value_clip},
          {"is_cap", o.ppo.is_cap},           {"kl_coef", o.ppo.kl_coef},       {"entropy_coef", o.ppo.entropy_coef},
          {"gamma", o.gamma},                 {"lambda", o.lambda},             {"actor_lr", o.actor_lr},
          {"critic_lr", o.critic_lr},         {"weight_decay", o.weight_decay}, {"max_grad_norm", o.max_grad_norm},
          {"token_budget", o.token_budget},   {"ppo_epochs", o.ppo_epochs},     {"truncated", o.truncated},
          {"logit_chunk_tokens", o.logit_chunk_tokens}, {"activation_checkpointing", o.activation_checkpointing},
          {"compute_dtype", o.compute_dtype}, {"bf16_working_weights", o.bf16_working_weights},
          {"attention", o.attention},         {"fused_optimizer", o.fused_optimizer}};
}

learner_options options_of(const json& j) {
  learner_options o;
  o.ppo.clip_low = j.at("clip_low");
  o.ppo.clip_high = j.at("clip_high");
  o.ppo.value_clip = j.at("value_clip");
  o.ppo.is_cap = j.at("is_cap");
  o.ppo.kl_coef = j.at("kl_coef");
  o.ppo.entropy_coef = j.at("entropy_coef");
  o.gamma = j.at("gamma");
  o.lambda = j.at("lambda");
  o.actor_lr = j.at("actor_lr");
  o.critic_lr = j.at("critic_lr");
  o.weight_decay = j.at("weight_decay");
  o.max_grad_norm = j.at("max_grad_norm");
  o.token_budget = j.at("token_budget");
  o.ppo_epochs = j.at("ppo_epochs");
  o.logit_chunk_tokens = j.at("logit_chunk_tokens");
  o.activation_checkpointing = j.at("activation_checkpointing");
  o.compute_dtype = j.at("compute_dtype");
  o.bf16_working_weights = j.at("bf16_working_weights");
  o.attention = j.at("attention");
  o.fused_optimizer = j.at("fused_optimizer");
  o.truncated = j.at("truncated");
  return o;
}

json samples_json(const std::vector<episode_sample>& samples) {
  json out = json::array();
  for (const auto& s : samples)
    out.push_back({{"episode", s.episode_id},
                   {"task", s.task_id},
                   {"tokens", s.tokens},
                   {"mask", s.loss_mask},
                   {"logprobs", s.rollout_logprobs},  // float -> double -> float is exact
                   {"versions", s.turn_versions},
                   {"reward", s.reward},
                   {"reason", static_cast<int>(s.reason)},
                   {"turns", s.turns}});
  return out;
}

std::vector<episode_sample> samples_of(const json& j) {
  std::vector<episode_sample> out;
  for (const auto& s : j) {
    episode_sample e;
    e.episode_id = s.at("episode");
    e.task_id = s.at("task");
    e.tokens = s.at("tokens").get<std::vector<int64_t>>();
    e.loss_mask = s.at("mask").get<std::vector<uint8_t>>();
    e.rollout_logprobs = s.at("logprobs").get<std::vector<float>>();
    e.turn_versions = s.at("versions").get<std::vector<int64_t>>();
    e.reward = s.at("reward");
    e.reason = static_cast<termination>(s.at("reason").get<int>());
    e.turns = s.at("turns");
    out.push_back(std::move(e));
  }
  return out;
}

std::string encode(const json& j) {
  const auto bytes = json::to_msgpack(j);
  return {bytes.begin(), bytes.end()};
}

json decode(const std::string& bytes) { return json::from_msgpack(bytes); }

// Every rank's digest at its index, summed: all ranks see all digests. Throws learner_error on
// a rank whose weights differ from rank 0's.
void require_same_weights(collective& group, const learner& l, const char* when) {
  std::vector<torch::Tensor> digests{torch::zeros({group.world()}, torch::kFloat64)};
  digests[0][group.rank()] = l.weights_digest();
  group.all_reduce(digests, reduce_op::sum);
  for (int r = 1; r < group.world(); ++r)
    if (digests[0][r].item<double>() != digests[0][0].item<double>())
      throw std::runtime_error{"learner rank " + std::to_string(r) + "'s weights differ from rank 0's " + when +
                               "; the ranks are not in step (a bug, or ranks built from different checkpoints)"};
}

std::shared_ptr<collective> group_of(const std::string& kind, std::shared_ptr<tcp_collective> control,
                                     torch::Device device, std::chrono::milliseconds timeout) {
  if (kind == "nccl") return make_nccl_collective(std::move(control), device, timeout);
  if (control->world() == 1) return nullptr;  // one tcp rank: the plain learner
  return control;
}

void set_actor_lr(learner& l, double lr) {
  for (auto& group : l.actor_optimizer().param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

double actor_lr(learner& l) {
  return static_cast<torch::optim::AdamWOptions&>(l.actor_optimizer().param_groups().front().options()).lr();
}

}  // namespace

step_report run_stage(learner& l, const std::string& stage, const std::vector<episode_sample>& samples) {
  if (stage == "rft") return l.rft_step(samples);
  if (stage == "value_pretrain") return l.value_step(samples);
  if (stage == "ppo") return l.ppo_step(samples);
  throw learner_error{"no learner stage '" + stage + "' (rft, value_pretrain, ppo)"};
}

torch::Device rank_device(const torch::Device& rank0, int rank) {
  if (!rank0.is_cuda()) return rank0;
  const int first = rank0.has_index() ? rank0.index() : 0;
  return torch::Device{torch::kCUDA, static_cast<c10::DeviceIndex>(first + rank)};
}

rank_group::rank_group(rank_group_options options, learner& local) : options_{std::move(options)}, local_{local} {
  if (options_.world < 1) throw learner_error{"learner.ranks must be at least 1"};
  if (options_.collective != "tcp" && options_.collective != "nccl")
    throw learner_error{"learner.collective must be tcp or nccl here, got '" + options_.collective + "'"};
  const auto device = local_.actor().device();
  if (options_.collective == "nccl" && !device.is_cuda())
    throw learner_error{"learner.collective = \"nccl\" needs learner.device on CUDA; use tcp for CPU ranks"};
  if (device.is_cuda() && options_.world > 1) {
    const int last = rank_device(device, options_.world - 1).index();
    if (last >= static_cast<int>(torch::cuda::device_count()))
      throw learner_error{"learner.ranks = " + std::to_string(options_.world) + " needs cuda:" + std::to_string(last) +
                          ", but LibTorch sees " + std::to_string(torch::cuda::device_count()) +
                          " GPUs; lower learner.ranks"};
  }
  if (options_.world > 1 && options_.binary.empty()) throw learner_error{"a learner group needs the cuda-agent binary"};
  start();
}

rank_group::~rank_group() {
  try {
    stop(true);
  } catch (...) {
  }
}

void rank_group::start() {
  secret_ = random_secret();
  control_ = tcp_collective::host(options_.world, secret_, options_.timeout);
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string entry{*e};
    const auto eq = entry.find('=');
    if (eq != std::string::npos) env[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  env[secret_variable] = secret_;  // never on a command line
  for (int r = 1; r < options_.world; ++r)
    ranks_.push_back(std::make_unique<background_process>(
        std::vector<std::string>{options_.binary.string(), "learner-rank", "--join",
                                 "127.0.0.1:" + std::to_string(control_->port()), "--rank", std::to_string(r),
                                 "--world", std::to_string(options_.world)},
        env, std::chrono::hours{24 * 365}, std::size_t{1} << 20));
  control_->accept_ranks([this]() -> std::string {
    for (std::size_t i = 0; i < ranks_.size(); ++i) {
      auto state = ranks_[i]->state();
      if (!state.running)
        return "learner rank " + std::to_string(i + 1) + " ended before joining: " + state.describe() + ": " +
               ranks_[i]->take_output().output;
    }
    return {};
  });
  const auto device = local_.actor().device();
  json init{{"model_dir", options_.model_dir.string()}, {"critic", options_.critic},
            {"collective", options_.collective}, {"timeout_ms", options_.timeout.count()},
            {"device", device.str()}, {"options", options_json(options_.learner)}};
  control_->broadcast_bytes(init.dump());
  const auto group = group_of(options_.collective, control_, rank_device(device, 0), options_.timeout);
  local_.set_collective(group);
  if (options_.world > 1) {
    control_->broadcast_bytes(local_.save_state());
    require_same_weights(*group, local_, "at the start");
  }
}

void rank_group::stop(bool graceful) {
  if (graceful && control_ && options_.world > 1) {
    try {
      control_->broadcast_bytes(encode({{"op", "stop"}}));
    } catch (const rank_failure&) {
    }
    for (auto& r : ranks_) r->wait_for(std::chrono::seconds{10});
  }
  for (auto& r : ranks_) {
    r->kill();
    const auto tail = r->take_output().output;
    if (!graceful && !tail.empty()) std::cerr << tail;
  }
  ranks_.clear();
  local_.set_collective(nullptr);
  control_.reset();
}

step_report rank_group::step(const std::string& stage, const std::vector<episode_sample>& samples) {
  // Rank 0's state before the step, where a failure could come after one of its optimiser steps.
  const bool several_updates = stage == "ppo" && options_.learner.ppo_epochs > 1 && options_.world > 1;
  const std::string before = several_updates ? local_.save_state() : std::string{};
  std::optional<step_report> done;  // rank 0 finished the step; only the ranks' check was lost
  for (int attempt = 0;; ++attempt) {
    try {
      if (!control_) start();  // from rank 0's state: before the step, or after it when done
      if (!done) {
        if (options_.world > 1)
          control_->broadcast_bytes(encode(
              {{"op", "step"}, {"stage", stage}, {"actor_lr", actor_lr(local_)}, {"samples", samples_json(samples)}}));
        done = run_stage(local_, stage, samples);
        if (options_.world > 1) require_same_weights(*control_, local_, "after the step");
      }
      return *done;
    } catch (const rank_failure& e) {
      std::cerr << "learner: rank " << (e.rank < 0 ? std::string{"?"} : std::to_string(e.rank)) << " lost during a "
                << stage << " step (" << e.what() << ")";
      stop(false);
      if (attempt >= options_.retries) {
        std::cerr << "; no retries left (learner.rank_retries = " << options_.retries << ")\n";
        throw std::runtime_error{"learner ranks lost " + std::to_string(attempt + 1) + " times in one step: " +
                                 e.what() + "; raise learner.rank_retries or learner.rank_timeout_s"};
      }
      std::cerr << (done ? "; rank 0 finished the step, restarting the ranks from its state\n"
                         : "; restarting the ranks from rank 0's state and retrying the step\n");
      if (!done && !before.empty()) local_.load_state(before);
      ++restarts_;
    }
  }
}

int serve_rank(const std::string& host, int port, int rank, int world) {
  const char* secret = std::getenv(secret_variable);
  if (!secret || !*secret) {
    std::cerr << "learner-rank: " << secret_variable << " is not set; ranks are started by train (learner.ranks)\n";
    return 2;
  }
  try {
    // The first message waits as long as rank 0 needs; rank 0's own timeout covers the rest.
    auto control = std::shared_ptr<tcp_collective>(
        tcp_collective::join(host, port, rank, world, secret, std::chrono::seconds{60}));
    const json init = json::parse(control->wait_broadcast());
    control->set_timeout(std::chrono::milliseconds{init.at("timeout_ms").get<int64_t>()});
    const auto device = rank_device(torch::Device{init.at("device").get<std::string>()}, rank);
    const std::filesystem::path model_dir = init.at("model_dir").get<std::string>();
    auto actor = model::transformer::load(model_dir, device, torch::kFloat32);
    auto critic = init.at("critic").get<bool>() ? model::transformer::load(model_dir, device, torch::kFloat32) : nullptr;
    learner l{actor, critic, options_of(init.at("options"))};
    const auto group = group_of(init.at("collective"), control, device, control->timeout());
    l.set_collective(group);
    l.load_state(control->broadcast_bytes({}));
    require_same_weights(*group, l, "at the start");
    for (;;) {
      const json command = decode(control->wait_broadcast());
      const std::string op = command.at("op");
      if (op == "stop") return 0;
      if (op != "step") throw learner_error{"rank 0 sent an unknown command '" + op + "'"};
      set_actor_lr(l, command.at("actor_lr").get<double>());
      try {
        run_stage(l, command.at("stage"), samples_of(command.at("samples")));
      } catch (const learner_error&) {
        continue;  // a batch the learner refuses (the same on every rank); rank 0 skips it too
      }
      require_same_weights(*group, l, "after the step");
    }
  } catch (const rank_failure& e) {
    std::cerr << "learner-rank " << rank << ": " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "learner-rank " << rank << ": " << e.what() << "\n";
    return 1;
  }
}

}  // namespace cuda_agent::learner
