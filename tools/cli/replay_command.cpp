// `cuda-agent replay LOG`: replays recorded episodes. Hermetic by default (every answer read back
// from the log; the replayed episode must send exactly the recorded messages); with --live the
// policy's answers come from the log while tools, builds and GPU jobs run again for real in a
// fresh directory, and every message whose content differs is counted.
#include <ctime>
#include <iostream>

#include <caf/all.hpp>
#include <fmt/chrono.h>
#include <fmt/format.h>

#include "actors/replay.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"

namespace cuda_agent::cli {
namespace {

struct replay_options {
  std::string log_dir;
  std::string episode;
  bool live = false;
};

void print_report(const replay_report& r) {
  if (r.identical && r.incomplete) {
    std::cout << fmt::format("{:<28} incomplete in the log (the run stopped before it ended): "
                             "its {} recorded messages replayed identically\n",
                             r.episode_id, r.recorded);
    return;
  }
  if (r.identical) {
    std::cout << fmt::format("{:<28} identical ({} messages)\n", r.episode_id, r.recorded);
    return;
  }
  if (!r.error.empty() && r.differing == 0) {
    std::cout << fmt::format("{:<28} could not be replayed: {}\n", r.episode_id, r.error);
    return;
  }
  std::cout << fmt::format("{:<28} diverged at message {} of {} ({} differ{})\n", r.episode_id,
                           r.first_divergence + 1, r.recorded, r.differing,
                           r.error.empty() ? "" : "; " + r.error)
            << "    recorded: " << r.expected << "\n"
            << "    replayed: " << r.actual << "\n";
}

int run_replay(const settings& config, const replay_options& o) {
  const auto log = read_rollout_log(o.log_dir, "");
  auto episodes = recorded_episodes(log);
  if (!o.episode.empty()) {
    if (std::find(episodes.begin(), episodes.end(), o.episode) == episodes.end())
      throw usage_error{"episode '" + o.episode + "' is not in " + o.log_dir +
                        " (`cuda-agent log stats` lists what it holds)"};
    episodes = {o.episode};
  }
  if (episodes.empty()) throw usage_error{"the log at " + o.log_dir + " holds no episodes"};

  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  caf::actor_system system{cfg};
  int diverged = 0, incomplete = 0;
  {
    node_services node;
    const std::time_t now = std::time(nullptr);
    const auto replay_dir = std::filesystem::path{config.get_string("rollout.runs_dir")} /
                            fmt::format("replay-{:%Y%m%d-%H%M%S}", *std::localtime(&now));
    for (const auto& id : episodes) {
      const auto records = episode_records(log, id);
      replay_report report;
      if (!o.live) {
        report = replay_hermetic(system, records);
      } else {
        const auto recorded = recorded_config(records);
        auto fresh = recorded;
        if (!node.compiler.pool) node = start_node_services(system, config, fresh.device, {}, false);
        const auto paths = prepare_episode_dir(replay_dir, id, fresh.task, default_workdir_sources());
        fresh.workdir = paths.workdir;
        fresh.task_path = paths.task_path;
        apply_episode_settings(config, fresh);
        // Judged as recorded, whatever today's harness.* settings say.
        fresh.wall_clock = recorded.wall_clock;
        fresh.judging = recorded.judging;
        report = replay_live(system, records, fresh, [&](const episode_config& c) {
          return episode_peers{{}, node.make_tools(c), node.compiler.pool, node.gpu.pool, {}};
        });
      }
      print_report(report);
      diverged += !report.identical;
      incomplete += report.identical && report.incomplete;
    }
    node.stop();
  }
  system.await_all_actors_done();
  std::cout << fmt::format("{} of {} episodes {}{}\n", episodes.size() - diverged, episodes.size(),
                           o.live ? "reproduced live" : "replayed identically",
                           incomplete ? fmt::format(" ({} incomplete in the log, as far as recorded)",
                                                    incomplete)
                                      : "");
  return diverged == 0 ? 0 : 1;
}

}  // namespace

void add_replay_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("replay", "Replay recorded episodes from a message log and report "
                                           "where they diverge");
  auto o = std::make_shared<replay_options>();
  cmd->add_option("LOG", o->log_dir, "Message log directory")->required();
  cmd->add_option("--episode", o->episode, "Replay only this episode");
  cmd->add_flag("--live", o->live, "Re-run tools, builds and GPU jobs for real; only the policy's "
                                   "answers come from the log");
  cmd->callback([&inv, o] { inv.action = [&inv, o] { return run_replay(inv.config, *o); }; });
}

}  // namespace cuda_agent::cli
