// `cuda-agent rollout`: episodes over a corpus set through the whole pipeline (policy, sandboxed
// tools, compiler pool, GPU pool, locked harness), every message into the log, with a live
// progress line and a final table (run_summary.hpp's Table 1), also written as summary.json.
// `cuda-agent eval` is the same run laid out for evaluation: K attempts per task, levels chosen,
// everything under one --out folder.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <iostream>
#include <map>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "actors/cluster/cluster_settings.hpp"
#include "actors/cluster/coordinator.hpp"
#include "actors/recorder.hpp"
#include "actors/rollout_manager.hpp"
#include "messages/codec.hpp"
#include "messages/episode_id.hpp"
#include "messages/roles.hpp"
#include "tools/cli/cluster_client.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/kernelbench_candidate.hpp"
#include "tools/cli/pipeline.hpp"
#include "tools/cli/progress.hpp"
#include "tools/cli/report.hpp"
#include "tools/cli/run_summary.hpp"

namespace cuda_agent::cli {
namespace {

struct rollout_options {
  std::string corpus;  // empty: bench on cuda, smoke on cpu
  std::string policy;
  std::string device = "auto";
  int episodes = 0;  // 0: one per task
  int concurrency = 0;
  std::string log_dir;
  std::string run_id;
  std::vector<std::string> task_globs;  // empty: every task of the set
  std::vector<int> levels;              // empty: every level
  int attempts = 1;                     // episodes per task (with episodes 0)
  bool resume = false;
  std::string out_dir;  // eval: log, episodes and summary.json under it
  std::string kernelbench_dir;  // eval: judge these KernelBench-format generations (demo policy)
  std::string listen;           // HOST:PORT: be a coordinator that nodes join
  std::string token_file;
  int local_slots = -1;         // with --listen: GPU slots and compiler workers of our own
};

// Exit status of a run that finished but in which episodes ended in infrastructure failure:
// their tasks are left out of the table, which a script must not take for the whole answer.
constexpr int exit_infrastructure_failures = 4;

// What the log of run `run_id` already settled: every episode the agent ended (an end other than
// infrastructure_failure, which runs again), and the next free "-resumeN" number.
void load_settled(rollout_plan& plan, const std::filesystem::path& log_dir) {
  const auto log = read_rollout_log(log_dir, "--resume: ");
  std::map<std::string, std::pair<int32_t, int32_t>> ids;  // episode id -> (index, retry)
  std::map<std::string, reward_record> verdicts;
  std::map<std::string, std::string> task_ids;
  std::vector<std::pair<std::string, episode_ended>> ends;  // in log order
  for (const auto& r : log) {
    const auto parts = parse_episode_id(r.episode, plan.run_id);
    if (!parts) continue;
    ids[r.episode] = {parts->index, parts->retry};
    plan.resume = std::max(plan.resume, parts->resume);
    if (r.sender == role::rollout && r.type == "task_spec") task_ids[r.episode] = decode<task_spec>(r.payload).id;
    if (r.sender != role::episode || r.receiver != role::rollout) continue;
    if (r.type == "reward_record") verdicts[r.episode] = decode<reward_record>(r.payload);
    if (r.type == "episode_ended") ends.emplace_back(r.episode, decode<episode_ended>(r.payload));
  }
  if (ids.empty())
    throw usage_error{"--resume: the log at " + log_dir.string() + " holds no episode of run '" +
                      plan.run_id + "' (`cuda-agent log stats` lists what it holds)"};
  ++plan.resume;
  std::vector<bool> seen(static_cast<std::size_t>(plan.episodes), false);
  for (auto& [id, ended] : ends) {
    const auto [index, retry] = ids[id];
    if (ended.reason == termination::infrastructure_failure || index >= plan.episodes ||
        seen[static_cast<std::size_t>(index)])
      continue;
    const auto& task = plan.tasks[static_cast<std::size_t>(index) % plan.tasks.size()];
    if (task_ids.count(id) && task_ids[id] != task.id)
      throw usage_error{fmt::format("--resume: episode {} of the log worked on {}, but this set gives "
                                    "it {}: resume with the run's --corpus, --tasks and --episodes",
                                    id, task_ids[id], task.id)};
    seen[static_cast<std::size_t>(index)] = true;
    episode_summary s;
    s.episode_id = id;
    s.index = index;
    s.task = task;
    s.attempts = retry + 1;
    s.ended = std::move(ended);
    if (verdicts.count(id)) s.verdict = verdicts[id];
    plan.settled.push_back(std::move(s));
  }
}

int run_rollout(settings config, rollout_options o) {
  o.device = resolve_device(o.device);
  if (o.corpus.empty()) o.corpus = o.device == "cuda" ? "bench" : "smoke";
  auto tasks = load_tasks(config, o.corpus, o.task_globs);
  if (!o.levels.empty()) {
    tasks.erase(std::remove_if(tasks.begin(), tasks.end(),
                               [&](const task_spec& t) {
                                 return std::find(o.levels.begin(), o.levels.end(), t.level) == o.levels.end();
                               }),
                tasks.end());
    if (tasks.empty())
      throw usage_error{fmt::format("--levels {}: no task of {} has such a level", fmt::join(o.levels, ","),
                                    o.corpus)};
  }
  const std::time_t now = std::time(nullptr);
  const bool eval = !o.out_dir.empty();
  const auto run_id = !o.run_id.empty() ? o.run_id
                      : eval            ? std::string{"eval"}
                                        : fmt::format("r{:%Y%m%d-%H%M%S}", *std::localtime(&now));
  const std::filesystem::path run_dir =
      eval ? std::filesystem::path{o.out_dir} : std::filesystem::path{config.get_string("rollout.runs_dir")} / run_id;
  const std::filesystem::path log_dir = eval ? run_dir / "log"
                                        : o.log_dir.empty() ? std::filesystem::path{config.get_string("log.dir")}
                                                            : std::filesystem::path{o.log_dir};

  // KernelBench-format generations become demonstrations that write and judge them, so they go
  // through the same episode, build, harness and log as any policy's candidates.
  nlohmann::json kernelbench;
  if (!o.kernelbench_dir.empty()) {
    std::vector<std::string> ids;
    for (const auto& t : tasks) ids.push_back(t.id);
    const auto demos = run_dir / "kernelbench";
    kernelbench = write_kernelbench_demonstrations(config, o.kernelbench_dir, ids, demos, o.device);
    config.apply_override("policy.demo_dir=" + demos.string());
    std::cerr << fmt::format("kernelbench: {} of {} generations from {} converted (build: cuda-agent's, not "
                             "load_inline); the others count as candidates that did not compile\n",
                             kernelbench.value("converted", 0), ids.size(), o.kernelbench_dir);
  }

  rollout_plan plan;
  plan.run_id = run_id;
  plan.tasks = std::move(tasks);
  plan.episodes = o.episodes > 0 ? o.episodes : static_cast<int32_t>(plan.tasks.size()) * o.attempts;
  plan.concurrency = o.concurrency > 0 ? o.concurrency
                                       : static_cast<int32_t>(config.get_int("rollout.concurrency"));
  plan.retries = static_cast<int32_t>(config.get_int("rollout.retries"));
  plan.episodes_dir = run_dir / "episodes";
  plan.sources = default_workdir_sources();
  plan.base = base_episode_config(config, o.device, config.get_string("policy.backend"));
  if (o.resume) {
    if (!eval && (o.run_id.empty() || o.log_dir.empty()))
      throw usage_error{"--resume needs the --run-id and the --log of the run to resume"};
    load_settled(plan, log_dir);
    std::cerr << fmt::format("resuming run {}: {} of {} episodes settled in the log; the others run "
                             "again as {}-NNNN-resume{}\n",
                             run_id, plan.settled.size(), plan.episodes, run_id, plan.resume);
  }

  const bool coordinating = !o.listen.empty();
  std::string token;
  host_port listen_address;
  if (coordinating) {
    listen_address = parse_host_port("--listen", o.listen);
    if (o.token_file.empty()) throw usage_error{"--listen needs --token-file F: the secret nodes must prove"};
    token = read_token(o.token_file);
    if (o.local_slots >= 0) {
      config.apply_override(fmt::format("rollout.gpu_slots={}", o.local_slots));
      config.apply_override(fmt::format("rollout.compiler_workers={}", o.local_slots));
    }
  } else if (!o.token_file.empty() || o.local_slots >= 0) {
    throw usage_error{"--token-file and --local-slots go with --listen HOST:PORT"};
  }

  if (!coordinating || o.local_slots != 0) require_device(o.device);
  require_policy_server(config);
  check_tasks(config, plan.tasks);  // a broken task is refused here, never scored as its candidates' -1

  auto cluster_config = cluster::cluster_settings::from(config);
  // Absolute: shipped jobs' paths reach harness workers whose working directory is their own.
  cluster_config.work_dir = std::filesystem::absolute(cluster_config.work_dir);
  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  const auto tls = coordinating ? tls_of(config) : cluster_tls{};
  if (coordinating) configure_network(cluster_config, tls, cfg);
  caf::actor_system system{cfg};
  auto results = std::make_shared<rollout_results>();
  std::string run_error;  // thrown only once every actor is stopped: the system waits for them
  {
    auto node = start_node_services(system, config, o.device, log_dir, true, coordinating);
    coordinator_actor coordinator;
    if (coordinating) {
      cluster::coordinator_options options;
      options.token = token;
      options.compiler = node.compiler.pool;
      options.gpu = node.gpu.pool;
      options.recorder = node.recorder;
      options.shipping.store = cluster_config.work_dir / "coordinator" / "modules";
      options.shipping.max_bundle_bytes = cluster_config.max_bundle_bytes;
      options.shipping.job_timeout = std::chrono::seconds{config.get_int("episode.job_timeout_s")};
      options.heartbeat = cluster_config.heartbeat;
      options.connection_timeout = cluster_config.connection_timeout;
      coordinator = cluster::spawn_coordinator(system, std::move(options));
      uint16_t port = 0;
      try {
        port = publish_coordinator(system, coordinator, listen_address, tls);
      } catch (...) {
        caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
        node.stop();
        throw;
      }
      std::cerr << fmt::format("coordinator: listening on {}:{}{}; nodes join with `cuda-agent node --join {}:{} "
                               "--token-file F`\n",
                               listen_address.host, port, tls.enabled() ? " (TLS)" : "", listen_address.host, port);
      if (!tls.enabled() && listen_address.host != "127.0.0.1" && listen_address.host != "::1" &&
          listen_address.host != "localhost")
        std::cerr << "coordinator: warning: listening beyond loopback without TLS: nodes prove the token without "
                     "sending it, but jobs, files and results travel unencrypted; set cluster.tls_* or use a "
                     "private network\n";
    }
    rollout_services services{{}, node.compiler.pool, node.gpu.pool, node.recorder, node.make_tools,
                              node.policy_supervisor};
    auto manager = spawn_rollout_manager(system, plan, std::move(services), results);
    std::cerr << fmt::format("rollout {}: {} episodes over {} tasks of {}, {} at a time, policy {}, "
                             "device {}; log {}\n",
                             run_id, plan.episodes, plan.tasks.size(), o.corpus,
                             plan.concurrency, plan.base.policy_name, o.device, log_dir.string());
    caf::scoped_actor self{system};
    self->send(manager, run_atom::value);
    const bool tty = ::isatty(2);
    bool finished = false;
    int ticks = 0;
    progress_meter meter{static_cast<int64_t>(plan.settled.size())};  // rate and time left
    while (!finished) {
      self->receive([&](int32_t) { finished = true; },
                    [&](caf::error& e) {
                      run_error = system.render(e);
                      finished = true;
                    },
                    caf::after(std::chrono::seconds{1}) >> [] {});
      if (!finished && !tty && ++ticks % 10 != 0) continue;
      std::string progress;
      self->request(manager, std::chrono::seconds{5}, status_atom::value)
          .receive(
              [&](const rollout_status& s) {
                progress = meter.line(s.done, s.running, s.queued) +
                           fmt::format(" | reward -1:{} 1:{} 2:{} 3:{} | retried {}", s.rewards.at(0),
                                       s.rewards.at(1), s.rewards.at(2), s.rewards.at(3), s.retried);
              },
              [](caf::error&) {});
      self->request(node.gpu.pool, std::chrono::seconds{5}, pool_stats_atom::value)
          .receive([&](const pool_stats& s) {
                     progress += fmt::format(" | gpu slots {}/{} busy, {} waiting", s.busy, s.capacity, s.waiting);
                   },
                   [](caf::error&) {});
      std::cerr << (tty ? "\r" : "") << progress << (tty ? "\x1b[K" : "\n") << std::flush;
    }
    if (tty) std::cerr << "\n";
    if (node.recorder)
      self->request(node.recorder, std::chrono::seconds{30}, flush_atom::value).receive([] {}, [](caf::error&) {});
    self->send_exit(manager, caf::exit_reason::user_shutdown);
    if (coordinator) {
      // Tell the nodes the run is over (they exit), then stop taking joins.
      self->request(coordinator, std::chrono::seconds{10}, finish_atom::value,
                    run_error.empty() ? std::string{"the rollout finished"} : "the rollout failed: " + run_error)
          .receive([&](int32_t told) { std::cerr << fmt::format("coordinator: {} node(s) told the run is over\n", told); },
                   [](caf::error&) {});
      self->send_exit(coordinator, caf::exit_reason::user_shutdown);
    }
    node.stop();
  }
  system.await_all_actors_done();
  if (!run_error.empty()) throw std::runtime_error{"the rollout failed: " + run_error};
  std::lock_guard<std::mutex> lock{results->mutex};
  for (const auto& s : results->episodes)
    std::cout << fmt::format("{:<24} {:<28} {:<22} reward {:>2}  {}\n", s.episode_id, s.task.id,
                             to_string(s.ended.reason), s.verdict.reward,
                             s.verdict.error.substr(0, 100));
  const run_summary summary = summarize(results->episodes);
  print_summary(summary, std::cout);
  nlohmann::json record = summary_json(summary);
  record["run_id"] = run_id;
  record["corpus"] = o.corpus;
  record["policy"] = plan.base.policy_name;
  record["device"] = o.device;
  record["log"] = log_dir.string();
  if (!kernelbench.is_null()) {
    nlohmann::json not_converted = nlohmann::json::object();
    for (const auto& [id, task] : kernelbench["tasks"].items())
      if (!task.value("ok", false)) not_converted[id] = task.value("error", std::string{});
    record["candidates"] = {{"format", "kernelbench"},
                            {"generations", o.kernelbench_dir},
                            {"built_with", "cuda-agent build (load_inline replaced by the module built ahead)"},
                            {"converted", kernelbench["converted"]},
                            {"not_converted", not_converted}};
  }
  const auto summary_path = run_dir / "summary.json";
  write_summary(record, summary_path.string());
  std::cout << "summary: " << summary_path.string() << "\n";
  // The report beside the summary, from the same settled episodes; a run whose report cannot be
  // written still has its results, so that is a warning.
  const auto report_path = run_dir / "report.html";
  try {
    report_request report{log_dir, run_id, {}, &results->episodes,
                          {{"corpus", o.corpus}, {"policy", plan.base.policy_name}, {"device", o.device}}};
    write_report(report, report_path);
    std::cout << "report: " << report_path.string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "cuda-agent: warning: no report written: " << e.what() << "\n";
  }
  std::cout << "replay with: cuda-agent replay " << log_dir.string() << "\n";
  if (!summary.infrastructure_failures.empty()) {
    std::cerr << fmt::format("{} episode(s) ended in infrastructure failure, not by the agent, and are left out of "
                             "the table: {} (exit status {}; --resume runs them again)\n",
                             summary.infrastructure_failures.size(), fmt::join(summary.infrastructure_failures, ", "),
                             exit_infrastructure_failures);
    return exit_infrastructure_failures;
  }
  return 0;
}

// The options rollout and eval share.
void add_run_options(CLI::App* cmd, rollout_options* o) {
  cmd->add_option("--corpus", o->corpus, "Corpus set: a directory with index.json, or a set name "
                                         "under corpus/tasks (default: bench on cuda, smoke on cpu)");
  cmd->add_option("--policy", o->policy, "Policy backend: openai, torch, replay or demo (default: "
                                         "setting policy.backend)")
      ->check(CLI::IsMember({"openai", "torch", "replay", "demo"}));
  cmd->add_option("--device", o->device, "Where candidates run: cpu, cuda, or auto (cuda where a "
                                         "GPU is visible; the default)")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--tasks", o->task_globs, "Only the tasks whose ids match these globs "
                                            "(comma-separated or repeated), e.g. 'bench_0*'")
      ->delimiter(',');
  cmd->add_option("--levels", o->levels, "Only the tasks of these levels (comma-separated), e.g. 1,2,3")
      ->delimiter(',')
      ->check(CLI::Range(0, 1000));
  cmd->add_option("--concurrency", o->concurrency, "Episodes at a time (default: rollout.concurrency)")
      ->check(CLI::Range(1, 100000));
}


}  // namespace

void add_rollout_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand(
      "rollout", "Run agent episodes over a corpus set through the whole pipeline");
  auto o = std::make_shared<rollout_options>();
  add_run_options(cmd, o.get());
  cmd->add_option("--episodes", o->episodes, "Episodes to run (default: one per task)")
      ->check(CLI::Range(1, 10000000));
  cmd->add_option("--log", o->log_dir, "Message log directory (default: setting log.dir)");
  cmd->add_option("--run-id", o->run_id, "Name of this run (default: r<date>-<time>)");
  cmd->add_flag("--resume", o->resume, "Continue the run --run-id whose log is --log: episodes it "
                                       "settled count as they were, the others run again");
  cmd->add_option("--listen", o->listen, "Be the coordinator of nodes (`cuda-agent node --join`) on HOST:PORT "
                                         "(port 0: any free one, printed)");
  cmd->add_option("--token-file", o->token_file, "With --listen: file holding the token nodes must prove");
  cmd->add_option("--local-slots", o->local_slots, "With --listen: GPU slots and compiler workers of this "
                                                   "process (0: every one comes from nodes; default: settings)")
      ->check(CLI::Range(0, 1024));
  cmd->callback([&inv, o] {
    inv.action = [&inv, o] {
      if (!o->policy.empty()) inv.config.apply_override("policy.backend=" + o->policy);
      return run_rollout(inv.config, *o);
    };
  });
}

void add_eval_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand(
      "eval", "Evaluate a policy over a corpus set: the paper's Table 1 per level and overall, "
              "pass@k and fast_p, in DIR/summary.json");
  auto o = std::make_shared<rollout_options>();
  add_run_options(cmd, o.get());
  cmd->add_option("--attempts", o->attempts, "Episodes per task: pass@k and fast_p over them (default 1)")
      ->check(CLI::Range(1, 1000));
  cmd->add_option("--out", o->out_dir, "Where the run goes: DIR/log (its message log), DIR/episodes, "
                                       "DIR/summary.json (default: <rollout.runs_dir>/eval-<date>-<time>)");
  cmd->add_flag("--resume", o->resume, "Continue the evaluation in --out: episodes it settled count as "
                                       "they were, the others run again");
  cmd->add_option("--kernelbench-dir", o->kernelbench_dir,
                  "Judge KernelBench-format generations (DIR/<task>.py or DIR/<task>/model_new.py, ModelNew "
                  "with load_inline) instead of running a policy");
  cmd->callback([&inv, o] {
    inv.action = [&inv, o] {
      if (o->resume && o->out_dir.empty()) throw usage_error{"eval --resume needs the --out of the run to resume"};
      if (o->out_dir.empty()) {
        const std::time_t now = std::time(nullptr);
        o->out_dir = (std::filesystem::path{inv.config.get_string("rollout.runs_dir")} /
                      fmt::format("eval-{:%Y%m%d-%H%M%S}", *std::localtime(&now)))
                         .string();
      }
      if (!o->kernelbench_dir.empty()) {
        if (!o->policy.empty() && o->policy != "demo")
          throw usage_error{"--kernelbench-dir judges the generations themselves; leave out --policy " + o->policy};
        o->policy = "demo";
      }
      if (!o->policy.empty()) inv.config.apply_override("policy.backend=" + o->policy);
      return run_rollout(inv.config, *o);
    };
  });
}

}  // namespace cuda_agent::cli
