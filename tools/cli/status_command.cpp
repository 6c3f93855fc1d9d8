// `cuda-agent status --coordinator HOST:PORT --token-file F`: the nodes of a running rollout, their
// slots, queue depths, jobs in flight and per-node throughput, as a table that refreshes (or once,
// with --once, for scripts).
#include <unistd.h>

#include <iostream>
#include <map>
#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/cluster/cluster_settings.hpp"
#include "actors/job_pool.hpp"
#include "actors/node.hpp"
#include "tools/cli/cluster_client.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

struct status_options {
  std::string coordinator;
  std::string token_file;
  bool once = false;
  double interval_s = 2;
};

struct node_row {
  std::string host, devices;
  node_load gpu, compiler;
};

// The table; `rates` gives each node's jobs per second since the previous table (empty: first).
std::string render(const host_port& address, const cluster_status& s, const std::map<std::string, double>& rates) {
  std::map<std::string, node_row> rows;
  std::vector<std::string> order{local_node};
  for (const auto& n : s.nodes) {
    order.push_back(n.node_id);
    rows[n.node_id].host = n.host;
    for (const auto& d : n.devices) rows[n.node_id].devices += (rows[n.node_id].devices.empty() ? "" : " ") + d;
  }
  for (const auto& load : s.gpu.nodes) rows[load.node_id].gpu = load;
  for (const auto& load : s.compiler.nodes) rows[load.node_id].compiler = load;
  std::string out = fmt::format("coordinator {}:{}  up {:.0f} s  nodes {}  lost {}  refused {}\n", address.host,
                                address.port, s.uptime_s, s.nodes.size(), s.lost, s.refused);
  out += fmt::format("{:<24} {:<16} {:>9} {:>7} {:>6} {:>9} {:>7} {:>6} {:>8}  {}\n", "node", "host", "gpu busy",
                     "done", "requeued", "cc busy", "done", "requeued", "jobs/s", "devices");
  for (const auto& id : order) {
    const auto it = rows.find(id);
    if (it == rows.end()) continue;
    const auto& r = it->second;
    const auto rate = rates.find(id);
    out += fmt::format("{:<24} {:<16} {:>4}/{:<4} {:>7} {:>6} {:>4}/{:<4} {:>7} {:>6} {:>8}  {}\n", id.substr(0, 24),
                       id == local_node ? "-" : r.host.substr(0, 16), r.gpu.busy, r.gpu.workers, r.gpu.done,
                       r.gpu.requeued, r.compiler.busy, r.compiler.workers, r.compiler.done, r.compiler.requeued,
                       rate == rates.end() ? std::string{"-"} : fmt::format("{:.2f}", rate->second), r.devices);
  }
  out += fmt::format("queues: gpu {} waiting (peak {}, rejected {}), compiler {} waiting (peak {}, rejected {})\n",
                     s.gpu.waiting, s.gpu.peak_waiting, s.gpu.rejected, s.compiler.waiting, s.compiler.peak_waiting,
                     s.compiler.rejected);
  return out;
}

int run_status(const settings& config, const status_options& o) {
  const auto address = parse_host_port("--coordinator", o.coordinator);
  const auto token = read_token(o.token_file);
  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  const auto tls = tls_of(config);
  configure_network(cluster::cluster_settings::from(config), tls, cfg);
  caf::actor_system system{cfg};
  std::string error;
  const auto coordinator = connect_coordinator(system, address, tls, error);
  if (!coordinator) {
    std::cerr << fmt::format("cuda-agent: error: no coordinator at {}:{} ({}); is `rollout --listen` running?\n",
                             address.host, address.port, error);
    return 1;
  }
  caf::scoped_actor self{system};
  const bool tty = ::isatty(1) && !o.once;
  std::map<std::string, int64_t> last_done;
  auto last_time = std::chrono::steady_clock::now();
  bool first = true;
  while (true) {
    cluster_status status;
    try {
      status = request_cluster_status(self, *coordinator, token);
    } catch (const std::exception& e) {
      if (!first) {
        std::cout << "the coordinator is gone (the run ended or it was stopped)\n";
        return 0;
      }
      std::cerr << "cuda-agent: error: " << e.what() << "\n";
      return 1;
    }
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - last_time).count();
    std::map<std::string, double> rates;
    std::map<std::string, int64_t> done;
    for (const auto* pool : {&status.gpu, &status.compiler})
      for (const auto& load : pool->nodes) done[load.node_id] += load.done;
    if (!first)
      for (const auto& [id, n] : done) rates[id] = elapsed > 0 ? static_cast<double>(n - last_done[id]) / elapsed : 0;
    last_done = done;
    last_time = now;
    std::cout << (tty ? "\x1b[H\x1b[2J" : "") << render(address, status, rates) << std::flush;
    if (o.once) return 0;
    first = false;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
  }
}

}  // namespace

void add_status_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("status", "The nodes, slots, queues and per-node throughput of a rollout "
                                           "started with --listen, as a table that refreshes");
  auto o = std::make_shared<status_options>();
  cmd->add_option("--coordinator", o->coordinator, "The rollout's HOST:PORT (its --listen)")->required();
  cmd->add_option("--token-file", o->token_file, "File holding the cluster's shared token")->required();
  cmd->add_flag("--once", o->once, "Print the table once and exit");
  cmd->add_option("--interval", o->interval_s, "Seconds between refreshes (default 2)")->check(CLI::Range(0.1, 3600.0));
  cmd->callback([&inv, o] { inv.action = [&inv, o] { return run_status(inv.config, *o); }; });
}

}  // namespace cuda_agent::cli
