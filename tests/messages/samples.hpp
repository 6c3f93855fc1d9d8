// One instance of every message type with every field set away from its default, so that a
// field dropped by the encoding shows up as a round-trip difference.
#pragma once

#include <string>

#include "messages/messages.hpp"

namespace cuda_agent::testing {

template <class T>
T sample();

inline tool_call sample_call(int i) {
  return {"call-" + std::to_string(i), "Write", R"({"file_path":"kernels/k.cu","content":"//"})",
          "arguments: 'content' is missing"};
}

template <> inline task_spec sample() {
  return {"L1-19", 1, "relu", "kernelbench", {"relu", "add"}, "class Model: ...",
          {{"batch", "16"}, {"dtype", "float32"}}};
}
template <> inline judging_parameters sample() {
  return {1e-3, 2e-3, 7, 3, 20, 0.125, 60.5, 4096, 2, "max-autotune"};
}
template <> inline episode_started sample() {
  return {"ep-7", "L1-19", "openai", "cuda", 2, 41, 1764547200123456789, 200, 131072, 7200000,
          "/runs/r1/episodes/ep-7/workdir", "/runs/r1/episodes/ep-7/task/model.py", "sm_90",
          sample<judging_parameters>()};
}
template <> inline episode_ended sample() {
  return {"ep-7", termination::token_budget, 37, 120001, 3, 5432.25, "context exhausted"};
}
template <> inline tool_call sample() { return sample_call(1); }
template <> inline chat_message sample() {
  return {"assistant", "Let me write the kernel.", "call-0", {sample_call(1), sample_call(2)}};
}
template <> inline policy_request sample() {
  return {"ep-7", "L1-19", 3, {sample<chat_message>(), {"tool", "ok", "call-1", {}}},
          {"Bash", "Write"}, 4096, 0.7, 0.95};
}
template <> inline policy_response sample() {
  return {"ep-7", 3, "thinking", {sample_call(3)}, {151644, 872, -1}, {-0.25f, -1.5f, 0.0f},
          "tool_calls", 41, 1200, 3, "truncated_tool_outputs", {151644, 8948, 198}};
}
template <> inline tool_request sample() { return {"ep-7", 3, sample_call(4)}; }
template <> inline tool_result sample() {
  return {"ep-7", "call-4", "Bash", "nvcc: error", 2, true, true, 12.5};
}
template <> inline compile_job sample() { return {"job-1", "ep-7", "/work/ep-7", "cuda", "sm_90"}; }
template <> inline compile_result sample() {
  return {"job-1", true, "/cache/ab12/cuda_extension.so", "1 warning", true, 310.5, "retried"};
}
template <> inline verify_job sample() {
  return {"job-2", "ep-7", "/tasks/L1-19.py", "/work/ep-7", "/cache/m.so", "cuda", 12345678901234ull,
          sample<judging_parameters>()};
}
template <> inline verify_result sample() {
  return {"job-2", true, {"output_memory_reuse", "side_stream"}, "harness restarted", 88.0};
}
template <> inline timing_stats sample() { return {1.5, 1.6, 1.4, 2.0, 1.45, 1.8, 0.004, 100}; }
template <> inline profile_job sample() {
  return {"job-3", "ep-7", "/tasks/L1-19.py", "/work/ep-7", "/cache/m.so", "cuda",
          sample<judging_parameters>()};
}
template <> inline profile_result sample() {
  auto t = sample<timing_stats>();
  auto c = t;
  c.median_ms = 0.9;
  auto e = t;
  e.median_ms = 2.5;
  return {"job-3", e, t, c, "slot restarted"};
}
template <> inline evaluate_job sample() {
  return {"job-4", "ep-7", "/tasks/L1-19.py", "/work/ep-7", "/cache/m.so", "cpu",
          sample<judging_parameters>()};
}
template <> inline timing_quality sample() { return {"cached", 3600.5, 0.004, 0.006, 0.003, 2, true}; }
template <> inline reward_record sample() {
  return {"ep-7",    "job-3",       true,
          true,      {"decoy_kernel"}, 3,
          1.5,       1.2,           0.9,
          1.5 / 0.9, 1.2 / 0.9,     "late result",
          sample<timing_quality>()};
}
template <> inline trajectory_turn sample() {
  return {2, 900, {1, 2, 3}, {-0.5f, -0.25f, -0.125f}, {1, 1, 0}, "exit 0", 41,
          {sample_call(3)}};
}
template <> inline trajectory sample() {
  return {"ep-7", "L1-19", "openai", {sample<trajectory_turn>(), sample<trajectory_turn>()}, 2,
          termination::turn_budget};
}
template <> inline learner_update sample() {
  return {12, learner_phase::ppo, 13, 256, 0.5, 0.25, 0.125, 0.01, 1.2, 0.05, "/ckpt/13"};
}
template <> inline node_join sample() {
  return {"node-b", "10.0.0.2", 4242, 8, 16, {"H200 sm_90", "H200 sm_90"}};
}
template <> inline node_leave sample() { return {"node-b", "connection lost"}; }
template <> inline node_heartbeat sample() { return {"node-b", 1764547200000000000, 3, 7}; }
template <> inline node_challenge sample() { return {"6f1c0a", "9be2d4"}; }
template <> inline node_offer sample() { return {sample<node_join>(), "6f1c0a", "77aa01", 1000, 5000}; }
template <> inline shipped_file sample() {
  return {"module/cuda_agent_kernels.so", std::string(64, 'a'), std::string{"\x7f" "ELF\0\x01", 6}, true};
}
template <> inline file_bundle sample() { return {{sample<shipped_file>(), {"task/L1-19.py", "b0", "x = 1\n", false}}}; }
template <> inline job_requeued sample() { return {"job-3", "ep-7", "node-b", "node lost: connection timed out", 1}; }
template <> inline late_answer sample() { return {"job-3", "ep-7", "node-b"}; }
template <> inline node_load sample() { return {"node-b", 8, 3, 120, 2}; }
template <> inline pool_stats sample() { return {4, 3, 9, 2, 11, {sample<node_load>()}}; }
template <> inline policy_stats sample() { return {2, 5, 3, 7}; }
template <> inline rollout_status sample() { return {12, 4, 30, 1, {2, 6, 3, 1}}; }
template <> inline cluster_status sample() {
  return {{sample<node_join>()}, sample<pool_stats>(), sample<pool_stats>(), 12.5, 1, 2};
}

}  // namespace cuda_agent::testing
