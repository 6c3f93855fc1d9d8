#include "actors/episode.hpp"

#include <algorithm>
#include <cmath>
#include <deque>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/harness/judging.hpp"
#include "actors/recorder.hpp"
#include "actors/tools/tools.hpp"
#include "messages/roles.hpp"
#include "messages/tool_names.hpp"

namespace cuda_agent {
namespace {

constexpr auto tool_timeout = std::chrono::minutes{15};  // the tools enforce their own limits

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Rough tokens of text for servers that report no usage: about four characters a token.
int64_t estimate_tokens(const std::string& text) { return static_cast<int64_t>(text.size() / 4 + 1); }

struct episode_state {
  episode_config config;
  episode_peers peers;
  policy_request request;  // the whole conversation so far
  trajectory record;
  std::deque<tool_call> calls;  // of the current turn, not yet run
  int64_t context_tokens = 0;   // size of the conversation as the policy last saw it, plus since
  int64_t tokens_used = 0;      // prompt + completion over all turns
  int32_t jobs = 0;
  bool ending = false;  // a termination reason is set; late answers of the loop are ignored
  termination reason = termination::agent_done;
  std::string error;
  std::chrono::steady_clock::time_point started;
  caf::typed_response_promise<episode_ended, reward_record, trajectory> done;
  static inline const char* name = "episode";
};
using episode_self = episode_actor::stateful_pointer<episode_state>;

template <class Message>
void record(episode_self self, const std::string& sender, const std::string& receiver,
            const Message& message) {
  if (!self->state.peers.recorder) return;
  self->send(self->state.peers.recorder, record_atom::value,
             make_record(sender, receiver, self->state.config.episode_id, message));
}

std::string next_job_id(episode_self self) {
  return fmt::format("{}-job-{}", self->state.config.episode_id, ++self->state.jobs);
}

void ask_policy(episode_self self);
void run_next_call(episode_self self);
void end_loop(episode_self self, termination reason, std::string error = {});

std::string format_ms(double ms) {
  return std::isnan(ms) ? std::string{"n/a"} : fmt::format("{:.4f} ms", ms);
}

std::string describe_timing(const char* what, const timing_stats& t) {
  return fmt::format("{:<14} median {}  (p10 {}, p90 {}, cv {:.3f}, {} runs)\n", what,
                     format_ms(t.median_ms), format_ms(t.p10_ms), format_ms(t.p90_ms),
                     std::isnan(t.cv) ? 0.0 : t.cv, t.runs);
}

// --- Routed commands: build, verify and profile go to the pools, not the sandbox ---------------

void answer_call(episode_self self, const tool_call& call, tool_result result);

compile_job make_compile_job(episode_self self) {
  const auto& c = self->state.config;
  return {next_job_id(self), c.episode_id, c.workdir.string(), c.device, c.arch};
}

std::string build_failure_text(const compile_result& built) {
  return "build failed:\n" + (built.diagnostics.empty() ? built.error : built.diagnostics);
}

// Builds, then calls `next` with a successful result; a failed build answers the call itself.
template <class Next>
void build_then(episode_self self, const tool_call& call, Next next) {
  auto job = make_compile_job(self);
  record(self, role::episode, role::compiler, job);
  self->request(self->state.peers.compiler, self->state.config.job_timeout, job)
      .then(
          [=](compile_result& built) {
            if (self->state.ending) return;
            record(self, role::compiler, role::episode, built);
            if (!built.ok) {
              answer_call(self, call,
                          {self->state.config.episode_id, call.call_id, call.tool,
                           build_failure_text(built), 1, false, true, built.duration_ms});
              return;
            }
            next(built);
          },
          [=](caf::error& error) {
            if (self->state.ending) return;
            answer_call(self, call,
                        {self->state.config.episode_id, call.call_id, call.tool,
                         "build could not run (infrastructure, not your code): " +
                             self->system().render(error),
                         1, false, true, 0});
          });
}

void run_routed(episode_self self, const tool_call& call, const std::string& command) {
  const auto& c = self->state.config;
  if (command == "build") {
    build_then(self, call, [=](const compile_result& built) {
      // The same text for a cache hit: the build cache is shared by every episode, so a hit could
      // tell the agent that another episode built the same sources, and it is incidental to the
      // outcome (messages/incidental.hpp).
      answer_call(self, call,
                  {c.episode_id, call.call_id, call.tool, "build succeeded", 0, false, false,
                   built.duration_ms});
    });
    return;
  }
  if (command == "verify") {
    build_then(self, call, [=](const compile_result& built) {
      verify_job job{next_job_id(self), c.episode_id, c.task_path.string(), c.workdir.string(),
                     built.module_path, c.device, 0, c.judging};
      record(self, role::episode, role::gpu, job);
      self->request(self->state.peers.gpu, c.job_timeout, job)
          .then(
              [=](verify_result& verdict) {
                if (self->state.ending) return;
                record(self, role::gpu, role::episode, verdict);
                std::string text = verdict.correct ? "verify: correct\n" : "verify: INCORRECT\n";
                for (const auto& v : verdict.violations) text += "violation: " + v + "\n";
                if (!verdict.error.empty()) text += verdict.error + "\n";
                const bool passed = verdict.correct && verdict.violations.empty();
                answer_call(self, call,
                            {c.episode_id, call.call_id, call.tool, text, passed ? 0 : 1, false,
                             !passed, built.duration_ms + verdict.duration_ms});
              },
              [=](caf::error& error) {
                if (self->state.ending) return;
                answer_call(self, call,
                            {c.episode_id, call.call_id, call.tool,
                             "verify could not run (infrastructure, not your code): " +
                                 self->system().render(error),
                             1, false, true, 0});
              });
    });
    return;
  }
  // profile
  build_then(self, call, [=](const compile_result& built) {
    profile_job job{next_job_id(self), c.episode_id, c.task_path.string(), c.workdir.string(),
                    built.module_path, c.device, c.judging};
    record(self, role::episode, role::gpu, job);
    self->request(self->state.peers.gpu, c.job_timeout, job)
        .then(
            [=](profile_result& timing) {
              if (self->state.ending) return;
              record(self, role::gpu, role::episode, timing);
              std::string text = describe_timing("eager", timing.eager) +
                                 describe_timing("torch.compile", timing.compiled) +
                                 describe_timing("yours", timing.candidate);
              const double t = timing.candidate.median_ms;
              if (!std::isnan(t) && t > 0)
                text += fmt::format("speed-up: {:.3f}x over eager, {:.3f}x over torch.compile\n",
                                    timing.eager.median_ms / t, timing.compiled.median_ms / t);
              if (!timing.error.empty()) text += timing.error + "\n";
              answer_call(self, call,
                          {c.episode_id, call.call_id, call.tool, text,
                           timing.error.empty() ? 0 : 1, false, !timing.error.empty(),
                           built.duration_ms});
            },
            [=](caf::error& error) {
              if (self->state.ending) return;
              answer_call(self, call,
                          {c.episode_id, call.call_id, call.tool,
                           "profile could not run (infrastructure, not your code): " +
                               self->system().render(error),
                           1, false, true, 0});
            });
  });
}

// --- The loop -------------------------------------------------------------------------------

void answer_call(episode_self self, const tool_call& call, tool_result result) {
  auto& st = self->state;
  record(self, routed_command(call).empty() ? role::tools : role::router, role::episode, result);
  st.context_tokens += estimate_tokens(result.output);
  auto& turn = st.record.turns.back();
  if (!turn.observation.empty()) turn.observation += "\n";
  turn.observation += result.output;
  st.request.messages.push_back({"tool", std::move(result.output), call.call_id, {}});
  run_next_call(self);
}

void run_next_call(episode_self self) {
  auto& st = self->state;
  if (st.ending) return;
  if (st.calls.empty()) {
    // The turn is over: check the budgets before asking again.
    if (static_cast<int32_t>(st.record.turns.size()) >= st.config.max_turns)
      end_loop(self, termination::turn_budget);
    else if (st.context_tokens >= st.config.context_tokens)
      end_loop(self, termination::token_budget);
    else
      ask_policy(self);
    return;
  }
  auto call = std::move(st.calls.front());
  st.calls.pop_front();
  if (auto command = routed_command(call); !command.empty()) {
    record(self, role::episode, role::router, tool_request{st.config.episode_id, st.request.turn, call});
    run_routed(self, call, command);
    return;
  }
  tool_request request{st.config.episode_id, st.request.turn, call};
  record(self, role::episode, role::tools, request);
  self->request(st.peers.tools, tool_timeout, request)
      .then([=](tool_result& result) { if (!self->state.ending) answer_call(self, call, std::move(result)); },
            [=](caf::error& error) {
              if (self->state.ending) return;
              answer_call(self, call,
                          {self->state.config.episode_id, call.call_id, call.tool,
                           "the tool could not run: " + self->system().render(error), 1, false,
                           true, 0});
            });
}

void on_policy_response(episode_self self, policy_response& response) {
  auto& st = self->state;
  record(self, role::policy, role::episode, response);
  st.tokens_used += response.prompt_tokens + response.completion_tokens;
  if (response.prompt_tokens > 0)
    st.context_tokens = response.prompt_tokens + response.completion_tokens;
  else
    st.context_tokens += estimate_tokens(response.content) + 16 * response.tool_calls.size();
  trajectory_turn turn;
  turn.turn = response.turn;
  turn.prompt_token_count = response.prompt_tokens;
  // The prompt tokens new in this turn, then the sampled ones: only the latter are trained on.
  turn.token_ids = response.prompt_token_ids;
  turn.token_ids.insert(turn.token_ids.end(), response.token_ids.begin(), response.token_ids.end());
  turn.logprobs.assign(response.prompt_token_ids.size(), 0.0f);
  turn.logprobs.insert(turn.logprobs.end(), response.logprobs.begin(), response.logprobs.end());
  turn.loss_mask.assign(response.prompt_token_ids.size(), 0);
  turn.loss_mask.resize(turn.token_ids.size(), 1);
  turn.weight_version = response.weight_version;
  turn.tool_calls = response.tool_calls;
  st.record.turns.push_back(std::move(turn));
  st.request.messages.push_back({"assistant", response.content, "", response.tool_calls});
  if (response.tool_calls.empty()) {
    end_loop(self, termination::agent_done);
    return;
  }
  st.calls.assign(response.tool_calls.begin(), response.tool_calls.end());
  run_next_call(self);
}

void ask_policy(episode_self self) {
  auto& st = self->state;
  st.request.turn += 1;
  record(self, role::episode, role::policy, st.request);
  self->request(st.peers.policy, st.config.policy_timeout, st.request)
      .then(
          [=](policy_response& response) {
            if (!self->state.ending) on_policy_response(self, response);
          },
          [=](caf::error& error) {
            if (self->state.ending) return;
            end_loop(self, termination::infrastructure_failure,
                     "the policy did not answer: " + self->system().render(error));
          });
}

// --- The end: final evaluation, then the records -----------------------------------------------

void finish(episode_self self, reward_record verdict) {
  auto& st = self->state;
  verdict.episode_id = st.config.episode_id;
  record(self, role::episode, role::rollout, verdict);  // the episode's verdict, whoever produced it
  st.record.reward = verdict.reward;
  st.record.reason = st.reason;
  record(self, role::episode, role::learner, st.record);
  const std::chrono::duration<double, std::milli> wall = std::chrono::steady_clock::now() - st.started;
  episode_ended ended{st.config.episode_id, st.reason, static_cast<int32_t>(st.record.turns.size()),
                      st.tokens_used, verdict.reward, wall.count(), st.error};
  record(self, role::episode, role::rollout, ended);
  st.done.deliver(ended, verdict, st.record);
  self->quit();
}

reward_record failed_evaluation(std::string error, bool compiled = false) {
  reward_record verdict;
  verdict.compiled = compiled;
  verdict.reward = -1;
  verdict.error = std::move(error);
  return verdict;
}

void evaluate_final_candidate(episode_self self) {
  auto& st = self->state;
  const auto& c = st.config;
  if (st.reason == termination::infrastructure_failure) {
    finish(self, failed_evaluation("not evaluated: " + st.error));
    return;
  }
  auto job = make_compile_job(self);
  record(self, role::episode, role::compiler, job);
  self->request(st.peers.compiler, c.job_timeout, job)
      .then(
          [=](compile_result& built) {
            record(self, role::compiler, role::episode, built);
            if (!built.ok) {
              auto verdict = failed_evaluation(build_failure_text(built));
              verdict.job_id = built.job_id;
              finish(self, verdict);
              return;
            }
            evaluate_job final_job{next_job_id(self), c.episode_id, c.task_path.string(),
                                   c.workdir.string(), built.module_path, c.device, c.judging};
            record(self, role::episode, role::gpu, final_job);
            self->request(self->state.peers.gpu, c.job_timeout, final_job)
                .then([=](reward_record& verdict) {
                        record(self, role::gpu, role::episode, verdict);
                        finish(self, verdict);
                      },
                      [=](caf::error& error) {
                        self->state.reason = termination::infrastructure_failure;
                        self->state.error = "final evaluation failed: " + self->system().render(error);
                        finish(self, failed_evaluation(self->state.error, true));
                      });
          },
          [=](caf::error& error) {
            self->state.reason = termination::infrastructure_failure;
            self->state.error = "final build failed to run: " + self->system().render(error);
            finish(self, failed_evaluation(self->state.error));
          });
}

void end_loop(episode_self self, termination reason, std::string error) {
  auto& st = self->state;
  if (st.ending) return;
  st.ending = true;
  st.reason = reason;
  st.error = std::move(error);
  spdlog::debug("{}: loop ended ({}) after {} turns", st.config.episode_id, to_string(reason),
                st.record.turns.size());
  evaluate_final_candidate(self);
}

std::string task_prompt(const episode_config& c) {
  return fmt::format(
      "Task {}: write ModelNew in model_new.py, with the same constructor and outputs as Model in "
      "model.py (shown below), whose forward runs your own {} kernels. Your tools work in the "
      "directory that holds model.py, SKILL.md and kernels/; SKILL.md says how to build, verify "
      "and profile.\n\nmodel.py:\n```python\n{}\n```\n",
      c.task.id, c.device == "cuda" ? "CUDA" : "C++", c.task.model_py);
}

episode_actor::behavior_type episode(episode_self self, episode_config config, episode_peers peers) {
  auto& st = self->state;
  st.config = std::move(config);
  st.peers = std::move(peers);
  return {
      [=](start_atom) -> caf::result<episode_ended, reward_record, trajectory> {
        auto& st = self->state;
        const auto& c = st.config;
        st.started = std::chrono::steady_clock::now();
        st.done = self->make_response_promise<episode_ended, reward_record, trajectory>();
        st.record.episode_id = c.episode_id;
        st.record.task_id = c.task.id;
        st.record.policy = c.policy_name;
        record(self, role::rollout, role::episode, c.task);
        record(self, role::rollout, role::episode,
               episode_started{c.episode_id, c.task.id, c.policy_name, c.device, c.attempt,
                               c.weight_version, now_ns(), c.max_turns, c.context_tokens,
                               c.wall_clock.count(), c.workdir.string(), c.task_path.string(),
                               c.arch, c.judging});
        st.request.episode_id = c.episode_id;
        st.request.task_id = c.task.id;
        st.request.tools = tool_names();
        st.request.max_tokens = c.max_tokens_per_turn;
        st.request.temperature = c.temperature;
        st.request.top_p = c.top_p;
        st.request.messages.push_back({"system", c.system_prompt, "", {}});
        st.request.messages.push_back({"user", task_prompt(c), "", {}});
        st.context_tokens = estimate_tokens(c.system_prompt) + estimate_tokens(c.task.model_py);
        if (c.enforce_wall_clock) self->delayed_send(self, c.wall_clock, deadline_atom::value);
        ask_policy(self);
        return st.done;
      },
      [=](deadline_atom) {
        end_loop(self, termination::timeout,
                 fmt::format("wall-clock budget of {} s spent",
                             self->state.config.wall_clock.count() / 1000));
      },
  };
}

}  // namespace

void apply_episode_settings(const settings& config, episode_config& episode) {
  episode.max_turns = static_cast<int32_t>(config.get_int("episode.max_turns"));
  episode.context_tokens = config.get_int("episode.context_tokens");
  episode.wall_clock = std::chrono::seconds{config.get_int("episode.wall_clock_s")};
  episode.policy_timeout = std::chrono::seconds{config.get_int("episode.policy_timeout_s")};
  episode.job_timeout = std::chrono::seconds{config.get_int("episode.job_timeout_s")};
  episode.judging = harness::judging_from(config);
}

std::string routed_command(const tool_call& call) {
  if (call.tool != "Bash") return {};
  const auto args = nlohmann::json::parse(call.arguments_json, nullptr, /*allow_exceptions=*/false);
  if (!args.is_object() || !args.contains("command") || !args["command"].is_string()) return {};
  return tools::routed_command(args["command"].get_ref<const std::string&>()).value_or("");
}

episode_actor spawn_episode(caf::actor_system& system, episode_config config, episode_peers peers) {
  return system.spawn(episode, std::move(config), std::move(peers));
}

}  // namespace cuda_agent
