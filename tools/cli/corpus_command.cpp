// `cuda-agent corpus list|validate|import|synth`: the task corpus (corpus/README.md).
//
// `list` reads a set's index here (the same reader the rollout manager uses). The others run the
// Python package corpus/cuda_agent_corpus with the configured harness.python, which has torch
// and pyarrow; its progress lines are shown on standard error while it runs (it appends them to
// a file this command follows), and its result is printed when it ends.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "actors/process/subprocess.hpp"
#include "corpus/task_index.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/corpus_python.hpp"
#include "tools/cli/pipeline.hpp"
#include "tools/cli/progress.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;

// How often a status is printed as a plain line when standard error is not a terminal.
constexpr std::chrono::seconds plain_status_interval{5};

// Prints the lines appended to `path` since the last call: status records (progress.hpp) as
// the one status line, redrawn in place on a terminal; every other line as it is, above it.
class progress_follower {
 public:
  explicit progress_follower(fs::path path)
      : path_(std::move(path)), display_(std::cerr, ::isatty(2) != 0, plain_status_interval) {}
  void drain() {
    std::ifstream in(path_);
    if (!in) return;
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // a partial last line: read it whole next time
      offset_ += line.size() + 1;
      if (const auto status = render_status_record(line))
        display_.status("[corpus] " + *status);
      else
        display_.line("[corpus] " + line);
    }
  }
  void finish() { display_.finish(); }

 private:
  fs::path path_;
  std::size_t offset_ = 0;
  status_display display_;
};

// Runs `python -m cuda_agent_corpus ARGS...`, showing its progress; returns its exit status
// after printing its standard output. Status 2 from the package is bad usage: its one-line
// reason becomes a usage_error.
int run_corpus_python(const settings& config, const std::vector<std::string>& args) {
  const fs::path progress_path =
      fs::temp_directory_path() / fmt::format("cuda-agent-corpus-{}.progress", ::getpid());
  fs::remove(progress_path);

  std::vector<std::string> package_args{"--progress-file", progress_path.string()};
  package_args.insert(package_args.end(), args.begin(), args.end());
  const corpus_python_call call = corpus_python(config, package_args, std::size_t{64} << 20);
  const auto& argv = call.argv;

  spdlog::debug("corpus: running {}", fmt::join(argv, " "));
  subprocess_result result;
  std::exception_ptr failure;
  std::atomic<bool> done{false};
  std::thread child([&] {
    try {
      result = run_corpus_python_call(call);
    } catch (...) {
      failure = std::current_exception();
    }
    done = true;
  });
  progress_follower follower{progress_path};
  while (!done) {
    follower.drain();
    std::this_thread::sleep_for(std::chrono::milliseconds{200});
  }
  child.join();
  follower.drain();
  follower.finish();
  fs::remove(progress_path);
  if (failure) std::rethrow_exception(failure);

  std::cout << result.out << std::flush;
  if (result.exited && (result.exit_code == 0 || result.exit_code == 1)) return result.exit_code;
  // The package's own last error line says what went wrong; progress lines are already shown.
  const std::string reason = corpus_error_line(result.err);
  if (result.exited && result.exit_code == 2) throw usage_error{reason};
  throw std::runtime_error{"corpus: " + argv[0] + " -m cuda_agent_corpus " + result.describe() +
                           (reason.empty() ? "" : ": " + reason)};
}

int list_set(const settings& config, const std::string& set, bool json) {
  std::vector<task_spec> tasks;
  fs::path dir;
  try {
    dir = corpus::resolve_set(corpus_root(config), set);
    tasks = corpus::load_task_set(dir);
  } catch (const corpus::corpus_error& e) {
    throw usage_error{e.what()};
  }
  if (json) {
    auto out = nlohmann::json::array();
    for (const auto& t : tasks)
      out.push_back({{"id", t.id}, {"name", t.name}, {"level", t.level}, {"source", t.source},
                     {"operators", t.operators}, {"metadata", t.metadata}});
    std::cout << out.dump() << '\n';
    return 0;
  }
  for (const auto& t : tasks)
    std::cout << fmt::format("{:<32} L{}  {:<12} {}\n", t.id, t.level, t.source,
                             fmt::join(t.operators, " -> "));
  std::cout << fmt::format("{} tasks in {}\n", tasks.size(), dir.string());
  return 0;
}

}  // namespace

void add_corpus_command(CLI::App& app, invocation& inv) {
  auto* corpus = app.add_subcommand("corpus", "Task sets: list, validate, import, synthesize");
  corpus->require_subcommand(1);

  struct options {
    bool json = false;
    std::string set;
    std::vector<std::string> targets;
    std::string device = "cpu";
    std::string kind, source, out, set_name;
    int limit = 0;
    int count = 20, seed = 0, workers = 0;
    long elements = 0;
    std::vector<std::string> references;
    double threshold = 0.9, min_ms = 1.0, max_ms = 100.0;
    bool no_compile = false, filters = false;
    std::string compile_backend = "inductor", summary, prefix = "synth";
    int timing_runs = 5;
    double task_timeout = 60.0, synth_task_timeout = 600.0;
    bool draw_on_cpu = false;
  };
  auto opt = std::make_shared<options>();
  const auto json_flag = [&](CLI::App* sub) {
    sub->add_flag("--json", opt->json, "One JSON object on standard output");
  };

  auto* list = corpus->add_subcommand("list", "The tasks of a set (a name under corpus/tasks or a directory)");
  list->add_option("set", opt->set, "Set name or directory")->required();
  json_flag(list);
  list->callback([&inv, opt] { inv.action = [&inv, opt] { return list_set(inv.config, opt->set, opt->json); }; });

  auto* validate = corpus->add_subcommand("validate", "Import and run each task once; exit 1 if any fails");
  validate->add_option("targets", opt->targets, "Task files or set directories")->required();
  validate->add_option("--device", opt->device, "cpu or cuda")->capture_default_str();
  validate->add_flag("--filters", opt->filters,
                     "Run synth's filters (eager and compile, determinism, non-constant output, "
                     "eager time in [--min-ms, --max-ms]) instead of one forward");
  validate->add_option("--min-ms", opt->min_ms, "Eager runtime window, low end")->capture_default_str();
  validate->add_option("--max-ms", opt->max_ms, "Eager runtime window, high end")->capture_default_str();
  validate->add_option("--workers", opt->workers,
                       "Worker processes (0: one per visible GPU on cuda, 2 on cpu)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  validate->add_option("--task-timeout", opt->task_timeout,
                       "Seconds one task may take before its worker is killed and the task "
                       "recorded as timeout (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  validate->add_flag("--draw-on-cpu", opt->draw_on_cpu,
                     "On cuda, build models and draw inputs on the CPU and move them (default: "
                     "directly on the GPU, much faster)");
  json_flag(validate);
  validate->callback([&inv, opt] {
    inv.action = [&inv, opt] {
      std::vector<std::string> args;
      if (opt->json) args.push_back("--json");
      args.insert(args.end(), {"validate", "--device", opt->device, "--workers",
                               std::to_string(opt->workers), "--task-timeout",
                               fmt::format("{}", opt->task_timeout)});
      if (opt->draw_on_cpu) args.push_back("--draw-on-cpu");
      if (opt->filters)
        args.insert(args.end(), {"--filters", "--min-ms", fmt::format("{}", opt->min_ms),
                                 "--max-ms", fmt::format("{}", opt->max_ms)});
      for (const auto& t : opt->targets) args.push_back(fs::absolute(t).string());
      return run_corpus_python(inv.config, args);
    };
  });

  auto* import = corpus->add_subcommand("import", "Import a KernelBench checkout or an Ops-6K parquet file");
  import->add_option("kind", opt->kind, "kernelbench or ops6k")->required()
      ->check(CLI::IsMember({"kernelbench", "ops6k"}));
  import->add_option("source", opt->source, "KernelBench root, or the .parquet file")->required();
  import->add_option("--out", opt->out, "Set directory to write")->required();
  import->add_option("--set", opt->set_name, "Set name (default: the directory's name)");
  import->add_option("--limit", opt->limit, "Import at most this many rows (ops6k)");
  json_flag(import);
  import->callback([&inv, opt] {
    inv.action = [&inv, opt] {
      std::vector<std::string> args;
      if (opt->json) args.push_back("--json");
      args.insert(args.end(), {"import", opt->kind, fs::absolute(opt->source).string(), "--out",
                               fs::absolute(opt->out).string()});
      if (!opt->set_name.empty()) args.insert(args.end(), {"--set", opt->set_name});
      if (opt->limit > 0) args.insert(args.end(), {"--limit", std::to_string(opt->limit)});
      return run_corpus_python(inv.config, args);
    };
  });

  auto* synth = corpus->add_subcommand("synth", "Compose, filter and deduplicate new tasks");
  synth->add_option("--out", opt->out, "Set directory to write (added to if it exists)")->required();
  synth->add_option("--count", opt->count, "Candidates to compose")->capture_default_str();
  synth->add_option("--seed", opt->seed, "Random seed")->capture_default_str();
  synth->add_option("--device", opt->device, "cpu or cuda")->capture_default_str();
  synth->add_option("--workers", opt->workers, "Filter processes (0: one per GPU on cuda, 2 on cpu)")
      ->capture_default_str();
  synth->add_option("--elements", opt->elements, "Typical input element count (0: per device)");
  synth->add_option("--reference", opt->references, "Reference set directory or file (repeatable)");
  synth->add_option("--threshold", opt->threshold, "AST similarity above which a candidate is dropped")
      ->capture_default_str();
  synth->add_flag("--no-compile", opt->no_compile, "Skip the torch.compile filter");
  synth->add_option("--compile-backend", opt->compile_backend, "torch.compile backend")
      ->capture_default_str();
  synth->add_option("--min-ms", opt->min_ms, "Eager runtime window, low end")->capture_default_str();
  synth->add_option("--max-ms", opt->max_ms, "Eager runtime window, high end")->capture_default_str();
  synth->add_option("--timing-runs", opt->timing_runs, "Timed eager runs per task")->capture_default_str();
  synth->add_option("--summary", opt->summary, "Write the summary JSON to this file");
  synth->add_option("--prefix", opt->prefix, "Task id prefix")->capture_default_str();
  synth->add_option("--task-timeout", opt->synth_task_timeout,
                    "Seconds one candidate's filters may take before its worker is killed (0: no limit)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  json_flag(synth);
  synth->callback([&inv, opt] {
    inv.action = [&inv, opt] {
      std::vector<std::string> args;
      if (opt->json) args.push_back("--json");
      args.insert(args.end(),
                  {"synth", "--out", fs::absolute(opt->out).string(), "--count",
                   std::to_string(opt->count), "--seed", std::to_string(opt->seed), "--device",
                   opt->device, "--workers", std::to_string(opt->workers), "--elements",
                   std::to_string(opt->elements), "--threshold", fmt::format("{}", opt->threshold),
                   "--compile-backend", opt->compile_backend, "--min-ms",
                   fmt::format("{}", opt->min_ms), "--max-ms", fmt::format("{}", opt->max_ms),
                   "--timing-runs", std::to_string(opt->timing_runs), "--prefix", opt->prefix,
                   "--task-timeout", fmt::format("{}", opt->synth_task_timeout)});
      if (opt->no_compile) args.push_back("--no-compile");
      if (!opt->summary.empty()) args.insert(args.end(), {"--summary", fs::absolute(opt->summary).string()});
      for (const auto& r : opt->references)
        args.insert(args.end(), {"--reference", fs::absolute(r).string()});
      return run_corpus_python(inv.config, args);
    };
  });
}

}  // namespace cuda_agent::cli
