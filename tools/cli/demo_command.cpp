// `cuda-agent demo`: the main job until the rollout exists. Concurrent episode actors talk to a
// scripted policy actor through typed, registered messages; every message goes through the
// recorder into the message log; the log is then read back, verified record by record, and each
// payload decoded strictly as the type it claims to be.
//
// What is scripted is said on screen: the policy answers from a script, no tools run, and no
// candidate is evaluated (those actors are not built yet), so each episode ends with reward -1.
#include <chrono>
#include <iostream>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/message_log/reader.hpp"
#include "actors/recorder.hpp"
#include "messages/registry.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

using start_atom = caf::atom_constant<caf::atom("start")>;
constexpr auto request_timeout = std::chrono::seconds{30};

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Answers each request from a three-turn script: a plan, a kernel sketch, then "done".
caf::behavior scripted_policy(caf::event_based_actor* self, caf::actor recorder) {
  return {[=](const policy_request& request) {
    static const char* script[] = {
        "Plan: profile the reference, then fuse the element-wise operators into one kernel.",
        "Sketch: one thread per element, vectorised loads, launched from an extern \"C\" launcher.",
        "Done."};
    const int turn = std::min<int>(request.turn, 3);
    policy_response response;
    response.episode_id = request.episode_id;
    response.turn = request.turn;
    response.content = script[turn - 1];
    response.finish_reason = turn == 3 ? "stop" : "length";
    response.prompt_tokens = static_cast<int32_t>(request.messages.size() * 64);
    response.completion_tokens = static_cast<int32_t>(response.content.size() / 4);
    response.context_action = "none";
    self->send(recorder, record_atom::value,
               make_record("policy", "episode", request.episode_id, response));
    return response;
  }};
}

struct episode_state {
  std::string episode_id;
  task_spec task;
  caf::actor policy;
  caf::actor recorder;
  policy_request request;
  int64_t tokens = 0;
  std::chrono::steady_clock::time_point started;
  caf::response_promise done;
  static inline const char* name = "episode";
};
using episode_actor = caf::stateful_actor<episode_state>;

template <class Message>
void record(episode_actor* self, const std::string& receiver, const Message& message) {
  self->send(self->state.recorder, record_atom::value,
             make_record("episode", receiver, self->state.episode_id, message));
}

void finish(episode_actor* self, termination reason) {
  auto& st = self->state;
  const std::chrono::duration<double, std::milli> wall = std::chrono::steady_clock::now() - st.started;
  episode_ended ended{st.episode_id, reason, st.request.turn, st.tokens, -1, wall.count(),
                      "not evaluated: the harness is not built yet"};
  record(self, "rollout", ended);
  st.done.deliver(ended);
  self->quit();
}

// One turn: send the conversation to the policy, then either end or ask again.
void ask_policy(episode_actor* self) {
  auto& st = self->state;
  st.request.turn += 1;
  record(self, "policy", st.request);
  self->request(st.policy, request_timeout, st.request)
      .then(
          [=](const policy_response& response) {
            auto& st = self->state;
            st.tokens += response.prompt_tokens + response.completion_tokens;
            st.request.messages.push_back({"assistant", response.content, "", {}});
            if (response.finish_reason == "stop") finish(self, termination::agent_done);
            else ask_policy(self);
          },
          [=](caf::error&) { finish(self, termination::error); });
}

// One agent episode: asks the policy turn after turn until it says it is done.
caf::behavior episode(episode_actor* self, std::string episode_id, task_spec task,
                      caf::actor policy, caf::actor recorder) {
  auto& st = self->state;
  st.episode_id = std::move(episode_id);
  st.task = std::move(task);
  st.policy = std::move(policy);
  st.recorder = std::move(recorder);
  return {[=](start_atom) {
    auto& st = self->state;
    st.started = std::chrono::steady_clock::now();
    st.done = self->make_response_promise();
    st.request.episode_id = st.episode_id;
    st.request.messages.push_back({"user", "Write ModelNew for task " + st.task.id, "", {}});
    st.request.tools = {"Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "BashOutput",
                        "KillBash"};
    st.request.max_tokens = 4096;
    record(self, "rollout",
           episode_started{st.episode_id, st.task.id, "scripted", "cpu", 0, 0, now_ns(), 3, 0, 0, "", "", ""});
    ask_policy(self);
    return st.done;
  }};
}

int run_demo(const settings& config, const std::string& log_dir, int episodes) {
  auto options = log_writer_options(config, log_dir);
  auto writer = message_log::writer::open(options);
  const uint64_t first_seq = writer.next_seq();
  std::cout << "message log: " << options.dir.string() << " (next sequence number " << first_seq
            << ")\n"
            << "scripted policy; tools, builds and the harness are not built yet, so no kernel "
               "is written or evaluated\n\n";

  caf::actor_system_config cfg;
  register_message_types(cfg);
  add_recorder_types(cfg);
  if (const auto threads = config.get_int("actors.scheduler_threads"); threads > 0)
    cfg.set("scheduler.max-threads", static_cast<size_t>(threads));
  caf::actor_system system{cfg};
  {
    auto recorder = spawn_recorder(system, std::move(writer));
    auto policy = system.spawn(scripted_policy, recorder);
    caf::scoped_actor self{system};
    std::vector<caf::actor> running;
    for (int i = 1; i <= episodes; ++i) {
      task_spec task{"demo-task-" + std::to_string(i), 1, "fused add relu", "demo",
                     {"add", "relu"}, "", {}};
      running.push_back(
          system.spawn(episode, "demo-" + std::to_string(i), task, policy, recorder));
    }
    // Start every episode before waiting for any: they run concurrently.
    for (auto& ep : running) self->send(ep, start_atom::value);
    for (size_t i = 0; i < running.size(); ++i)
      self->receive(
          [](const episode_ended& ended) {
            std::cout << fmt::format("{:<8} ended: {} after {} turns, {} tokens, reward {}\n",
                                     ended.episode_id, to_string(ended.reason), ended.turns,
                                     ended.tokens, ended.reward);
          },
          caf::after(request_timeout) >> [] {
            throw std::runtime_error{"an episode did not end within 30 s"};
          });
    self->request(recorder, request_timeout, flush_atom::value)
        .receive([] {}, [](caf::error& e) { throw std::runtime_error{caf::to_string(e)}; });
    self->send_exit(recorder, caf::exit_reason::user_shutdown);
    self->send_exit(policy, caf::exit_reason::user_shutdown);
  }
  system.await_all_actors_done();

  // Read back what this run wrote, verifying every frame and decoding every payload.
  message_log::record_filter filter;
  auto log = message_log::read_all(options.dir, filter);
  if (log.status == message_log::read_status::corrupt)
    throw std::runtime_error{"message log is corrupt: " + log.problem.message()};
  std::map<std::string, int> per_type;
  uint64_t this_run = 0;
  for (const auto& rec : log.records) {
    if (rec.seq < first_seq) continue;
    ++this_run;
    check_payload(rec.type, rec.payload);
    ++per_type[rec.type];
  }
  std::cout << "\nread back " << this_run << " records of this run (" << log.records.size()
            << " in the log), every checksum verified and every payload decoded as its type:\n";
  for (const auto& [type, count] : per_type) std::cout << fmt::format("  {:<16} {}\n", type, count);
  std::cout << "\ninspect it with: cuda-agent log show " << options.dir.string()
            << " --episode demo-1 --payload\n";
  return 0;
}

}  // namespace

void add_demo_command(CLI::App& app, invocation& inv) {
  auto* demo = app.add_subcommand(
      "demo", "Run concurrent scripted episodes through actors into the message log, then read "
              "it back");
  auto log_dir = std::make_shared<std::string>();
  auto episodes = std::make_shared<int>(3);
  demo->add_option("--log", *log_dir, "Message log directory (default: setting log.dir)");
  demo->add_option("--episodes", *episodes, "Number of concurrent episodes")
      ->check(CLI::Range(1, 1000));
  demo->callback([&inv, log_dir, episodes] {
    inv.action = [&inv, log_dir, episodes] { return run_demo(inv.config, *log_dir, *episodes); };
  });
}

}  // namespace cuda_agent::cli
