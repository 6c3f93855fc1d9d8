#include "config/settings.hpp"

#include <charconv>
#include <cmath>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#ifndef CUDA_AGENT_DEFAULT_PYTHON
#define CUDA_AGENT_DEFAULT_PYTHON "python3"
#endif

namespace cuda_agent {
namespace {

const char* type_name(setting_type type) {
  switch (type) {
    case setting_type::boolean: return "a boolean (true or false)";
    case setting_type::integer: return "an integer";
    case setting_type::real: return "a number";
    case setting_type::string: return "a string";
    case setting_type::choice: return "one of the listed words";
  }
  return "?";
}

std::string join(const std::vector<std::string>& words, const char* sep) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += sep;
    out += w;
  }
  return out;
}

const setting_spec* find_spec(std::string_view key) {
  for (const auto& spec : settings::schema())
    if (spec.key == key) return &spec;
  return nullptr;
}

std::string trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = s.find_last_not_of(" \t");
  return std::string{s.substr(first, last - first + 1)};
}

// Parses a value written as text (defaults, --set) according to its spec. The caller adds
// the key and origin to the error message.
setting_value parse_text(const setting_spec& spec, const std::string& text) {
  switch (spec.type) {
    case setting_type::boolean:
      if (text == "true") return true;
      if (text == "false") return false;
      break;
    case setting_type::integer: {
      int64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec == std::errc{} && end == text.data() + text.size() && !text.empty()) return v;
      break;
    }
    case setting_type::real: {
      if (text.empty()) break;
      char* end = nullptr;
      const double v = std::strtod(text.c_str(), &end);
      if (end == text.c_str() + text.size() && std::isfinite(v)) return v;
      break;
    }
    case setting_type::string:
    case setting_type::choice:
      return text;
  }
  throw config_error{"must be " + std::string{type_name(spec.type)} + ", got '" + text + "'"};
}

// A TOML value of the spec's type, or nothing when the node holds another type. Integers are
// accepted where a real number is expected, as TOML writes 1 and 1.0 differently.
std::optional<setting_value> from_toml(const setting_spec& spec, const toml::node& node) {
  switch (spec.type) {
    case setting_type::boolean:
      if (auto v = node.value_exact<bool>()) return *v;
      break;
    case setting_type::integer:
      if (auto v = node.value_exact<int64_t>()) return *v;
      break;
    case setting_type::real:
      if (node.is_floating_point() || node.is_integer()) return *node.value<double>();
      break;
    case setting_type::string:
    case setting_type::choice:
      if (auto v = node.value_exact<std::string>()) return *v;
      break;
  }
  return std::nullopt;
}

}  // namespace

const std::vector<setting_spec>& settings::schema() {
  using T = setting_type;
  static const std::vector<setting_spec> specs = {
      {"logging.level", T::choice, "info", {"trace", "debug", "info", "warn", "error", "off"}, 0, 0,
       "Lowest severity of diagnostic lines written to standard error."},
      {"log.dir", T::string, "runs/log", {}, 0, 0,
       "Directory of the message log: the segment files every run appends to."},
      {"log.segment_bytes", T::integer, "67108864", {}, 4096, int64_t{1} << 40,
       "A new segment file is started when a record would grow the current one past this size."},
      {"log.fsync", T::choice, "interval", {"never", "interval", "always"}, 0, 0,
       "When appended records are forced to stable storage: never (the kernel decides), interval "
       "(at most log.fsync_interval_ms apart) or always (after every record)."},
      {"log.fsync_interval_ms", T::integer, "1000", {}, 1, 3600000,
       "Longest time between two forced writes when log.fsync = interval."},
      {"actors.scheduler_threads", T::integer, "0", {}, 0, 1024,
       "Worker threads of the actor scheduler; 0 means one per core."},
      {"harness.python", T::string, CUDA_AGENT_DEFAULT_PYTHON, {}, 0, 0,
       "Python interpreter, with torch 2.11.0, that runs the locked harness and reference models; "
       "defaults to the one the build took LibTorch from."},
      {"harness.skills_dir", T::string, "", {}, 0, 0,
       "Directory holding the harness package (skills/); empty means the source tree's skills/."},
      {"harness.atol", T::real, "0.01", {}, 0, 0,
       "Absolute tolerance of the correctness check (torch.allclose atol)."},
      {"harness.rtol", T::real, "0.01", {}, 0, 0,
       "Relative tolerance of the correctness check (torch.allclose rtol)."},
      {"harness.input_sets", T::integer, "5", {}, 1, 100,
       "Fresh input sets from get_inputs(), each with a new seed, a candidate must match on."},
      {"harness.warmup_runs", T::integer, "10", {}, 0, 10000,
       "Untimed calls of eager, compiled and candidate before the timed runs."},
      {"harness.timed_runs", T::integer, "50", {}, 1, 100000,
       "Timed runs of each of eager, compiled and candidate, interleaved, on fresh input clones."},
      {"harness.max_cv", T::real, "0.25", {}, 0, 0,
       "Largest coefficient of variation of a timing (eager, compiled or candidate) that earns a speed "
       "milestone; a wider one is measured again, three times at most."},
      {"harness.candidate_timeout_s", T::integer, "120", {}, 1, 86400,
       "Longest a candidate's child may take for one step (load, verify, a timing batch)."},
      {"harness.job_timeout_s", T::integer, "900", {}, 1, 86400,
       "Longest one whole job may take in the worker before it is killed and replaced."},
      {"harness.memory_limit_mb", T::integer, "16384", {}, 0, int64_t{1} << 30,
       "Address-space limit of a candidate's child on CPU (0: none; not applied on CUDA)."},
      {"harness.baseline_cache_dir", T::string, "runs/baselines", {}, 0, 0,
       "Where eager and torch.compile timings are cached per (task, device, torch version); empty: never cached."},
      {"harness.baseline_max_age_s", T::integer, "86400", {}, 0, int64_t{1} << 40,
       "A cached baseline older than this is measured again."},
      {"harness.cpu_threads", T::integer, "0", {}, 0, 1024,
       "Intra-op threads of torch in the worker and the candidate's child on CPU (0: torch's default)."},
      {"harness.timing_cpus", T::string, "auto", {}, 0, 0,
       "Cores a CPU job's timed runs hold, kept free of everything else of ours: auto (the last core, "
       "given two or more), none, or core numbers (2,3)."},
      {"harness.compile_mode", T::choice, "default", {"default", "reduce-overhead", "max-autotune"}, 0, 0,
       "torch.compile mode of the compiled baseline."},
      {"corpus.dir", T::string, "", {}, 0, 0,
       "The corpus/ folder (task sets, demonstrations, the cuda_agent_corpus package); empty "
       "means the source tree the binary was built from."},
      {"corpus.timeout_s", T::integer, "86400", {}, 1, int64_t{30} * 86400,
       "Longest a `cuda-agent corpus` validate, import or synth run may take before it is killed."},
      {"episode.max_turns", T::integer, "200", {}, 1, 100000,
       "Policy turns an episode may take before it ends with turn_budget (the paper: 150 in "
       "training, 200 in evaluation)."},
      {"episode.context_tokens", T::integer, "131072", {}, 1024, 100000000,
       "Context budget in tokens; an episode whose conversation reaches it ends with token_budget."},
      {"episode.wall_clock_s", T::integer, "7200", {}, 1, 604800,
       "Wall-clock budget of one episode, tools and builds included; then it ends with timeout."},
      {"episode.policy_timeout_s", T::integer, "600", {}, 1, 86400,
       "Longest wait for one policy answer before the episode fails as an infrastructure failure."},
      {"episode.job_timeout_s", T::integer, "1800", {}, 1, 86400,
       "Longest wait for a build, verify, profile or final evaluation, queueing included."},
      {"rollout.concurrency", T::integer, "4", {}, 1, 100000, "Episodes that run at the same time."},
      {"rollout.retries", T::integer, "2", {}, 0, 100,
       "Times an episode is retried after an infrastructure failure (never after a candidate's)."},
      {"rollout.runs_dir", T::string, "runs", {}, 0, 0,
       "Where episode workdirs are created (runs_dir/<run>/episodes/<episode>)."},
      {"rollout.compiler_workers", T::integer, "2", {}, 0, 1024,
       "Builds that run at the same time in this process (0 only with `rollout --listen`: nodes "
       "bring them)."},
      {"rollout.gpu_slots", T::integer, "1", {}, 0, 1024,
       "Harness workers (one job each) on this node: one per GPU, or per CPU evaluator."},
      {"rollout.max_waiting_jobs", T::integer, "256", {}, 1, 1000000,
       "Jobs that may wait for a compiler worker or a GPU slot before new ones are rejected."},
      {"cluster.heartbeat_ms", T::integer, "1000", {}, 10, 3600000,
       "Heartbeat interval between a coordinator and its nodes; must be equal on every node."},
      {"cluster.connection_timeout_ms", T::integer, "5000", {}, 10, 86400000,
       "A node (or coordinator) silent this long is lost: its jobs run elsewhere. Equal on every node."},
      {"cluster.work_dir", T::string, "runs/cluster", {}, 0, 0,
       "Where a node unpacks the jobs shipped to it, and the coordinator keeps modules built on nodes."},
      {"cluster.max_requeues", T::integer, "3", {}, 0, 100,
       "Times one job is taken back from a lost node and run elsewhere before it fails."},
      {"cluster.rejoin_s", T::integer, "60", {}, 0, 86400,
       "How long a node keeps trying to reach its coordinator, at start and after losing it."},
      {"cluster.max_bundle_mb", T::integer, "512", {}, 1, 65536,
       "Largest set of files shipped with one job (task, solution, module), in MiB."},
      {"cluster.tls_certificate", T::string, "", {}, 0, 0,
       "PEM certificate of this process for TLS between a coordinator and its nodes (with tls_key and "
       "tls_ca; all three or none)."},
      {"cluster.tls_key", T::string, "", {}, 0, 0, "PEM private key of cluster.tls_certificate."},
      {"cluster.tls_ca", T::string, "", {}, 0, 0,
       "PEM certificate of the authority that signed every node's and the coordinator's certificate; "
       "peers without such a certificate are refused."},
      {"build.cache_dir", T::string, "runs/build-cache", {}, 0, 0,
       "Directory of the kernel build cache: object files, built modules and full compiler logs."},
      {"build.jobs", T::integer, "0", {}, 0, 256,
       "Compiler processes one build runs at once; 0 means one per core."},
      {"build.timeout_s", T::integer, "300", {}, 1, 86400,
       "Wall-clock limit of one build; a compiler still running then is killed and reported."},
      {"build.memory_mb", T::integer, "16384", {}, 256, 1048576,
       "Address-space limit of every compiler process, in MiB."},
      {"build.max_file_mb", T::integer, "2048", {}, 1, 1048576,
       "Largest file a compiler process may write, in MiB."},
      {"build.max_output_kb", T::integer, "1024", {}, 1, 1048576,
       "Compiler output kept per stream and process, in KiB; the rest is dropped."},
      {"build.diagnostics_chars", T::integer, "4000", {}, 200, 1000000,
       "Longest condensed diagnostics handed to the agent; the full log stays on disk."},
      {"build.sandbox", T::choice, "bwrap", {"bwrap", "none"}, 0, 0,
       "Isolation of compiler processes: bwrap (no network, read-only toolchain, writable build "
       "dir only) or none."},
      {"build.bwrap", T::string, "bwrap", {}, 0, 0,
       "The bubblewrap program used when build.sandbox = bwrap."},
      {"build.cxx", T::string, "g++", {}, 0, 0, "Host C++ compiler."},
      {"build.binding_cxx", T::string, "auto", {}, 0, 0,
       "Compiler of binding sources: auto (clang++ where it is on PATH, else build.cxx) or a "
       "program. clang++ instantiates the slim header's templates once, in its precompiled "
       "header; g++ does it again in every binding file."},
      {"build.nvcc", T::string, "", {}, 0, 0,
       "CUDA compiler; empty: $CUDA_HOME/bin/nvcc, else /usr/local/cuda/bin/nvcc."},
      {"build.kernel_flags", T::string, "-O3", {}, 0, 0,
       "Optimisation flags of kernel sources (kernels/*.cpp, host compiler, and kernels/*.cu)."},
      {"build.binding_flags", T::string, "-O0", {}, 0, 0,
       "Optimisation flags of binding sources (binding.cpp, kernels/*_binding.cpp): they only "
       "marshal arguments."},
      {"policy.backend", T::choice, "openai", {"openai", "torch", "replay", "demo"}, 0, 0,
       "Where the agent's turns come from: an OpenAI-compatible server, a LibTorch model in this "
       "process, a message log, or the shipped demonstrations."},
      {"policy.base_url", T::string, "http://127.0.0.1:8000/v1", {}, 0, 0,
       "Base URL of the OpenAI-compatible server; /chat/completions is appended."},
      {"policy.model", T::string, "", {}, 0, 0,
       "Model name sent with each request (vLLM/SGLang: the served model name); required for "
       "the openai backend."},
      {"policy.api_key_env", T::string, "OPENAI_API_KEY", {}, 0, 0,
       "Environment variable holding the API key; unset or empty sends no Authorization header."},
      {"policy.temperature", T::real, "1.0", {}, 0, 0,
       "Sampling temperature, unless a request sets its own."},
      {"policy.top_p", T::real, "1.0", {}, 0, 0, "Nucleus sampling mass, unless a request sets its own."},
      {"policy.max_tokens", T::integer, "8192", {}, 1, 1 << 24,
       "Most tokens one turn may generate, unless a request sets its own."},
      {"policy.timeout_s", T::integer, "600", {}, 1, 86400,
       "Time limit of one HTTP request, connection to last byte."},
      {"policy.retries", T::integer, "4", {}, 0, 100,
       "Retries of a request after 429, 5xx, a timeout, a dropped connection or a garbled reply."},
      {"policy.retry_backoff_ms", T::integer, "500", {}, 0, 600000,
       "Wait before the first retry; doubled for each further one (a server's Retry-After wins)."},
      {"policy.max_concurrency", T::integer, "64", {}, 1, 100000,
       "Requests in flight to the policy at once; the others wait for a grant."},
      {"policy.max_queue", T::integer, "1024", {}, 0, 1000000,
       "Requests that may wait for a grant; one more is rejected at once."},
      {"policy.max_wait_s", T::integer, "1800", {}, 1, 86400,
       "Longest a request waits for a grant before it is rejected with an error that says so."},
      {"policy.context_tokens", T::integer, "131072", {}, 1024, int64_t{1} << 30,
       "Context window of the model; old tool outputs are truncated to keep prompt and reply in it."},
      {"policy.token_ids", T::boolean, "true", {}, 0, 0,
       "Ask for sampled token ids and log-probabilities (vLLM's logprobs and "
       "return_tokens_as_token_ids); turn off for servers that reject unknown fields."},
      {"policy.tools_dir", T::string, CUDA_AGENT_SOURCE_DIR "/skills/tools", {}, 0, 0,
       "Directory of the tools' JSON schemas (<Tool>.json) sent to the model; defaults to the "
       "source tree's skills/tools, whatever the working directory."},
      {"policy.replay_log", T::string, "", {}, 0, 0,
       "Message log directory the replay backend answers from."},
      {"policy.replay_episode", T::string, "", {}, 0, 0,
       "Episode of the log to replay; empty: the episode id of each request."},
      {"policy.demo_dir", T::string, CUDA_AGENT_SOURCE_DIR "/corpus/demos", {}, 0, 0,
       "Demonstrations the demo backend plays: <dir>/<task_id>/demo.json or "
       "<dir>/<set>/<task_id>/demo.json; defaults to the source tree's corpus/demos, whatever the "
       "working directory."},
      {"policy.model_dir", T::string, "", {}, 0, 0,
       "Hugging Face checkpoint directory (config.json, *.safetensors, tokenizer.json) of the "
       "torch backend; with the demo backend, the checkpoint whose tokens it answers in "
       "(tokenizer.json only)."},
      {"policy.device", T::string, "cpu", {}, 0, 0,
       "Device of the torch backend's model: cpu, cuda or cuda:N."},
      {"policy.dtype", T::choice, "auto", {"auto", "fp32", "bf16", "fp16"}, 0, 0,
       "Weights and compute dtype of the torch backend; auto: bf16 on cuda, fp32 on cpu."},
      {"policy.chat_format", T::choice, "auto", {"auto", "qwen2", "qwen3", "llama3"}, 0, 0,
       "Chat format of the torch backend (and of the demo backend with policy.model_dir); auto: "
       "detected from the checkpoint."},
      {"policy.top_k", T::integer, "0", {}, 0, 1 << 24,
       "Top-k sampling of the torch backend; 0: no limit."},
      {"policy.seed", T::integer, "0", {}, 0, int64_t{1} << 62,
       "Seed of the torch backend; each turn samples from a generator seeded by it, the episode "
       "and the turn, so a rerun samples the same tokens."},
      {"policy.max_batch", T::integer, "32", {}, 1, 4096,
       "Sequences the torch backend decodes together."},
      {"policy.prefill_batch_tokens", T::integer, "16384", {}, 1, int64_t{1} << 24,
       "Tokens of one prefill step of the torch backend, padding included: new prompts of "
       "similar lengths are prefilled together up to it; 1: each alone."},
      {"policy.batched_decode", T::boolean, "true", {}, 0, 0,
       "On CUDA in bf16/fp16, a decode step runs attention for all its sequences in one "
       "flash-attention call instead of one sequence at a time."},
      {"policy.cuda_graphs", T::boolean, "false", {}, 0, 0,
       "On CUDA in bf16/fp16, the batched decode step replays everything but attention from CUDA "
       "graphs (one set per batch size, captured on first use); needs policy.batched_decode."},
      {"policy.decode_pool_slots", T::integer, "0", {}, 0, 4096,
       "Caches of the torch backend kept in one preallocated decode pool (0: none); a decode "
       "step whose caches are all there runs, with policy.cuda_graphs, as one CUDA graph."},
      {"policy.decode_pool_tokens", T::integer, "0", {}, 0, int64_t{1} << 24,
       "Tokens of each decode pool slot; a longer cache leaves its slot for memory of its own."},
      {"policy.cache_budget_mb", T::integer, "8192", {}, 1, int64_t{1} << 30,
       "KV cache memory of all episodes together in the torch backend; least recently used "
       "episodes' caches are evicted past it."},
      {"learner.model_dir", T::string, "", {}, 0, 0,
       "The checkpoint the learner starts from (config.json, *.safetensors, tokenizer.json); the critic is a second copy of it with a value head."},
      {"learner.logs", T::string, "", {}, 0, 0,
       "Message logs of earlier rollouts whose trajectories it trains on, comma-separated."},
      {"learner.device", T::string, "cpu", {}, 0, 0,
       "Where the learner's models run: cpu, cuda or cuda:N."},
      {"learner.rft_steps", T::integer, "20", {}, 0, int64_t{1} << 30,
       "Optimiser steps of rejection fine-tuning; 0 skips the stage."},
      {"learner.value_steps", T::integer, "10", {}, 0, int64_t{1} << 30,
       "Optimiser steps of value pretraining (critic only); 0 skips the stage."},
      {"learner.ppo_steps", T::integer, "10", {}, 0, int64_t{1} << 30,
       "PPO steps; 0 skips the stage."},
      {"learner.batch_episodes", T::integer, "64", {}, 1, int64_t{1} << 20,
       "Episodes per step, drawn without replacement from the stage's episodes (all of them when fewer)."},
      {"learner.actor_lr", T::real, "3e-6", {}, 0, 0,
       "AdamW learning rate of the actor."},
      {"learner.rft_lr", T::real, "0", {}, 0, 0,
       "AdamW learning rate of the actor during RFT; 0: learner.actor_lr."},
      {"learner.critic_lr", T::real, "6e-6", {}, 0, 0,
       "AdamW learning rate of the critic."},
      {"learner.max_grad_norm", T::real, "1.0", {}, 0, 0,
       "Gradient norm each model is clipped to before its step; 0: no clipping."},
      {"learner.token_budget", T::integer, "16384", {}, 1, int64_t{1} << 40,
       "Padded tokens per micro-batch; a longer episode is a micro-batch of its own."},
      {"learner.gae_lambda", T::real, "0.95", {}, 0, 0,
       "GAE lambda over the policy tokens (gamma is 1)."},
      {"learner.is_cap", T::real, "2.0", {}, 0, 0,
       "Cap of the truncated importance weight against the rollout log-probabilities."},
      {"learner.truncated", T::choice, "penalty", {"penalty", "reward", "drop"}, 0, 0,
       "Episodes cut by a turn, token or time budget: penalty trains on them with reward -1, reward keeps the harness's reward, drop leaves them out."},
      {"learner.rft_min_reward", T::integer, "1", {}, -1, 3,
       "RFT trains on episodes with at least this reward (and no invalid tool call, loop or truncation)."},
      {"learner.checkpoint_every", T::integer, "10", {}, 1, int64_t{1} << 30,
       "Steps between checkpoints (and one at the end of each stage)."},
      {"learner.keep_checkpoints", T::integer, "2", {}, 1, 1000,
       "Complete checkpoints kept; older ones are deleted."},
      {"learner.seed", T::integer, "0", {}, 0, int64_t{1} << 62,
       "Seed of the learner's batch draws."},
      {"learner.staleness", T::integer, "1", {}, 0, 1000,
       "train --live: batches that sampling may run ahead of training (0: synchronous)."},
      {"learner.init_model", T::choice, "none", {"none", "tiny"}, 0, 0,
       "What train does when learner.model_dir holds no checkpoint: none refuses; tiny creates a "
       "tiny random Qwen2 with its own BPE tokenizer there (tools/learn/tiny_model.py)."},
      {"learner.init_hidden", T::integer, "64", {}, 8, 8192,
       "Hidden size of the model learner.init_model = tiny creates (a multiple of 8)."},
      {"learner.init_layers", T::integer, "2", {}, 1, 256,
       "Layers of the model learner.init_model = tiny creates."},
      {"learner.corpus", T::string, "", {}, 0, 0,
       "The task set of train's rollouts (demonstrations, live PPO, evaluation): a set name or "
       "directory; empty: bench on cuda, smoke on cpu. train --corpus overrides it."},
      {"learner.tasks", T::string, "", {}, 0, 0,
       "Globs over the task ids of learner.corpus, comma-separated; empty: every task. train "
       "--tasks overrides it."},
      {"learner.record_demos", T::boolean, "false", {}, 0, 0,
       "Before training, roll out the shipped demonstrations of the tasks in the model's tokens "
       "(--policy demo) into DIR/demo_log and train on it with learner.logs."},
      {"learner.live", T::boolean, "false", {}, 0, 0,
       "PPO on live rollouts of the torch policy over the tasks (the same as train --live)."},
      {"learner.ppo_epochs", T::integer, "1", {}, 1, 64,
       "Passes over each PPO batch, one optimiser step each, against the advantages computed before the first."},
      {"learner.logit_chunk_tokens", T::integer, "4096", {}, 0, 1 << 24,
       "Positions whose [positions, vocab] float32 logits the learner holds at once; the backward "
       "recomputes each chunk's instead of keeping them. 0: a whole micro-batch at once."},
      {"learner.activation_checkpointing", T::boolean, "false", {}, 0, 0,
       "Actor and critic keep only each layer's input for the backward and recompute the layer "
       "there: about a third more compute for a long episode's activations."},
      {"learner.compute_dtype", T::choice, "float32", {"float32", "bfloat16"}, 0, 0,
       "The learner's forward and backward products: float32, or bfloat16 under autocast "
       "against float32 master weights (AdamW, gradients and losses stay float32)."},
      {"learner.bf16_working_weights", T::boolean, "false", {}, 0, 0,
       "With compute_dtype bfloat16: forward and backward on bfloat16 copies of actor and critic "
       "(residual stream and norms in bfloat16 too), refreshed from the float32 master weights "
       "after each optimiser step, instead of autocast's cast of each weight at each use."},
      {"learner.attention", T::choice, "default", {"default", "cudnn"}, 0, 0,
       "The fused attention kernel the learner's SDPA tries first on CUDA: ATen's order (flash "
       "first) or cuDNN's; process-wide, and only where the kernel takes the shapes."},
      {"learner.fused_optimizer", T::boolean, "true", {}, 0, 0,
       "AdamW and gradient clipping as multi-tensor kernels (ATen's fused AdamW, foreach norm and "
       "scale) instead of a few kernels per parameter tensor: the same arithmetic in another order."},
      {"learner.ranks", T::integer, "1", {}, 1, 64,
       "Data-parallel learner ranks: rank 0 in train's process, the others in learner-rank child "
       "processes. On CUDA rank r uses the device after rank 0's r times (cuda:0, cuda:1, ...)."},
      {"learner.collective", T::choice, "auto", {"auto", "tcp", "nccl"}, 0, 0,
       "How the ranks sum gradients: nccl (a GPU per rank), tcp (over loopback, sums in rank order; "
       "the CPU twin); auto: nccl where the learner is on CUDA and NCCL was built, else tcp."},
      {"learner.rank_timeout_s", T::integer, "600", {}, 1, 86400,
       "A rank that does not answer a collective within this many seconds is lost."},
      {"learner.rank_retries", T::integer, "2", {}, 0, 100,
       "Times a step is retried on restarted ranks after a rank is lost, before train fails."},
      {"learner.restarts", T::integer, "2", {}, 0, 100,
       "Times train restarts its learner process (rank 0, and the rollouts of --live) after it "
       "dies by a signal (SIGKILL, a crash, the out-of-memory killer), each time from the newest "
       "checkpoint as --resume does; 0: train runs in one process and such a death ends it."},
      {"learner.evaluate", T::boolean, "false", {}, 0, 0,
       "Greedy rollouts of the tasks with the actor before training and after RFT and PPO, "
       "each a line of DIR/eval.jsonl."},
      {"sandbox.mode", T::choice, "bwrap", {"bwrap", "none"}, 0, 0,
       "How agent commands are isolated: bwrap (bubblewrap namespaces) or none (no isolation; "
       "only for hosts without bubblewrap, and only when set explicitly)."},
      {"sandbox.bwrap", T::string, "bwrap", {}, 0, 0,
       "The bubblewrap program: a path, or a name searched in PATH."},
      {"sandbox.memory_mb", T::integer, "8192", {}, 64, int64_t{1} << 24,
       "Address-space limit of every process an agent command starts, in MiB."},
      {"sandbox.max_processes", T::integer, "256", {}, 8, 1 << 20,
       "Most processes an agent command may have alive at once (fork bombs end here)."},
      {"sandbox.max_file_mb", T::integer, "1024", {}, 1, int64_t{1} << 24,
       "Largest file an agent command may write, in MiB."},
      {"sandbox.default_timeout_ms", T::integer, "120000", {}, 100, 86400000,
       "Wall-clock limit of a Bash command that names no timeout."},
      {"sandbox.max_timeout_ms", T::integer, "600000", {}, 100, 86400000,
       "Largest timeout a Bash command may ask for; also the limit of background commands."},
      {"sandbox.output_limit_bytes", T::integer, "30000", {}, 1024, int64_t{1} << 30,
       "Longest tool output returned to the agent; the rest is cut with a marker."},
      {"sandbox.ro_paths", T::string, "", {}, 0, 0,
       "Extra host paths, separated by ':', visible read-only inside the sandbox at the same "
       "path (a Python environment, a toolchain)."},
      {"sandbox.path", T::string, "/usr/local/bin:/usr/bin:/bin", {}, 0, 0,
       "PATH of agent commands inside the sandbox."},
      {"sandbox.run_as_uid", T::integer, "65534", {}, 0, 4294967294,
       "When cuda-agent runs as root, agent commands run as this user (the kernel does not apply "
       "the process limit to root); 0 keeps root and leaves the process limit unenforced."},
      {"sandbox.max_background", T::integer, "8", {}, 0, 1024,
       "Most background commands one episode may have running at once."},
      {"tools.read_lines", T::integer, "2000", {}, 1, 1000000,
       "Lines a Read returns when it names no limit."},
      {"tools.line_chars", T::integer, "2000", {}, 16, 1000000,
       "Longest line Read and Grep show; longer lines are cut with a marker."},
  };
  return specs;
}

settings::settings() {
  for (const auto& spec : schema()) assign(spec, parse_text(spec, spec.default_value), "default");
}

void settings::assign(const setting_spec& spec, setting_value value, std::string origin) {
  if (spec.type == setting_type::integer) {
    const auto v = std::get<int64_t>(value);
    if (v < spec.min || v > spec.max)
      throw config_error{"setting '" + spec.key + "' (" + origin + ") must be between " +
                         std::to_string(spec.min) + " and " + std::to_string(spec.max) + ", got " +
                         std::to_string(v)};
  }
  if (spec.type == setting_type::choice) {
    const auto& v = std::get<std::string>(value);
    bool known = false;
    for (const auto& c : spec.choices) known = known || c == v;
    if (!known)
      throw config_error{"setting '" + spec.key + "' (" + origin + ") must be one of " +
                         join(spec.choices, ", ") + ", got '" + v + "'"};
  }
  values_[spec.key] = entry{std::move(value), std::move(origin)};
}

void settings::load_file(const std::filesystem::path& path) {
  const std::string origin = path.string();
  toml::table doc;
  try {
    doc = toml::parse_file(origin);
  } catch (const toml::parse_error& e) {
    const auto& where = e.source().begin;
    throw config_error{origin + ":" + std::to_string(where.line) + ": " +
                       std::string{e.description()}};
  }
  for (const auto& [section_key, section_node] : doc) {
    const std::string section{section_key.str()};
    const auto* section_table = section_node.as_table();
    if (!section_table)
      throw config_error{origin + ": '" + section +
                         "' must be a [section] holding keys; see config/README.md"};
    for (const auto& [name_key, node] : *section_table) {
      const std::string key = section + "." + std::string{name_key.str()};
      const auto line = std::to_string(node.source().begin.line);
      const auto* spec = find_spec(key);
      if (!spec)
        throw config_error{origin + ":" + line + ": unknown setting '" + key +
                           "'; `cuda-agent config schema` lists the known ones"};
      auto value = from_toml(*spec, node);
      if (!value)
        throw config_error{origin + ":" + line + ": setting '" + key + "' must be " +
                           type_name(spec->type)};
      assign(*spec, std::move(*value), origin + ":" + line);
    }
  }
}

void settings::apply_override(std::string_view assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string_view::npos)
    throw config_error{"--set '" + std::string{assignment} + "' must have the form KEY=VALUE"};
  const std::string key = trim(assignment.substr(0, eq));
  const std::string text = trim(assignment.substr(eq + 1));
  const auto* spec = find_spec(key);
  if (!spec)
    throw config_error{"--set: unknown setting '" + key +
                       "'; `cuda-agent config schema` lists the known ones"};
  try {
    assign(*spec, parse_text(*spec, text), "--set");
  } catch (const config_error& e) {
    if (std::string_view{e.what()}.rfind("setting '", 0) == 0) throw;
    throw config_error{"--set: setting '" + key + "' " + e.what()};
  }
}

const settings::entry& settings::find(std::string_view key, setting_type type) const {
  const auto* spec = find_spec(key);
  const auto it = values_.find(key);
  if (!spec || it == values_.end())
    throw std::logic_error{"settings: '" + std::string{key} + "' is not in the schema"};
  const bool text = type == setting_type::string || type == setting_type::choice;
  const bool spec_text = spec->type == setting_type::string || spec->type == setting_type::choice;
  if (spec->type != type && !(text && spec_text))
    throw std::logic_error{"settings: '" + std::string{key} + "' read as the wrong type"};
  return it->second;
}

bool settings::get_bool(std::string_view key) const {
  return std::get<bool>(find(key, setting_type::boolean).value);
}
int64_t settings::get_int(std::string_view key) const {
  return std::get<int64_t>(find(key, setting_type::integer).value);
}
double settings::get_real(std::string_view key) const {
  return std::get<double>(find(key, setting_type::real).value);
}
const std::string& settings::get_string(std::string_view key) const {
  return std::get<std::string>(find(key, setting_type::string).value);
}

std::string settings::to_toml() const {
  std::ostringstream out;
  std::string section;
  for (const auto& spec : schema()) {
    const auto dot = spec.key.find('.');
    const auto this_section = spec.key.substr(0, dot);
    if (this_section != section) {
      out << (section.empty() ? "" : "\n") << "[" << this_section << "]\n";
      section = this_section;
    }
    const auto& e = values_.at(spec.key);
    out << spec.key.substr(dot + 1) << " = ";
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) out << (v ? "true" : "false");
          else if constexpr (std::is_same_v<V, std::string>) out << toml::value<std::string>{v};
          else out << v;
        },
        e.value);
    out << "  # " << e.origin << "\n";
  }
  return out.str();
}

}  // namespace cuda_agent
