// `cuda-agent bench nodes`: how far the coordinator scales. This process is the coordinator (its
// GPU pool and membership, exactly as `rollout --listen` runs them); simulated nodes are separate
// `cuda-agent node --simulate-job-ms` processes joined over loopback TCP, whose slots sleep for
// each job instead of judging it. For each total slot count, every slot gets the same number of
// jobs at once; jobs per second against the ideal (slots / job time) shows where the coordinator
// saturates, and the coordinator's CPU time per job what each job costs it.
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster_settings.hpp"
#include "actors/cluster/coordinator.hpp"
#include "actors/cluster/node_auth.hpp"
#include "actors/job_pool.hpp"
#include "actors/node.hpp"
#include "actors/process/background_process.hpp"
#include "tools/cli/cluster_client.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

struct bench_nodes_options {
  std::vector<int> slots{1, 4, 16, 64, 256};
  int job_ms = 50;
  int jobs_per_slot = 20;
  int max_nodes = 4;
  bool json = false;
};

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) * 1e-6;
}

std::string self_binary() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

struct row {
  int slots = 0, nodes = 0, jobs = 0;
  double seconds = 0, jobs_per_s = 0, ideal = 0, cpu_us_per_job = 0;
};

row measure(const settings& config, const bench_nodes_options& o, int slots, const std::filesystem::path& token_file,
            const std::string& token) {
  const auto cluster_config = cluster::cluster_settings::from(config);
  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  configure_network(cluster_config, cluster_tls{}, cfg);  // loopback: plain TCP
  caf::actor_system system{cfg};
  const int jobs = slots * o.jobs_per_slot;
  job_pool_options pool_options;
  pool_options.open_to_nodes = true;
  pool_options.max_waiting = static_cast<std::size_t>(jobs) + 1;
  pool_options.name = "gpu pool";
  auto gpu = spawn_job_pool<verify_job, profile_job, evaluate_job>(system, pool_options);
  pool_options.name = "compiler pool";
  auto compiler = spawn_job_pool<compile_job>(system, pool_options);
  cluster::coordinator_options options;
  options.token = token;
  options.gpu = gpu;
  options.compiler = compiler;
  options.heartbeat = cluster_config.heartbeat;
  options.connection_timeout = cluster_config.connection_timeout;
  auto coordinator = cluster::spawn_coordinator(system, options);
  const auto port = publish_coordinator(system, coordinator, host_port{"127.0.0.1", 0}, cluster_tls{});

  const int nodes = std::min(o.max_nodes, slots);
  std::vector<std::unique_ptr<background_process>> children;
  std::map<std::string, std::string> env;
  for (const char* name : {"PATH", "HOME"})
    if (const char* value = std::getenv(name)) env[name] = value;
  for (int i = 0; i < nodes; ++i) {
    const int mine = slots / nodes + (i < slots % nodes ? 1 : 0);
    children.push_back(std::make_unique<background_process>(
        std::vector<std::string>{self_binary(), "--set", fmt::format("cluster.heartbeat_ms={}", cluster_config.heartbeat.count()),
                                 "--set", fmt::format("cluster.connection_timeout_ms={}", cluster_config.connection_timeout.count()),
                                 "node", "--join", fmt::format("127.0.0.1:{}", port), "--token-file", token_file.string(),
                                 "--simulate-job-ms", std::to_string(o.job_ms), "--slots", std::to_string(mine), "--name",
                                 fmt::format("sim-{}", i)},
        env, std::chrono::minutes{30}, 1 << 20));
  }
  caf::scoped_actor self{system};
  // Wait until every node's slots are in the pool.
  const auto joined_by = std::chrono::steady_clock::now() + std::chrono::seconds{60};
  while (true) {
    int32_t capacity = 0;
    self->request(gpu, std::chrono::seconds{5}, pool_stats_atom::value)
        .receive([&](const pool_stats& s) { capacity = s.capacity; }, [](caf::error&) {});
    if (capacity == slots) break;
    if (std::chrono::steady_clock::now() > joined_by) {
      std::string output;
      for (auto& c : children) output += c->take_output().output;
      throw std::runtime_error{fmt::format("bench nodes: only {} of {} slots joined in 60 s: {}", capacity, slots, output)};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds{50});
  }

  row r;
  r.slots = slots;
  r.nodes = nodes;
  r.jobs = jobs;
  const double cpu_before = cpu_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < jobs; ++i) {
    verify_job job;
    job.job_id = fmt::format("job-{}", i);
    job.episode_id = "bench";
    self->send(gpu, job);
  }
  int answered = 0, failed = 0;
  std::string first_error;
  while (answered + failed < jobs)
    self->receive([&](const verify_result&) { ++answered; },
                  [&](caf::error& e) {
                    if (first_error.empty()) first_error = system.render(e);
                    ++failed;
                  },
                  caf::after(std::chrono::seconds{120}) >> [&] { failed = jobs; first_error = "no answer in 120 s"; });
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double cpu = cpu_seconds() - cpu_before;
  if (failed > 0) throw std::runtime_error{fmt::format("bench nodes: {} of {} jobs failed: {}", failed, jobs, first_error)};
  r.jobs_per_s = jobs / r.seconds;
  r.ideal = slots * 1000.0 / o.job_ms;
  r.cpu_us_per_job = cpu * 1e6 / jobs;

  self->request(coordinator, std::chrono::seconds{10}, finish_atom::value, std::string{"the benchmark is over"})
      .receive([](int32_t) {}, [](caf::error&) {});
  for (auto& c : children)
    if (!c->wait_for(std::chrono::seconds{10})) c->kill();
  self->send_exit(coordinator, caf::exit_reason::user_shutdown);
  self->send_exit(gpu, caf::exit_reason::user_shutdown);
  self->send_exit(compiler, caf::exit_reason::user_shutdown);
  return r;
}

int run_bench_nodes(const settings& config, const bench_nodes_options& o) {
  spdlog::set_level(spdlog::level::warn);  // joins and losses of the simulated nodes are expected here
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("cuda-agent-bench-nodes-{}", ::getpid());
  std::filesystem::create_directories(dir);
  const auto token_file = dir / "token";
  const auto token = cluster::random_nonce();
  {
    std::ofstream out{token_file};
    out << token << "\n";
  }
  std::filesystem::permissions(token_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::vector<row> rows;
  try {
    for (const int slots : o.slots) {
      rows.push_back(measure(config, o, slots, token_file, token));
      const auto& r = rows.back();
      if (!o.json)
        std::cout << fmt::format("slots {:>4} on {} node(s): {:>6} jobs in {:6.2f} s = {:8.1f} jobs/s, ideal {:8.1f} "
                                 "({:5.1f}%), coordinator CPU {:6.1f} us/job\n",
                                 r.slots, r.nodes, r.jobs, r.seconds, r.jobs_per_s, r.ideal,
                                 100.0 * r.jobs_per_s / r.ideal, r.cpu_us_per_job)
                  << std::flush;
    }
  } catch (...) {
    std::filesystem::remove_all(dir);
    throw;
  }
  std::filesystem::remove_all(dir);
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows)
      out.push_back({{"slots", r.slots}, {"nodes", r.nodes}, {"jobs", r.jobs}, {"seconds", r.seconds},
                     {"jobs_per_s", r.jobs_per_s}, {"ideal_jobs_per_s", r.ideal},
                     {"efficiency", r.jobs_per_s / r.ideal}, {"coordinator_cpu_us_per_job", r.cpu_us_per_job},
                     {"job_ms", o.job_ms}});
    std::cout << out.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

void add_bench_nodes_command(CLI::App& bench, invocation& inv) {
  auto* cmd = bench.add_subcommand("nodes", "Coordinator scaling: jobs/s with simulated node processes over "
                                            "loopback as slots grow, and the coordinator's CPU per job");
  auto o = std::make_shared<bench_nodes_options>();
  cmd->add_option("--slots", o->slots, "Total simulated slots per measurement (comma-separated)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--job-ms", o->job_ms, "Milliseconds each simulated job sleeps (default 50)")->check(CLI::Range(1, 60000));
  cmd->add_option("--jobs-per-slot", o->jobs_per_slot, "Jobs per slot in each measurement (default 20)")
      ->check(CLI::Range(1, 100000));
  cmd->add_option("--max-nodes", o->max_nodes, "Node processes the slots are spread over (default 4)")
      ->check(CLI::Range(1, 256));
  cmd->add_flag("--json", o->json, "Print the rows as JSON");
  cmd->callback([&inv, o] { inv.action = [&inv, o] { return run_bench_nodes(inv.config, *o); }; });
}

}  // namespace cuda_agent::cli
