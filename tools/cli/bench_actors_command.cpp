// `cuda-agent bench actors`: what the actor layer costs, on the default CAF scheduler.
//
// Part 1, messages between two actors: N round trips one at a time (request, then the next
// request when the answer arrives) and a one-way stream of N messages, each with bare atoms and
// with the message types the system really sends (tool_request/tool_result, recorded_message).
//
// Part 2, simulated episodes: E episodes of S steps all at once, through the real episode actor,
// the real job pools (credit, bounded queue, deadlines) and supervisors, with the policy, the
// tools, the compiler workers and the GPU slots replaced by stand-ins that answer after a fixed
// delay (bench_peers.hpp: delayed messages, no thread ever sleeps). A step is one policy turn
// that calls Read and then Bash `profile` (a build, then a profile job on a GPU slot); a last
// turn calls nothing and the episode ends with its final build and evaluation. The ideal time is
// the best any scheduler could do with these delays and slot counts; what the run takes beyond
// it, per step, is the cost of our actors and CAF's scheduling.
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <caf/all.hpp>

#include "actors/compiler_pool.hpp"
#include "actors/episode.hpp"
#include "actors/job_pool.hpp"
#include "actors/recorder.hpp"
#include "actors/supervisor.hpp"
#include "messages/atoms.hpp"
#include "messages/roles.hpp"
#include "tools/cli/bench_peers.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"

namespace cuda_agent::cli {
namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;


struct bench_options {
  int64_t messages = 100'000;
  int32_t episodes = 2000;
  int32_t steps = 10;
  int32_t policy_ms = 20;
  int32_t tool_ms = 5;
  int32_t compile_ms = 0;
  int32_t gpu_ms = 1;
  int32_t gpu_slots = 8;
  int32_t compiler_workers = 4;
};

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Runs `(go_atom, n)` on `actor` and waits for its answer; returns the seconds it took.
double time_go(caf::scoped_actor& self, const caf::actor& actor, int64_t n) {
  const auto start = clock_type::now();
  self->request(actor, caf::infinite, go_atom::value, n)
      .receive([](bool) {},
               [&](caf::error& e) { throw std::runtime_error{self->system().render(e)}; });
  return seconds_since(start);
}

// --- Part 1: two actors ----------------------------------------------------------------------

struct message_row {
  std::string what;
  int64_t messages = 0;
  double seconds = 0;
  double round_trip_us = not_measured;  // one-way rows have none
};

// One request in flight at a time: the next leaves when the previous answer is in.
template <class Request, class Reply>
void ping(caf::event_based_actor* self, const caf::actor& ponger, const Request& request,
          int64_t left, caf::response_promise done) {
  self->request(ponger, caf::infinite, request).then([=](const Reply&) mutable {
    if (left > 1)
      ping<Request, Reply>(self, ponger, request, left - 1, done);
    else
      done.deliver(true);
  });
}

template <class Request, class Reply>
message_row time_round_trips(caf::actor_system& system, std::string what, int64_t rounds,
                             Request request, Reply reply) {
  auto ponger = system.spawn([reply](caf::event_based_actor*) -> caf::behavior {
    return {[reply](const Request&) { return reply; }};
  });
  auto pinger = system.spawn([ponger, request](caf::event_based_actor* self) -> caf::behavior {
    return {[=](go_atom, int64_t n) -> caf::result<bool> {
      auto done = self->make_response_promise();
      ping<Request, Reply>(self, ponger, request, n, done);
      return done;
    }};
  });
  caf::scoped_actor self{system};
  const double seconds = time_go(self, pinger, rounds);
  self->send_exit(pinger, caf::exit_reason::user_shutdown);
  self->send_exit(ponger, caf::exit_reason::user_shutdown);
  return {std::move(what), 2 * rounds, seconds, seconds / static_cast<double>(rounds) * 1e6};
}

struct sink_state {
  int64_t received = 0;
  int64_t expected = -1;
  caf::response_promise done;
  static inline const char* name = "bench_sink";
};

// Counts what arrives; answers (expect_atom, n) once n messages are in.
caf::behavior sink(caf::stateful_actor<sink_state>* self) {
  auto arrived = [self] {
    auto& st = self->state;
    if (++st.received == st.expected) st.done.deliver(true);
  };
  return {
      [self](expect_atom, int64_t n) -> caf::result<bool> {
        auto& st = self->state;
        if (st.received >= n) return true;
        st.expected = n;
        st.done = self->make_response_promise();
        return st.done;
      },
      [arrived](tick_atom) { arrived(); },
      [arrived](record_atom, const recorded_message&) { arrived(); },
  };
}

// `send_one(self, sink)` sends one message of the stream; all n leave as fast as they can.
template <class SendOne>
message_row time_stream(caf::actor_system& system, std::string what, int64_t n, SendOne send_one) {
  auto receiver = system.spawn(sink);
  auto sender = system.spawn([receiver, send_one](caf::event_based_actor* self) -> caf::behavior {
    return {[=](go_atom, int64_t count) -> caf::result<bool> {
      auto done = self->make_response_promise();
      self->request(receiver, caf::infinite, expect_atom::value, count)
          .then([done](bool) mutable { done.deliver(true); });
      for (int64_t i = 0; i < count; ++i) send_one(self, receiver);
      return done;
    }};
  });
  caf::scoped_actor self{system};
  const double seconds = time_go(self, sender, n);
  self->send_exit(sender, caf::exit_reason::user_shutdown);
  self->send_exit(receiver, caf::exit_reason::user_shutdown);
  return {std::move(what), n, seconds};
}

std::vector<message_row> bench_messages(caf::actor_system& system, int64_t n) {
  const tool_call read{"read-3", "Read", R"({"file_path": "model_new.py"})", ""};
  tool_request request{"bench-00001", 3, read};
  tool_result result{"bench-00001", "read-3", "Read", "class ModelNew(nn.Module): ...\n", 0,
                     false, false, 1.5};
  const auto record = make_record(role::tools, role::episode, "bench-00001", result);
  std::vector<message_row> rows;
  rows.push_back(
      time_round_trips(system, "round trip, atoms", n, ping_atom::value, pong_atom::value));
  rows.push_back(time_round_trips(system, "round trip, tool_request/result", n, request, result));
  rows.push_back(time_stream(system, "one way, atoms", n, [](auto* self, const caf::actor& to) {
    self->send(to, tick_atom::value);
  }));
  rows.push_back(time_stream(system, "one way, recorded_message", n,
                             [record](auto* self, const caf::actor& to) {
                               self->send(to, record_atom::value, record);
                             }));
  return rows;
}

// --- Part 2: simulated episodes ----------------------------------------------------------------

// The shortest possible run: the largest of three lower bounds.
struct ideal_time {
  double critical_path_ms = 0;  // one episode's delays end to end
  double gpu_ms = 0;            // the busiest GPU slot running back to back
  double compiler_ms = 0;       // the busiest compiler worker running back to back
  double ms() const { return std::max({critical_path_ms, gpu_ms, compiler_ms}); }
  const char* bound() const {
    if (ms() == gpu_ms && gpu_ms > critical_path_ms) return "the GPU slots";
    if (ms() == compiler_ms && compiler_ms > critical_path_ms) return "the compiler workers";
    return "each episode's critical path";
  }
};

ideal_time ideal_of(const bench_options& o) {
  const double policy = o.policy_ms, tool = o.tool_ms, build = o.compile_ms, gpu = o.gpu_ms;
  const double steps = o.steps;
  // Each pool gets one job per step and one for the final evaluation, per episode.
  const int64_t jobs = static_cast<int64_t>(o.episodes) * (o.steps + 1);
  auto rounds = [jobs](int32_t slots) { return static_cast<double>((jobs + slots - 1) / slots); };
  ideal_time t;
  t.critical_path_ms = (steps + 1) * policy + steps * (tool + build + gpu) + build + gpu;
  // No GPU job can start before a first turn, its Read and its build; the last GPU job ends its
  // episode.
  t.gpu_ms = policy + tool + build + rounds(o.gpu_slots) * gpu;
  // No build can start before a first turn and its Read; each build is followed by a GPU job.
  t.compiler_ms = policy + tool + rounds(o.compiler_workers) * build + gpu;
  return t;
}

struct episode_run {
  double wall_s = 0;
  double cpu_s = 0;
  int32_t clean = 0;  // ended agent_done with reward 3, as the stand-ins script it
  int32_t failed = 0;
  std::string first_failure;
  int32_t gpu_peak_waiting = 0, gpu_rejected = 0;
  int32_t compiler_peak_waiting = 0, compiler_rejected = 0;
  uint64_t messages = 0, peer_messages = 0, records = 0;
};

// A pool as spawn_gpu_pool and spawn_compiler_pool build it (spawn_worker_pool); only the
// workers are stand-ins.
template <class... Jobs, class StartWorker>
worker_pool<elastic_pool_actor<Jobs...>> spawn_simulated_pool(caf::actor_system& system, const std::string& name,
                                 int32_t workers, std::size_t max_waiting, StartWorker start) {
  const worker_pool_limits limits{workers, max_waiting, std::chrono::minutes{10},
                                  std::chrono::minutes{10}};
  return spawn_worker_pool<Jobs...>(
      system, name, name, name + " workers", limits,
      [name](int32_t i) { return fmt::format("{}-{}", name, i); }, start);
}

struct driver_state {
  int32_t running = 0, clean = 0, failed = 0;
  std::string first_failure;
  caf::response_promise done;
  static inline const char* name = "bench_driver";
};
using driver_actor = caf::stateful_actor<driver_state>;

// Starts every episode at once, each with tools of its own; answers (go_atom, n) with
// (clean, failed, first failure) when the last has ended.
caf::behavior episode_driver(driver_actor* self, episode_config base, episode_peers shared,
                             milliseconds tool_delay, std::shared_ptr<peer_counters> counters) {
  auto settle = [self](const tools_actor& tools, bool clean, const std::string& why) {
    auto& st = self->state;
    self->send_exit(tools, caf::exit_reason::user_shutdown);
    if (clean) {
      ++st.clean;
    } else if (st.failed++ == 0) {
      st.first_failure = why;
    }
    if (--st.running == 0) st.done.deliver(st.clean, st.failed, st.first_failure);
  };
  return {[=](go_atom, int64_t episodes) -> caf::result<int32_t, int32_t, std::string> {
    auto& st = self->state;
    st.done = self->make_response_promise();
    st.running = static_cast<int32_t>(episodes);
    for (int64_t i = 0; i < episodes; ++i) {
      episode_config config = base;
      config.episode_id = fmt::format("bench-{:05}", i);
      episode_peers peers = shared;
      peers.tools = spawn_simulated_tools(self->system(), tool_delay, counters);
      auto episode = spawn_episode(self->system(), std::move(config), peers);
      self->request(episode, caf::infinite, start_atom::value)
          .then(
              [=, tools = peers.tools](episode_ended& ended, reward_record& verdict, trajectory&) {
                const bool clean = ended.reason == termination::agent_done && verdict.reward == 3;
                settle(tools, clean,
                       fmt::format("{} ended {} with reward {}: {}", ended.episode_id,
                                   to_string(ended.reason), verdict.reward,
                                   ended.error.empty() ? verdict.error : ended.error));
              },
              [=, tools = peers.tools](caf::error& error) {
                settle(tools, false, "an episode failed: " + self->system().render(error));
              });
    }
    return st.done;
  }};
}

episode_config bench_episode_config(const bench_options& o) {
  episode_config c;
  c.task.id = "bench-relu";
  c.task.level = 1;
  c.task.name = "ReLU";
  c.task.source = "bench";
  c.task.operators = {"torch.relu"};
  c.task.model_py =
      "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
      "        return torch.relu(x)\n\ndef get_inputs():\n    return [torch.randn(4096, 4096)]\n\n"
      "def get_init_inputs():\n    return []\n";
  c.policy_name = "simulated";
  c.workdir = "/bench/workdir";  // never touched: the tools and pools are stand-ins
  c.task_path = "/bench/task/model.py";
  c.system_prompt = std::string(5 * 1024, 's');  // about the size of SKILL.md
  c.max_turns = o.steps + 1;
  c.context_tokens = int64_t{1} << 40;  // budgets are not what is measured
  c.wall_clock = std::chrono::hours{1};
  c.policy_timeout = std::chrono::minutes{10};
  c.job_timeout = std::chrono::minutes{10};
  return c;
}

// A job pool's peak queue length and rejected jobs, from its pool_stats_atom answer.
template <class Pool>
std::pair<int32_t, int32_t> peak_and_rejected(caf::scoped_actor& self, const Pool& pool) {
  std::pair<int32_t, int32_t> result{-1, -1};
  self->request(pool, std::chrono::seconds{10}, pool_stats_atom::value)
      .receive([&](const pool_stats& s) { result = {s.peak_waiting, s.rejected}; },
               [&](caf::error& e) { throw std::runtime_error{self->system().render(e)}; });
  return result;
}

episode_run bench_episodes(caf::actor_system& system, const bench_options& o) {
  auto counters = std::make_shared<peer_counters>();
  // Each episode has at most one job waiting in each pool: a queue that holds them all never
  // rejects, so the run measures waiting, not refusals.
  const auto max_waiting = static_cast<std::size_t>(o.episodes);
  const milliseconds compile_delay{o.compile_ms}, gpu_delay{o.gpu_ms};
  auto compiler = spawn_simulated_pool<compile_job>(
      system, "compiler", o.compiler_workers, max_waiting,
      [compile_delay, counters](caf::actor_system& sys) {
        return spawn_simulated_compiler_worker(sys, compile_delay, counters);
      });
  auto gpu = spawn_simulated_pool<verify_job, profile_job, evaluate_job>(
      system, "gpu", o.gpu_slots, max_waiting, [gpu_delay, counters](caf::actor_system& sys) {
        return spawn_simulated_gpu_slot(sys, gpu_delay, counters);
      });
  episode_peers shared;
  shared.policy = spawn_simulated_policy(system, o.steps, milliseconds{o.policy_ms}, counters);
  shared.compiler = compiler.pool;
  shared.gpu = gpu.pool;
  shared.recorder = spawn_counting_recorder(system, counters);
  auto driver = system.spawn(episode_driver, bench_episode_config(o), shared,
                             milliseconds{o.tool_ms}, counters);

  episode_run run;
  caf::scoped_actor self{system};
  const double cpu_start = cpu_seconds();
  const auto start = clock_type::now();
  self->request(driver, caf::infinite, go_atom::value, static_cast<int64_t>(o.episodes))
      .receive(
          [&](int32_t clean, int32_t failed, std::string& first_failure) {
            run.clean = clean;
            run.failed = failed;
            run.first_failure = std::move(first_failure);
          },
          [&](caf::error& e) { throw std::runtime_error{system.render(e)}; });
  run.wall_s = seconds_since(start);
  run.cpu_s = cpu_seconds() - cpu_start;

  std::tie(run.gpu_peak_waiting, run.gpu_rejected) = peak_and_rejected(self, gpu.pool);
  std::tie(run.compiler_peak_waiting, run.compiler_rejected) =
      peak_and_rejected(self, compiler.pool);
  run.peer_messages = counters->handled.load();
  run.records = counters->recorded.load();
  run.messages = run.peer_messages + run.records;

  self->send_exit(driver, caf::exit_reason::user_shutdown);
  self->send_exit(shared.policy, caf::exit_reason::user_shutdown);
  self->send_exit(shared.recorder, caf::exit_reason::user_shutdown);
  stop_worker_pool(compiler);
  stop_worker_pool(gpu);
  return run;
}

// --- The command -------------------------------------------------------------------------------

void print_messages(const std::vector<message_row>& rows) {
  fmt::print("{:<34} {:>10} {:>9} {:>12} {:>14}\n", "messages between two actors", "messages",
             "seconds", "msgs/s", "round trip us");
  for (const auto& r : rows) {
    const auto round_trip =
        std::isnan(r.round_trip_us) ? std::string{"-"} : fmt::format("{:.2f}", r.round_trip_us);
    fmt::print("{:<34} {:>10} {:>9.3f} {:>12.0f} {:>14}\n", r.what, r.messages, r.seconds,
               r.messages / r.seconds, round_trip);
  }
}

void print_episodes(const bench_options& o, const episode_run& run) {
  const auto ideal = ideal_of(o);
  const int64_t steps = static_cast<int64_t>(o.episodes) * o.steps;
  const double per_step_us = 1e6 / static_cast<double>(steps);
  fmt::print(
      "simulated episodes: {} x {} steps; policy {} ms, tool {} ms, build {} ms on {} workers, "
      "gpu {} ms on {} slots\n",
      o.episodes, o.steps, o.policy_ms, o.tool_ms, o.compile_ms, o.compiler_workers, o.gpu_ms,
      o.gpu_slots);
  auto row = [](const char* what, const std::string& value, const std::string& note = {}) {
    fmt::print("  {:<26} {:>12}{}\n", what, value, note.empty() ? note : "  " + note);
  };
  row("episodes ended cleanly", fmt::format("{}", run.clean),
      run.failed ? fmt::format("{} failed", run.failed) : "all agent_done, reward 3");
  row("total steps", fmt::format("{}", steps));
  row("wall time s", fmt::format("{:.3f}", run.wall_s));
  row("ideal time s", fmt::format("{:.3f}", ideal.ms() / 1e3),
      fmt::format("bound by {} (critical path {:.3f}, gpu {:.3f}, compiler {:.3f})", ideal.bound(),
                  ideal.critical_path_ms / 1e3, ideal.gpu_ms / 1e3, ideal.compiler_ms / 1e3));
  row("overhead us/step", fmt::format("{:.1f}", (run.wall_s - ideal.ms() / 1e3) * per_step_us),
      "(wall - ideal) / steps");
  row("cpu us/step", fmt::format("{:.1f}", run.cpu_s * per_step_us),
      "user + system time of the process / steps");
  row("peak waiting, gpu pool", fmt::format("{}", run.gpu_peak_waiting),
      fmt::format("rejected {}", run.gpu_rejected));
  row("peak waiting, compiler", fmt::format("{}", run.compiler_peak_waiting),
      fmt::format("rejected {}", run.compiler_rejected));
  row("messages processed", fmt::format("{}", run.messages),
      fmt::format("{:.0f}/s: {} at the stand-ins (requests, timer wake-ups), {} records",
                  run.messages / run.wall_s, run.peer_messages, run.records));
}

int bench_actors(const invocation& inv, const bench_options& o) {
  caf::actor_system_config cfg;
  configure_actor_system(inv.config, cfg);
  caf::actor_system system{cfg};
  fmt::print("cuda-agent bench actors: CAF {}.{}.{}, default scheduler, {} worker threads\n\n",
             CAF_MAJOR_VERSION, CAF_MINOR_VERSION, CAF_PATCH_VERSION,
             system.scheduler().num_workers());
  std::cout << std::flush;
  print_messages(bench_messages(system, o.messages));
  fmt::print("\n");
  std::cout << std::flush;
  const auto run = bench_episodes(system, o);
  print_episodes(o, run);
  if (run.failed > 0)
    throw std::runtime_error(
        fmt::format("{} of {} simulated episodes did not end cleanly; first: {}", run.failed,
                    o.episodes, run.first_failure));
  return 0;
}

}  // namespace

void add_bench_actors_command(CLI::App& bench, invocation& inv) {
  auto o = std::make_shared<bench_options>();
  auto* cmd = bench.add_subcommand(
      "actors", "Actor message throughput, and thousands of simulated episodes through the real "
                "episode actor and job pools");
  cmd->add_option("--messages", o->messages, "Round trips, and one-way messages, per case")
      ->check(CLI::Range(int64_t{1}, int64_t{100'000'000}))
      ->capture_default_str();
  cmd->add_option("--episodes", o->episodes, "Simulated episodes, all running at once")
      ->check(CLI::Range(1, 100'000))
      ->capture_default_str();
  cmd->add_option("--steps", o->steps, "Tool-using turns per episode")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  const auto ms = CLI::Range(0, 60'000);
  cmd->add_option("--policy-ms", o->policy_ms, "Time the policy takes per turn")
      ->check(ms)
      ->capture_default_str();
  cmd->add_option("--tool-ms", o->tool_ms, "Time a tool call takes")
      ->check(ms)
      ->capture_default_str();
  cmd->add_option("--compile-ms", o->compile_ms, "Time a build takes")
      ->check(ms)
      ->capture_default_str();
  cmd->add_option("--gpu-ms", o->gpu_ms, "Time a GPU job (profile, evaluate) takes")
      ->check(ms)
      ->capture_default_str();
  cmd->add_option("--gpu-slots", o->gpu_slots, "GPU slots: GPU jobs that run at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--compiler-workers", o->compiler_workers, "Builds that run at once")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->callback([&inv, o] { inv.action = [&inv, o] { return bench_actors(inv, *o); }; });
}

}  // namespace cuda_agent::cli
