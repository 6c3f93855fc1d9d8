// The protocol: every message that crosses an actor boundary and matters for a result.
//
// Conventions: times are nanoseconds since the Unix epoch (`*_ns`) or durations in milliseconds
// (`*_ms`); a measurement that was not taken is NaN (`not_measured`, rendered as null in JSON),
// because CAF 0.17 cannot inspect std::optional; identifiers are strings so that they stay unique
// across nodes. Every type is default- and copy-constructible, as CAF requires.
//
// Adding a type: declare it here with CUDA_AGENT_FIELDS and list it in all_message_types at the
// end of this file (a static_assert there catches a type that is declared but not listed), then
// give it a sample in tests/messages/samples.hpp (the typed tests will not compile without one).
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <caf/detail/type_list.hpp>

#include "messages/fields.hpp"

namespace cuda_agent {

namespace detail {
// CUDA_AGENT_FIELDS takes one __COUNTER__ value per type: see all_message_types below.
inline constexpr int first_message_counter = __COUNTER__;
}  // namespace detail

inline constexpr double not_measured = std::numeric_limits<double>::quiet_NaN();

// --- Tasks -------------------------------------------------------------------------------------

// A PyTorch reference program in the KernelBench format (Model, get_inputs, get_init_inputs).
struct task_spec {
  std::string id;
  int32_t level = 0;
  std::string name;
  std::string source;                  // where it came from: "kernelbench", "ops-6k", "synth", ...
  std::vector<std::string> operators;  // torch operators it composes
  std::string model_py;                // the program text
  std::map<std::string, std::string> metadata;  // sizes, dtypes, anything else worth keeping
};
CUDA_AGENT_FIELDS(task_spec, id, level, name, source, operators, model_py, metadata);

// --- Judging ---------------------------------------------------------------------------------------

// Everything besides the task and the candidate that decides a verdict or a timing. Every job
// carries it and the harness judges by it alone, never by settings captured elsewhere, so the
// log says how each reward was decided and replay re-judges the same way. The defaults are the
// harness.* settings' (config/settings.cpp; a test keeps them equal), and the harness wire's
// (messages/harness_wire.hpp, skills/harness/wire.py).
struct judging_parameters {
  double atol = 1e-2;
  double rtol = 1e-2;
  int32_t input_sets = 5;         // fresh input sets the candidate is verified on
  int32_t warmup_runs = 10;       // untimed calls of eager, compiled and candidate
  int32_t timed_runs = 50;        // interleaved timed runs of each
  double max_cv = 0.25;           // a wider spread is measured again; still wider, no speed milestone
  double candidate_timeout_s = 120;  // one step of the candidate's child
  int64_t memory_limit_mb = 16384;   // the child's address space on CPU; 0: none
  int32_t cpu_threads = 0;           // torch threads on CPU; 0: torch's default
  std::string compile_mode = "default";  // torch.compile mode of the compiled baseline
};
CUDA_AGENT_FIELDS(judging_parameters, atol, rtol, input_sets, warmup_runs, timed_runs, max_cv,
                  candidate_timeout_s, memory_limit_mb, cpu_threads, compile_mode);

// --- Episode lifecycle -----------------------------------------------------------------------

// Why an episode ended. infrastructure_failure is ours, not the agent's (a lost node, a dead
// policy server): it says nothing about the agent, so such an episode is retried, not scored.
CUDA_AGENT_ENUM(termination, agent_done, turn_budget, token_budget, timeout, error,
                infrastructure_failure);

struct episode_started {
  std::string episode_id;
  std::string task_id;
  std::string policy;
  std::string device;  // "cpu" or "cuda"
  int32_t attempt = 0;  // > 0 when the episode is retried after an infrastructure failure
  int64_t weight_version = 0;
  int64_t started_at_ns = 0;
  // The budgets it runs under: with the task and the recorded answers, enough to replay it.
  int32_t max_turns = 0;
  int64_t context_tokens = 0;
  int64_t wall_clock_ms = 0;
  std::string workdir;    // the agent's directory
  std::string task_path;  // the locked copy of the reference program the harness reads
  std::string arch;       // build target on cuda ("sm_90"); empty: detected
  judging_parameters judging;  // what every job of the episode is judged by
};
CUDA_AGENT_FIELDS(episode_started, episode_id, task_id, policy, device, attempt, weight_version,
                  started_at_ns, max_turns, context_tokens, wall_clock_ms, workdir, task_path,
                  arch, judging);

struct episode_ended {
  std::string episode_id;
  termination reason = termination::agent_done;
  int32_t turns = 0;
  int64_t tokens = 0;   // prompt and completion tokens over all turns
  int32_t reward = -1;  // milestone reward of the final candidate
  double wall_ms = 0;
  std::string error;    // empty unless reason is error or infrastructure_failure
};
CUDA_AGENT_FIELDS(episode_ended, episode_id, reason, turns, tokens, reward, wall_ms, error);

// --- Policy --------------------------------------------------------------------------------------

struct tool_call {
  std::string call_id;
  std::string tool;  // Bash, Read, Write, Edit, MultiEdit, Glob, Grep, BashOutput, KillBash
  std::string arguments_json;
  // Not empty when the model's call was malformed (arguments that are not a JSON object, an
  // unknown tool, a missing required argument): the call is not run; the episode answers it
  // with an error tool_result carrying this text, so the model sees its mistake.
  std::string parse_error;
};
CUDA_AGENT_FIELDS(tool_call, call_id, tool, arguments_json, parse_error);

struct chat_message {
  std::string role;  // system, user, assistant, tool
  std::string content;
  std::string tool_call_id;  // for role "tool": the call this answers
  std::vector<tool_call> tool_calls;
};
CUDA_AGENT_FIELDS(chat_message, role, content, tool_call_id, tool_calls);

struct policy_request {
  std::string episode_id;
  std::string task_id;  // the task the episode works on (the demo policy plays its demonstration)
  int32_t turn = 0;
  std::vector<chat_message> messages;
  std::vector<std::string> tools;  // names of the tools the model may call
  // Sampling: 0 (max_tokens) or NaN (temperature, top_p) means the policy's configured value.
  int32_t max_tokens = 0;
  double temperature = not_measured;
  double top_p = not_measured;
};
CUDA_AGENT_FIELDS(policy_request, episode_id, task_id, turn, messages, tools, max_tokens,
                  temperature, top_p);

struct policy_response {
  std::string episode_id;
  int32_t turn = 0;
  std::string content;
  std::vector<tool_call> tool_calls;
  std::vector<int32_t> token_ids;  // exactly the tokens sampled, where the server returns them
  std::vector<float> logprobs;     // one per token id
  std::string finish_reason;
  int64_t weight_version = 0;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  std::string context_action;  // "none", or what the context policy did ("truncated_tool_outputs")
  // The prompt tokens that no earlier response of this episode holds (the whole prompt at the
  // first turn; then the tool results and the chat format's markup around them), in the
  // model's own tokenizer. The episode's responses in order, each prompt_token_ids then
  // token_ids, are exactly the token sequence the model saw and wrote. Empty where the policy
  // cannot say (an OpenAI-compatible server returns only the sampled tokens).
  std::vector<int32_t> prompt_token_ids;
};
CUDA_AGENT_FIELDS(policy_response, episode_id, turn, content, tool_calls, token_ids, logprobs,
                  finish_reason, weight_version, prompt_tokens, completion_tokens, context_action,
                  prompt_token_ids);

// --- Tools -------------------------------------------------------------------------------------

struct tool_request {
  std::string episode_id;
  int32_t turn = 0;
  tool_call call;
};
CUDA_AGENT_FIELDS(tool_request, episode_id, turn, call);

struct tool_result {
  std::string episode_id;
  std::string call_id;
  std::string tool;
  std::string output;
  int32_t exit_code = 0;
  bool truncated = false;
  bool is_error = false;
  double duration_ms = 0;
};
CUDA_AGENT_FIELDS(tool_result, episode_id, call_id, tool, output, exit_code, truncated, is_error,
                  duration_ms);

// --- Compile, verify and profile jobs ------------------------------------------------------------

struct compile_job {
  std::string job_id;
  std::string episode_id;
  std::string solution_dir;
  std::string device;
  std::string arch;  // "sm_90"; empty on CPU
};
CUDA_AGENT_FIELDS(compile_job, job_id, episode_id, solution_dir, device, arch);

struct compile_result {
  std::string job_id;
  bool ok = false;
  std::string module_path;
  std::string diagnostics;  // condensed for the agent; the full log stays on disk
  bool cache_hit = false;
  double duration_ms = 0;
  std::string error;
};
CUDA_AGENT_FIELDS(compile_result, job_id, ok, module_path, diagnostics, cache_hit, duration_ms,
                  error);

// verify_job's atol, rtol and input_sets and profile_job's warmup_runs and timed_runs, written
// by older logs, are read into `judging` (messages/codec.cpp, read_retired_fields).
struct verify_job {
  std::string job_id;
  std::string episode_id;
  std::string task_path;
  std::string solution_dir;
  std::string module_path;
  std::string device;
  uint64_t seed = 0;  // of the input sets; 0: a random one
  judging_parameters judging;
};
CUDA_AGENT_FIELDS(verify_job, job_id, episode_id, task_path, solution_dir, module_path, device,
                  seed, judging);

struct verify_result {
  std::string job_id;
  bool correct = false;
  std::vector<std::string> violations;  // each caught trick, named
  std::string error;
  double duration_ms = 0;
};
CUDA_AGENT_FIELDS(verify_result, job_id, correct, violations, error, duration_ms);

struct timing_stats {
  double median_ms = not_measured;
  double mean_ms = not_measured;
  double min_ms = not_measured;
  double max_ms = not_measured;
  double p10_ms = not_measured;
  double p90_ms = not_measured;
  double cv = not_measured;  // coefficient of variation of the timed runs
  int32_t runs = 0;
};
CUDA_AGENT_FIELDS(timing_stats, median_ms, mean_ms, min_ms, max_ms, p10_ms, p90_ms, cv, runs);

struct profile_job {
  std::string job_id;
  std::string episode_id;
  std::string task_path;
  std::string solution_dir;
  std::string module_path;
  std::string device;
  judging_parameters judging;
};
CUDA_AGENT_FIELDS(profile_job, job_id, episode_id, task_path, solution_dir, module_path, device,
                  judging);

struct profile_result {
  std::string job_id;
  timing_stats eager;
  timing_stats compiled;
  timing_stats candidate;
  std::string error;
};
CUDA_AGENT_FIELDS(profile_result, job_id, eager, compiled, candidate, error);

// The final evaluation of a candidate, exactly as the reward is computed (verify, then time eager,
// compiled and candidate, then the milestone rule). Answered with a reward_record.
struct evaluate_job {
  std::string job_id;
  std::string episode_id;
  std::string task_path;
  std::string solution_dir;
  std::string module_path;
  std::string device;
  judging_parameters judging;
};
CUDA_AGENT_FIELDS(evaluate_job, job_id, episode_id, task_path, solution_dir, module_path, device,
                  judging);

// --- Rewards -------------------------------------------------------------------------------------

// How a record's times were taken (docs/ARCHITECTURE.md, "The harness": Timing). `baseline`:
// "fresh" (both baselines measured in this job), "cached" (torch.compile's read from the baseline
// cache, `baseline_age_s` old, after this job's own eager runs agreed with the eager time cached
// beside it) or "remeasured" (they disagreed, so both were measured again); empty when nothing was
// timed.
// `measurements`: how many times the interleaved runs were taken (again while too spread out).
// `reliable`: every spread was within the harness's limit; speed earns a milestone only then.
struct timing_quality {
  std::string baseline;
  double baseline_age_s = not_measured;
  double cv_eager = not_measured;
  double cv_compile = not_measured;
  double cv_new = not_measured;
  int32_t measurements = 0;
  bool reliable = false;
};
CUDA_AGENT_FIELDS(timing_quality, baseline, baseline_age_s, cv_eager, cv_compile, cv_new,
                  measurements, reliable);

// The outcome of evaluating one candidate: the fields of `cuda-agent check --json`, plus where
// it belongs. Speed-ups and times are NaN when not measured; an empty error means none.
struct reward_record {
  std::string episode_id;
  std::string job_id;
  bool compiled = false;
  bool correct = false;
  std::vector<std::string> violations;
  int32_t reward = -1;
  double t_eager_ms = not_measured;
  double t_compile_ms = not_measured;
  double t_new_ms = not_measured;
  double speedup_eager = not_measured;
  double speedup_compile = not_measured;
  std::string error;
  timing_quality timing;
};
CUDA_AGENT_FIELDS(reward_record, episode_id, job_id, compiled, correct, violations, reward,
                  t_eager_ms, t_compile_ms, t_new_ms, speedup_eager, speedup_compile, error, timing);

// --- Trajectories ----------------------------------------------------------------------------------

// What the learner trains on: per turn, the prompt tokens new in this turn (loss mask 0) and
// the tokens the policy produced (loss mask 1) with their log-probs under the weights that
// sampled them. Where the policy returns its prompt tokens (policy_response.prompt_token_ids),
// the turns' token_ids in order are the episode's whole token sequence.
struct trajectory_turn {
  int32_t turn = 0;
  int32_t prompt_token_count = 0;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;     // 0 on prompt tokens
  std::vector<uint8_t> loss_mask;  // 1 where the token was the policy's and is trained on
  std::string observation;         // tool results fed back after this turn
  int64_t weight_version = 0;
  std::vector<tool_call> tool_calls;  // the calls the policy made in this turn, malformed ones too
};
CUDA_AGENT_FIELDS(trajectory_turn, turn, prompt_token_count, token_ids, logprobs, loss_mask,
                  observation, weight_version, tool_calls);

struct trajectory {
  std::string episode_id;
  std::string task_id;
  std::string policy;
  std::vector<trajectory_turn> turns;
  int32_t reward = -1;
  termination reason = termination::agent_done;
};
CUDA_AGENT_FIELDS(trajectory, episode_id, task_id, policy, turns, reward, reason);

// --- Learner -------------------------------------------------------------------------------------

CUDA_AGENT_ENUM(learner_phase, rft, value_pretrain, ppo);

struct learner_update {
  int64_t step = 0;
  learner_phase phase = learner_phase::rft;
  int64_t weight_version = 0;
  int64_t samples = 0;
  double loss = not_measured;
  double policy_loss = not_measured;
  double value_loss = not_measured;
  double kl = not_measured;
  double entropy = not_measured;
  double clip_fraction = not_measured;
  std::string checkpoint_path;
};
CUDA_AGENT_FIELDS(learner_update, step, phase, weight_version, samples, loss, policy_loss,
                  value_loss, kl, entropy, clip_fraction, checkpoint_path);

// --- Node membership -------------------------------------------------------------------------------

struct node_join {
  std::string node_id;
  std::string host;
  uint16_t port = 0;
  int32_t gpu_slots = 0;
  int32_t compiler_workers = 0;
  std::vector<std::string> devices;  // "H200 sm_90", ...
};
CUDA_AGENT_FIELDS(node_join, node_id, host, port, gpu_slots, compiler_workers, devices);

struct node_leave {
  std::string node_id;
  std::string reason;
};
CUDA_AGENT_FIELDS(node_leave, node_id, reason);

struct node_heartbeat {
  std::string node_id;
  int64_t sent_at_ns = 0;
  int32_t free_gpu_slots = 0;
  int32_t free_compiler_workers = 0;
};
CUDA_AGENT_FIELDS(node_heartbeat, node_id, sent_at_ns, free_gpu_slots, free_compiler_workers);

// A node joining a coordinator (actors/cluster/coordinator.hpp) first says hello with a nonce of
// its own; the coordinator answers with a nonce for the node to sign and its own proof that it
// holds the shared token (both HMAC-SHA256 over the token, actors/cluster/node_auth.hpp), so
// neither side trusts a peer that merely reached its port.
struct node_challenge {
  std::string nonce;  // what the node signs in its node_offer
  std::string proof;  // the coordinator's signature over the node's nonce
};
CUDA_AGENT_FIELDS(node_challenge, nonce, proof);

// What a node offers when it joins: its slots, its proof of the token, and its heartbeat
// settings, which must equal the coordinator's (one-sided heartbeats give spurious losses).
struct node_offer {
  node_join node;
  std::string nonce;  // the coordinator's, from node_challenge
  std::string proof;
  int64_t heartbeat_ms = 0;
  int64_t connection_timeout_ms = 0;
};
CUDA_AGENT_FIELDS(node_offer, node, nonce, proof, heartbeat_ms, connection_timeout_ms);

// A file shipped with a job to a node, or with a built module back from one, named by its
// content: the receiver checks the digest before it uses the bytes
// (actors/cluster/file_bundle.hpp).
struct shipped_file {
  std::string path;  // relative to the bundle's root, '/'-separated, never absolute or with ".."
  std::string sha256;
  std::string content;
  bool executable = false;
};
CUDA_AGENT_FIELDS(shipped_file, path, sha256, content, executable);

struct file_bundle {
  std::vector<shipped_file> files;
};
CUDA_AGENT_FIELDS(file_bundle, files);

// A job whose node was lost (or left) while it ran, put back at the front of its pool's queue to
// run elsewhere. `requeues` counts how often this job has been put back so far.
struct job_requeued {
  std::string job_id;
  std::string episode_id;
  std::string node_id;
  std::string reason;
  int32_t requeues = 0;
};
CUDA_AGENT_FIELDS(job_requeued, job_id, episode_id, node_id, reason, requeues);

// An answer that arrived for a job after its node had been given up and the job requeued: it is
// dropped, so every job is answered once.
struct late_answer {
  std::string job_id;
  std::string episode_id;
  std::string node_id;
};
CUDA_AGENT_FIELDS(late_answer, job_id, episode_id, node_id);

// --- Status replies ------------------------------------------------------------------------------

// One node's share of a pool: its workers, how many hold a job, and jobs answered and requeued.
struct node_load {
  std::string node_id;
  int32_t workers = 0;
  int32_t busy = 0;
  int64_t done = 0;
  int64_t requeued = 0;  // jobs taken back from it when it was lost or left
};
CUDA_AGENT_FIELDS(node_load, node_id, workers, busy, done, requeued);

// A job pool's answer to (pool_stats_atom): how full it is and how hard backpressure pushed.
struct pool_stats {
  int32_t capacity = 0;      // workers
  int32_t busy = 0;          // workers holding a job now
  int32_t waiting = 0;       // jobs queued for a worker now
  int32_t rejected = 0;      // jobs refused so far (queue full or waited past max_wait)
  int32_t peak_waiting = 0;  // the longest the queue has been
  std::vector<node_load> nodes;  // the workers by node: "local" for the pool's own process
};
CUDA_AGENT_FIELDS(pool_stats, capacity, busy, waiting, rejected, peak_waiting, nodes);

// The policy actor's answer to (policy_stats_atom): its concurrency credit.
struct policy_stats {
  int32_t running = 0;       // requests the backend is serving now
  int32_t waiting = 0;       // requests queued for credit
  int32_t peak_running = 0;
  int64_t rejected = 0;      // requests refused so far (queue full)
};
CUDA_AGENT_FIELDS(policy_stats, running, waiting, peak_running, rejected);

// The rollout manager's answer to (status_atom): progress so far.
struct rollout_status {
  int32_t done = 0;
  int32_t running = 0;
  int32_t queued = 0;
  int32_t retried = 0;  // episodes started again after their episode actor died
  std::vector<int32_t> rewards;  // finished episodes by reward: [-1, 1, 2, 3]
};
CUDA_AGENT_FIELDS(rollout_status, done, running, queued, retried, rewards);

// The coordinator's answer to `cuda-agent status` (actors/cluster/coordinator.hpp): its nodes and
// its two pools, each broken down by node.
struct cluster_status {
  std::vector<node_join> nodes;  // joined and not lost, in joining order
  pool_stats compiler;
  pool_stats gpu;
  double uptime_s = 0;
  int64_t refused = 0;  // joins refused so far (wrong token, mismatched settings)
  int64_t lost = 0;     // nodes lost so far
};
CUDA_AGENT_FIELDS(cluster_status, nodes, compiler, gpu, uptime_s, refused, lost);

// --- The list of all types ----------------------------------------------------------------------

// Every type above, once. The CAF registration (needed on every node for the wire) and the tests
// both walk this list, so a new type cannot be forgotten in either.
using all_message_types = caf::detail::type_list<
    task_spec, judging_parameters, episode_started, episode_ended, tool_call, chat_message, policy_request,
    policy_response, tool_request, tool_result, compile_job, compile_result, verify_job,
    verify_result, timing_stats, profile_job, profile_result, evaluate_job, timing_quality,
    reward_record,
    trajectory_turn, trajectory, learner_update, node_join, node_leave, node_heartbeat,
    node_challenge, node_offer, shipped_file, file_bundle, job_requeued, late_answer, node_load,
    pool_stats, policy_stats, rollout_status, cluster_status>;

static_assert(caf::detail::tl_is_distinct<all_message_types>::value,
              "all_message_types lists a type twice");
static_assert(__COUNTER__ - detail::first_message_counter - 1 ==
                  caf::detail::tl_size<all_message_types>::value,
              "a type declared with CUDA_AGENT_FIELDS in this file is missing from "
              "all_message_types (or one listed there is declared elsewhere)");

}  // namespace cuda_agent
