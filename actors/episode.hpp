// The episode actor: one per agent episode. It prepares nothing itself (see workdir.hpp); given
// a prepared workdir and the actors it talks to, it runs the ReAct loop (ask the policy, run the
// tool calls it made, feed back the results), enforces the budgets (turns, context tokens, wall
// clock), ends with a termination reason, and then evaluates the final candidate through the
// compiler pool and the GPU pool: that milestone reward is the episode's reward.
//
// Every message that crosses its boundary is sent to the recorder in the order it happened, so
// the message log holds enough to replay the episode (actors/replay.hpp). Nothing in the loop
// reads a clock except the wall-clock budget, whose firing is an input like any other.
#pragma once

#include <chrono>
#include <filesystem>
#include <string>
#include <tuple>

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>

#include "config/settings.hpp"
#include "messages/atoms.hpp"
#include "messages/interfaces.hpp"
#include "messages/messages.hpp"

namespace cuda_agent {


// What a finished episode answers to (start_atom): how it ended, and the final evaluation.
using episode_outcome = std::tuple<episode_ended, reward_record, trajectory>;

struct episode_config {
  std::string episode_id;
  task_spec task;
  std::string policy_name;
  std::string device = "cpu";
  std::string arch;  // for builds on cuda; empty: detect
  int32_t attempt = 0;
  int64_t weight_version = 0;
  std::filesystem::path workdir;    // the agent's; model.py, kernels/, model_new.py
  std::filesystem::path task_path;  // the reference program, outside the workdir (locked)
  std::string system_prompt;        // SKILL.md
  int32_t max_turns = 200;
  int64_t context_tokens = 131072;
  std::chrono::milliseconds wall_clock{std::chrono::hours{2}};
  bool enforce_wall_clock = true;  // false in replay, where the recorded deadline is fed instead
  // Sampling asked of the policy; 0 and NaN leave it to the policy's own settings.
  int32_t max_tokens_per_turn = 0;
  double temperature = not_measured;
  double top_p = not_measured;
  std::chrono::milliseconds policy_timeout{std::chrono::minutes{10}};
  std::chrono::milliseconds job_timeout{std::chrono::minutes{30}};
  judging_parameters judging;  // carried by every verify, profile and evaluate job it sends
};

// Fills the budget and sampling fields from the episode.* settings and `judging` from the
// harness.* settings.
void apply_episode_settings(const settings& config, episode_config& episode);

struct episode_peers {
  policy_actor policy;
  tools_actor tools;  // this episode's sandboxed tools
  compiler_pool_actor compiler;
  gpu_pool_actor gpu;
  recorder_actor recorder;  // may be unset: nothing is recorded
};

// "build", "verify" or "profile" when a Bash call is one of the commands that SKILL.md names and
// the episode routes to the pools instead of the sandbox; empty otherwise.
std::string routed_command(const tool_call& call);

episode_actor spawn_episode(caf::actor_system& system, episode_config config, episode_peers peers);

}  // namespace cuda_agent
