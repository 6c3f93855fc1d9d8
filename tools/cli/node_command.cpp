// `cuda-agent node --join HOST:PORT --token-file F`: a process that offers its GPU profiler slots
// (or CPU harness workers) and compiler workers to a rollout's coordinator (`rollout --listen`),
// runs the jobs the coordinator ships to it, and exits when the coordinator says the run is over.
// A node that loses its coordinator (a partition, a restart) tries to join again for
// cluster.rejoin_s; SIGTERM or Ctrl-C leaves cleanly, and the coordinator requeues what it held.
//
// `--gpus 0,1,...` starts one node process per GPU (run_node_per_gpu).
//
// `--simulate-job-ms MS` (for `bench nodes`): the slots sleep MS per job instead of judging it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <set>

#include <atomic>
#include <iostream>
#include <mutex>
#include <thread>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/cluster_settings.hpp"
#include "actors/cluster/file_bundle.hpp"
#include "actors/cluster/node_auth.hpp"
#include "actors/cluster/node_endpoint.hpp"
#include "actors/gpu_pool.hpp"
#include "actors/node.hpp"
#include "messages/roles.hpp"
#include "tools/cli/cluster_client.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/pipeline.hpp"
#include "tools/cli/supervised_children.hpp"

namespace cuda_agent::cli {
namespace {

struct node_options {
  std::string join;
  std::string token_file;
  std::string gpus;
  int slots = 0;
  int compilers = -1;
  std::string device = "auto";
  std::string name;
  int simulate_ms = -1;
};

std::atomic<bool> stop_requested{false};
extern "C" void request_stop(int) { stop_requested = true; }

// The outcome the endpoint reports from its actor thread.
struct finish_signal {
  std::mutex mutex;
  bool finished = false;
  std::string reason;
};

// A profiler slot that sleeps instead of judging (bench nodes).
gpu_slot_actor::behavior_type simulated_slot(gpu_slot_actor::pointer, std::chrono::milliseconds job_time) {
  return {[job_time](const verify_job& job) {
            std::this_thread::sleep_for(job_time);
            verify_result r;
            r.job_id = job.job_id;
            r.correct = true;
            r.duration_ms = static_cast<double>(job_time.count());
            return r;
          },
          [job_time](const profile_job& job) {
            std::this_thread::sleep_for(job_time);
            profile_result r;
            r.job_id = job.job_id;
            return r;
          },
          [job_time](const evaluate_job& job) {
            std::this_thread::sleep_for(job_time);
            reward_record r;
            r.episode_id = job.episode_id;
            r.job_id = job.job_id;
            return r;
          }};
}

std::string default_node_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string name = cluster::path_component(host);
  return fmt::format("{}-{}", name.substr(0, 40), ::getpid());
}

// The GPU indices of --gpus ("0", "0,1,3"), each once.
std::vector<std::string> parse_gpus(const std::string& text) {
  std::vector<std::string> gpus;
  std::set<std::string> seen;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = std::min(text.find(',', start), text.size());
    const auto gpu = text.substr(start, comma - start);
    if (gpu.empty() || gpu.size() > 4 || gpu.find_first_not_of("0123456789") != std::string::npos)
      throw usage_error{fmt::format("--gpus {}: '{}' is not a GPU index; give indices like 0 or 0,1", text, gpu)};
    if (!seen.insert(gpu).second)
      throw usage_error{fmt::format("--gpus {}: GPU {} is listed twice", text, gpu)};
    gpus.push_back(gpu);
    start = comma + 1;
  }
  return gpus;
}

int run_node(settings config, node_options o);

// `--gpus 0,1,...`: one node process per GPU, forked before this process starts anything (no
// threads yet). Each serves its GPU alone (CUDA_VISIBLE_DEVICES) under the name <name>-gpu<N>,
// so that a GPU whose harness wedges takes down its own node, not the others; the first one
// offers the compiler workers. This process waits for them all, passes SIGTERM and SIGINT on,
// and exits with the worst status, naming each node that failed.
int run_node_per_gpu(const settings& config, const node_options& o, const std::vector<std::string>& gpus) {
  const auto base = o.name.empty() ? default_node_name() : o.name;
  supervised_children children;
  std::map<pid_t, std::string> names;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    node_options one = o;
    one.gpus = gpus[i];
    one.name = fmt::format("{}-gpu{}", base, gpus[i]);
    if (i > 0) one.compilers = 0;
    const pid_t pid = children.start();
    if (pid == 0) return run_node(config, one);  // the child: this GPU's node, through main's error handling
    names[pid] = one.name;
  }
  int worst = 0;
  while (const auto child = children.wait()) {
    const int status = child->status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    std::cerr << fmt::format("cuda-agent: error: node {} {}\n", names[child->pid], supervised_children::describe(status));
    worst = std::max(worst, WIFEXITED(status) ? WEXITSTATUS(status) : 1);
  }
  return worst;
}

int run_node(settings config, node_options o) {
  const auto address = parse_host_port("--join", o.join);
  const auto token = read_token(o.token_file);
  const bool simulated = o.simulate_ms >= 0;
  const auto device = simulated ? std::string{"cpu"} : resolve_device(o.device);
  if (!o.gpus.empty() && device != "cuda" && !simulated)
    throw usage_error{"--gpus needs --device cuda; a CPU node takes --slots N"};
  const auto gpus = parse_gpus(o.gpus.empty() ? std::string{"0"} : o.gpus);
  if (!simulated) require_device(device);  // before any fork: one error, not one per GPU
  if (gpus.size() > 1) return run_node_per_gpu(config, o, gpus);
  int32_t slots = 0;
  if (device == "cuda") {
    ::setenv("CUDA_VISIBLE_DEVICES", gpus.front().c_str(), 1);  // before any harness worker starts
    slots = 1;
  } else if (simulated && !o.gpus.empty()) {
    slots = 1;  // one simulated GPU slot per node process, as a real GPU node
  } else {
    slots = o.slots > 0 ? o.slots : std::max<int32_t>(1, static_cast<int32_t>(config.get_int("rollout.gpu_slots")));
  }
  const int32_t compilers =
      simulated ? 0 : o.compilers >= 0 ? o.compilers : static_cast<int32_t>(config.get_int("rollout.compiler_workers"));
  const auto name = o.name.empty() ? default_node_name() : o.name;

  auto cluster_config = cluster::cluster_settings::from(config);
  // Absolute: shipped jobs' paths reach harness workers whose working directory is their own.
  cluster_config.work_dir = std::filesystem::absolute(cluster_config.work_dir);
  caf::actor_system_config cfg;
  configure_actor_system(config, cfg);
  const auto tls = tls_of(config);
  configure_network(cluster_config, tls, cfg);
  caf::actor_system system{cfg};

  worker_pool_limits limits;
  limits.max_waiting = static_cast<std::size_t>(config.get_int("rollout.max_waiting_jobs"));
  limits.max_wait = limits.job_timeout = std::chrono::seconds{config.get_int("episode.job_timeout_s")};
  worker_pool<elastic_compiler_pool_actor> compiler;
  worker_pool<elastic_gpu_pool_actor> gpu;
  if (simulated) {
    limits.workers = slots;
    const auto job_time = std::chrono::milliseconds{o.simulate_ms};
    gpu = spawn_worker_pool<verify_job, profile_job, evaluate_job>(
        system, "gpu pool", role::gpu, "gpu slots", limits, [](int32_t i) { return fmt::format("sim-slot-{}", i); },
        [job_time](caf::actor_system& sys) -> gpu_slot_actor { return sys.spawn<caf::detached>(simulated_slot, job_time); });
  } else {
    if (compilers > 0) {
      limits.workers = compilers;
      compiler = spawn_compiler_pool(system, build::build_settings::from(config), limits);
    }
    const auto harness_config = harness::harness_settings::from(config);
    hold_timing_cpus(harness_config, device);
    limits.workers = slots;
    gpu = spawn_gpu_pool(system, harness_config, device, limits);
  }

  auto finish = std::make_shared<finish_signal>();
  cluster::node_endpoint_options endpoint_options;
  endpoint_options.work_dir = cluster_config.work_dir / ("node-" + cluster::path_component(name));
  endpoint_options.max_bundle_bytes = cluster_config.max_bundle_bytes;
  endpoint_options.job_timeout = limits.job_timeout;
  endpoint_options.compiler = compiler.pool;
  endpoint_options.gpu = gpu.pool;
  endpoint_options.on_finish = [finish](const std::string& reason) {
    std::lock_guard<std::mutex> lock{finish->mutex};
    finish->finished = true;
    finish->reason = reason;
  };
  const auto endpoint = cluster::spawn_node_endpoint(system, endpoint_options);
  auto finished = [&] {
    std::lock_guard<std::mutex> lock{finish->mutex};
    return finish->finished;
  };

  ::signal(SIGTERM, request_stop);
  ::signal(SIGINT, request_stop);
  int status = 0;
  std::string failure;
  auto deadline = std::chrono::steady_clock::now() + cluster_config.rejoin;
  bool ever_joined = false;
  while (!finished() && !stop_requested) {
    std::string error;
    const auto coordinator = connect_coordinator(system, address, tls, error);
    if (!coordinator) {
      if (std::chrono::steady_clock::now() >= deadline) {
        failure = fmt::format("node {}: cannot reach the coordinator at {}:{} ({}) for {} s (cluster.rejoin_s)", name,
                              address.host, address.port, error, cluster_config.rejoin.count());
        status = 1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds{500});
      continue;
    }
    caf::scoped_actor self{system};
    node_offer offer;
    offer.node.node_id = name;
    char host[256] = {};
    ::gethostname(host, sizeof host - 1);
    offer.node.host = host;
    offer.node.gpu_slots = slots;
    offer.node.compiler_workers = compilers;
    offer.node.devices = {simulated ? fmt::format("simulated {} ms", o.simulate_ms) : device};
    if (!o.gpus.empty()) offer.node.devices.front() += " (GPU " + gpus.front() + ")";
    offer.heartbeat_ms = cluster_config.heartbeat.count();
    offer.connection_timeout_ms = cluster_config.connection_timeout.count();
    std::string refused, retry;
    try {
      offer.nonce = greet_coordinator(self, *coordinator, token, name);
      offer.proof = cluster::node_proof(token, offer.nonce, name);
      self->request(*coordinator, std::chrono::seconds{30}, join_atom::value, offer, endpoint)
          .receive([&](const std::string& welcome) { std::cerr << fmt::format("node {}: {}\n", name, welcome); },
                   [&](caf::error& e) {
                     const auto text = system.render(e);
                     (text.find("refused") != std::string::npos ? refused : retry) = text;
                   });
    } catch (const untrusted_coordinator& e) {
      // The coordinator could not prove the token: never serve it, and say why (it logs the
      // refusal; our proof is not sent to a peer that did not prove itself).
      refused = e.what();
      self->send(*coordinator, leave_atom::value, name,
                 std::string{"the tokens differ (the coordinator's proof did not match the node's --token-file)"});
      std::this_thread::sleep_for(std::chrono::milliseconds{200});  // let the message leave
    } catch (const std::exception& e) {
      retry = e.what();
    }
    if (!refused.empty()) {
      failure = fmt::format("node {}: the coordinator at {}:{} refused it: {}", name, address.host, address.port, refused);
      status = 2;
      break;
    }
    if (!retry.empty()) {
      spdlog::warn("node {}: join failed ({}); trying again", name, retry);
      std::this_thread::sleep_for(std::chrono::milliseconds{500});
      continue;
    }
    ever_joined = true;
    self->monitor(*coordinator);
    bool lost = false;
    while (!lost && !finished() && !stop_requested)
      self->receive([&](caf::down_msg& down) {
                      lost = true;
                      std::cerr << fmt::format("node {}: lost the coordinator ({}); trying to join again for {} s\n",
                                               name, system.render(down.reason), cluster_config.rejoin.count());
                    },
                    caf::after(std::chrono::milliseconds{200}) >> [] {});
    if (stop_requested && !lost) {
      self->send(*coordinator, leave_atom::value, name, std::string{"stopped by a signal"});
      std::this_thread::sleep_for(std::chrono::milliseconds{200});  // let the message leave
    }
    deadline = std::chrono::steady_clock::now() + cluster_config.rejoin;
  }
  if (finished()) {
    std::lock_guard<std::mutex> lock{finish->mutex};
    std::cerr << fmt::format("node {}: the coordinator ended the run ({})\n", name, finish->reason);
  } else if (stop_requested) {
    std::cerr << fmt::format("node {}: stopped{}\n", name, ever_joined ? "; left the coordinator" : "");
  }
  caf::anon_send_exit(endpoint, caf::exit_reason::user_shutdown);
  if (compiler.pool) stop_worker_pool(compiler);
  if (gpu.pool) stop_worker_pool(gpu);
  if (!failure.empty()) {
    std::cerr << "cuda-agent: error: " << failure << "\n";
  }
  return status;
}

}  // namespace

void add_node_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand("node", "Offer this machine's GPU slots and compiler workers to a rollout "
                                         "started with --listen; exits when that rollout ends");
  auto o = std::make_shared<node_options>();
  cmd->add_option("--join", o->join, "The coordinator's HOST:PORT (the rollout's --listen)")->required();
  cmd->add_option("--token-file", o->token_file, "File holding the cluster's shared token (never on the "
                                                 "command line)")
      ->required();
  cmd->add_option("--device", o->device, "Where candidates run: cpu, cuda, or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->add_option("--gpus", o->gpus, "The GPUs this node serves, e.g. 0 or 0,1 (with --device cuda; default 0): one "
                                     "node process per GPU, named <name>-gpu<N>");
  cmd->add_option("--slots", o->slots, "CPU harness workers on a CPU node (default: rollout.gpu_slots)")
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--compilers", o->compilers, "Compiler workers offered (default: rollout.compiler_workers)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--name", o->name, "This node's name in the coordinator's log (default: <host>-<pid>)");
  cmd->add_option("--simulate-job-ms", o->simulate_ms, "Slots sleep this long per job instead of judging it "
                                                       "(bench nodes)")
      ->check(CLI::Range(0, 3600000))
      ->group("");
  cmd->callback([&inv, o] { inv.action = [&inv, o] { return run_node(inv.config, *o); }; });
}

}  // namespace cuda_agent::cli
