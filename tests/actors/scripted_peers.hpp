// Scripted stand-ins for the policy, the tools and the pools, for tests of the episode and the
// rollout manager's own logic; the real ones are exercised end to end in tests/pipeline. The
// recorder and the message log are real.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include <caf/all.hpp>

#include "actors/episode.hpp"
#include "actors/message_log/reader.hpp"
#include "actors/recorder.hpp"
#include "messages/registry.hpp"
#include "tests/actors/message_log/test_support.hpp"

namespace cuda_agent {
namespace scripted {

using namespace std::chrono_literals;
using message_log::testing::scratch_dir;

inline tool_call bash(std::string id, std::string command) {
  return {std::move(id), "Bash", R"({"command": ")" + command + R"("})"};
}

// A stand-in policy made of its handler of policy_request: the rest of the policy_actor
// interface (statistics, the expiry timer of its own queue) means nothing for a stand-in.
template <class OnRequest>
policy_actor::behavior_type policy_behavior(OnRequest on_request) {
  return {std::move(on_request), [](policy_stats_atom) { return policy_stats{}; },
          [](expire_atom, uint64_t) {}};
}

// The same for a pool: job handlers, and statistics and expiry that mean nothing here.
template <class Pool, class... OnJob>
typename Pool::behavior_type pool_behavior(OnJob... on_job) {
  return {std::move(on_job)..., [](pool_stats_atom) { return pool_stats{}; },
          [](expire_atom, uint64_t) {}};
}

// Answers turn t with script[t-1]; past the script, a call to Read forever.
inline policy_actor::behavior_type scripted_policy(policy_actor::pointer self,
                                                   std::vector<policy_response> script,
                                                   int32_t prompt_tokens,
                                                   std::chrono::milliseconds delay) {
  return policy_behavior([=](const policy_request& request) -> caf::result<policy_response> {
    policy_response response;
    if (request.turn <= static_cast<int32_t>(script.size())) response = script[request.turn - 1];
    else response.tool_calls = {{"c" + std::to_string(request.turn), "Read", R"({"file_path": "model.py"})"}};
    response.episode_id = request.episode_id;
    response.turn = request.turn;
    response.prompt_tokens = prompt_tokens * request.turn;  // the conversation grows
    response.completion_tokens = 10;
    response.token_ids = {request.turn, 7};
    response.logprobs = {-0.5f, -0.25f};
    if (delay.count() == 0) return response;
    auto promise = self->make_response_promise<policy_response>();
    std::thread([promise, response, delay]() mutable {
      std::this_thread::sleep_for(delay);
      promise.deliver(response);
    }).detach();
    return promise;
  });
}

struct peers_fixture : ::testing::Test {
  scratch_dir dir;
  caf::actor_system_config cfg;
  std::unique_ptr<caf::actor_system> system;
  std::atomic<int> tool_calls{0}, compiles{0}, evaluations{0};
  bool build_ok = true;
  recorder_actor recorder;
  tools_actor tools;
  compiler_pool_actor compiler;
  gpu_pool_actor gpu;

  void SetUp() override {
    register_message_types(cfg);
    add_recorder_types(cfg);
    system = std::make_unique<caf::actor_system>(cfg);
    message_log::writer_options options;
    options.dir = dir.log();
    recorder = spawn_recorder(*system, message_log::writer::open(options));
    tools = system->spawn([this](tools_actor::pointer) -> tools_actor::behavior_type {
      return {[this](const tool_request& r) {
        ++tool_calls;
        return tool_result{r.episode_id, r.call.call_id, r.call.tool, "ran " + r.call.tool, 0,
                           false, false, 1};
      }};
    });
    compiler = system->spawn([this](compiler_pool_actor::pointer) {
      return pool_behavior<compiler_pool_actor>([this](const compile_job& job) {
        ++compiles;
        compile_result r;
        r.job_id = job.job_id;
        r.ok = build_ok;
        r.module_path = "/cache/cuda_extension.so";
        r.diagnostics = build_ok ? "" : "kernels/k.cpp:3: error: expected ';'";
        return r;
      });
    });
    gpu = system->spawn([this](gpu_pool_actor::pointer) {
      return pool_behavior<gpu_pool_actor>(
          [](const verify_job& job) { return verify_result{job.job_id, true, {}, "", 5}; },
          [](const profile_job& job) {
            profile_result r;
            r.job_id = job.job_id;
            r.eager.median_ms = 2;
            r.compiled.median_ms = 1.5;
            r.candidate.median_ms = 1;
            return r;
          },
          [this](const evaluate_job& job) {
            ++evaluations;
            reward_record r;
            r.job_id = job.job_id;
            r.compiled = r.correct = true;
            r.reward = 3;
            return r;
          });
    });
  }

  void TearDown() override {
    // A handle kept past the system would keep the detached recorder alive: each is reset.
    auto stop = [](auto& actor) {
      caf::anon_send_exit(actor, caf::exit_reason::user_shutdown);
      actor = nullptr;
    };
    stop(recorder);
    stop(tools);
    stop(compiler);
    stop(gpu);
    system->await_all_actors_done();
    system.reset();
  }

  episode_config config() {
    episode_config c;
    c.episode_id = "ep-1";
    c.task.id = "smoke-add";
    c.task.model_py = "class Model: ...";
    c.policy_name = "scripted";
    c.workdir = dir.path() / "workdir";
    c.task_path = dir.path() / "task" / "model.py";
    c.system_prompt = "You write kernels.";
    c.max_turns = 10;
    return c;
  }

  episode_outcome run(episode_config c, policy_actor policy) {
    auto ep = spawn_episode(*system, std::move(c), {policy, tools, compiler, gpu, recorder});
    caf::scoped_actor self{*system};
    episode_outcome outcome;
    self->request(ep, 30s, start_atom::value)
        .receive([&](episode_ended& e, reward_record& r, trajectory& t) { outcome = {e, r, t}; },
                 [](caf::error& e) { FAIL() << caf::to_string(e); });
    self->request(recorder, 10s, flush_atom::value).receive([] {}, [](caf::error&) {});
    caf::anon_send_exit(policy, caf::exit_reason::user_shutdown);
    return outcome;
  }

  std::vector<std::string> recorded_types() {
    std::vector<std::string> types;
    for (const auto& rec : message_log::read_all(dir.log()).records)
      types.push_back(rec.sender + ">" + rec.type);
    return types;
  }
};

inline policy_response with_calls(std::vector<tool_call> calls) {
  policy_response r;
  r.content = "working";
  r.tool_calls = std::move(calls);
  return r;
}
inline policy_response done() {
  policy_response r;
  r.content = "ModelNew is ready.";
  r.finish_reason = "stop";
  return r;
}


}  // namespace scripted
}  // namespace cuda_agent
