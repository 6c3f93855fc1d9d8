#include "tools/cli/pipeline.hpp"
#include "tools/cli/scratch_dir.hpp"

#include <fnmatch.h>
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "actors/message_log/reader.hpp"
#include "actors/policy/http_client.hpp"
#include "corpus/task_index.hpp"
#include "tools/cli/commands.hpp"
#ifdef CUDA_AGENT_HAVE_CUDA
#include "kernels/device_query.hpp"
#endif

namespace cuda_agent::cli {
namespace {

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error{"cannot read " + path.string()};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

#ifndef CUDA_AGENT_CORPUS_DIR
#define CUDA_AGENT_CORPUS_DIR "corpus"
#endif

std::filesystem::path corpus_root(const settings& config) {
  const std::string& configured = config.get_string("corpus.dir");
  const std::filesystem::path dir{configured.empty() ? std::string{CUDA_AGENT_CORPUS_DIR} : configured};
  if (!std::filesystem::is_directory(dir / "cuda_agent_corpus"))
    throw usage_error{"corpus.dir '" + dir.string() +
                      "' holds no cuda_agent_corpus package; set corpus.dir to the corpus/ folder "
                      "of a cuda-agent checkout"};
  return dir;
}

cpu_affinity::cpu_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return;  // restore() then does nothing
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus_.push_back(c);
}

void cpu_affinity::restore() const {
  if (cpus_.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int c : cpus_) CPU_SET(c, &set);
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    ::sched_setaffinity(tid, sizeof set, &set);  // a thread that ended meanwhile: nothing to do
  }
}

std::vector<task_spec> load_tasks(const settings& config, const std::string& set_name,
                                  const std::vector<std::string>& globs) {
  std::filesystem::path set_dir;
  std::vector<task_spec> tasks;
  try {
    set_dir = corpus::resolve_set(corpus_root(config), set_name);
    tasks = corpus::load_task_set(set_dir);
  } catch (const usage_error&) {
    throw;
  } catch (const std::exception& e) {  // an unknown set or a broken index: the command line's fault
    throw usage_error{e.what()};
  }
  if (tasks.empty()) throw usage_error{"corpus set " + set_dir.string() + " has no tasks"};
  if (globs.empty()) return tasks;
  std::vector<task_spec> chosen;
  for (auto& task : tasks)
    if (std::any_of(globs.begin(), globs.end(), [&](const std::string& glob) {
          return ::fnmatch(glob.c_str(), task.id.c_str(), 0) == 0;
        }))
      chosen.push_back(std::move(task));
  if (chosen.empty())
    throw usage_error{fmt::format("no task of set {} matches --tasks {} (`cuda-agent corpus list {}` "
                                  "lists its ids)",
                                  set_name, fmt::join(globs, ","), set_name)};
  return chosen;
}

// "auto": cuda where the CUDA runtime lists a GPU, else cpu.
std::string resolve_device(const std::string& device) {
  if (device != "auto") return device;
#ifdef CUDA_AGENT_HAVE_CUDA
  if (!query_gpus().devices.empty()) return "cuda";
#endif
  return "cpu";
}

void require_device(const std::string& device) {
  if (device != "cuda") return;
#ifdef CUDA_AGENT_HAVE_CUDA
  const auto gpus = query_gpus();
  if (!gpus.devices.empty()) return;
  throw usage_error{"--device cuda: no GPU is usable here (" + gpus.error + "); use --device cpu or auto"};
#else
  throw usage_error{"--device cuda: this cuda-agent was built without the CUDA toolkit; use --device cpu"};
#endif
}

void require_policy_server(const settings& config) {
  if (config.get_string("policy.backend") != "openai") return;
  const std::string url = config.get_string("policy.base_url");
  const std::string error = policy::http_client{}.connect_error(url, std::chrono::seconds{5});
  if (!error.empty())
    throw usage_error{"policy.base_url " + url + ": no server answers (" + error +
                      "); start the server (README: Pointing cuda-agent at a vLLM or SGLang server) or set policy.base_url"};
}

void check_tasks(const settings& config, const std::vector<task_spec>& tasks) {
  const scratch_dir dir{"cuda-agent-tasks"};
  harness::harness_process worker{harness::harness_settings::from(config), "cpu"};
  for (const auto& task : tasks) {
    const auto path = dir.path() / (std::to_string(&task - tasks.data()) + ".py");
    std::ofstream(path) << task.model_py;
    try {
      worker.check_task(path.string(), "cpu", /*reference=*/false);
    } catch (const harness::task_error& e) {
      // The scratch copy's name says nothing: the task is named by its id.
      std::string why = e.what();
      const std::string copy = path.string(), prefix = "task " + copy + ": ";
      if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
      for (auto at = why.find(copy); at != std::string::npos; at = why.find(copy, at))
        why.replace(at, copy.size(), "model.py");
      throw task_failure{"task " + task.id + " is broken (" + why + "); fix it or leave it out with --tasks (`cuda-agent corpus validate` checks a set)"};
    }
  }
}

workdir_sources default_workdir_sources() {
  const std::filesystem::path source{CUDA_AGENT_SOURCE_DIR};
  return {source / "kernels" / "workdir_template", source / "skills" / "SKILL.md"};
}

episode_config base_episode_config(const settings& config, const std::string& device,
                                   const std::string& policy_name) {
  episode_config base;
  apply_episode_settings(config, base);
  base.device = device;
  base.policy_name = policy_name;
  base.system_prompt = read_text(default_workdir_sources().skill_md);
  return base;
}

std::vector<message_log::record> read_rollout_log(const std::filesystem::path& dir,
                                                 const std::string& context) {
  if (!std::filesystem::is_directory(dir))
    throw usage_error{context + "no message log at " + dir.string() +
                      " (give the directory a rollout wrote with --log)"};
  auto log = message_log::read_all(dir);
  if (log.status == message_log::read_status::corrupt)
    throw usage_error{context + "the message log is corrupt: " + log.problem.message()};
  return std::move(log.records);
}

}  // namespace cuda_agent::cli
