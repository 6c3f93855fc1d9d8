#include "tools/cli/run_summary.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

namespace cuda_agent::cli {
namespace {

// C(n - c, k) / C(n, k): the chance that k of n attempts drawn without replacement all fail.
double all_fail(int n, int c, int k) {
  if (n - c < k) return 0.0;
  double p = 1.0;
  for (int i = 0; i < k; ++i) p *= static_cast<double>(n - c - i) / static_cast<double>(n - i);
  return p;
}

bool measured(double x) { return std::isfinite(x) && x > 0; }

// Orders attempts: a higher reward, then a measured and higher speed-up against eager.
bool better(const episode_summary& a, const episode_summary& b) {
  if (a.verdict.reward != b.verdict.reward) return a.verdict.reward > b.verdict.reward;
  const double sa = measured(a.verdict.speedup_eager) ? a.verdict.speedup_eager : 0.0;
  const double sb = measured(b.verdict.speedup_eager) ? b.verdict.speedup_eager : 0.0;
  return sa > sb;
}

void add_task(table1_row& row, const std::vector<const episode_summary*>& attempts) {
  const episode_summary* best = attempts.front();
  int passed = 0;
  bool fast[3] = {false, false, false};
  const double p[3] = {1.0, 1.2, 2.0};
  for (const auto* a : attempts) {
    if (better(*a, *best)) best = a;
    if (a->verdict.reward < 1) continue;
    ++passed;
    for (int i = 0; i < 3; ++i) fast[i] = fast[i] || (measured(a->verdict.speedup_eager) && a->verdict.speedup_eager > p[i]);
  }
  const int n = static_cast<int>(attempts.size());
  ++row.tasks;
  row.attempts += n;
  row.min_attempts = row.tasks == 1 ? n : std::min(row.min_attempts, n);
  row.passed += passed > 0;
  row.faster_eager += best->verdict.reward >= 2;
  row.faster_compile += best->verdict.reward == 3;
  row.pass_at_1 += static_cast<double>(passed) / n;
  row.fast_1 += fast[0];
  row.fast_1_2 += fast[1];
  row.fast_2 += fast[2];
  if (best->verdict.reward >= 1 && measured(best->verdict.speedup_eager) && measured(best->verdict.speedup_compile)) {
    row.log_speedup_eager += std::log(best->verdict.speedup_eager);
    row.log_speedup_compile += std::log(best->verdict.speedup_compile);
    ++row.timed;
  }
}

double rate(double part, int whole) { return whole == 0 ? 0.0 : part / whole; }

nlohmann::json geomean(double logs, int count) {
  return count == 0 ? nlohmann::json(nullptr) : nlohmann::json(std::exp(logs / count));
}

nlohmann::json row_json(const table1_row& r) {
  return {{"tasks", r.tasks},
          {"attempts", r.attempts},
          {"pass_rate", rate(r.passed, r.tasks)},
          {"faster_than_eager", rate(r.faster_eager, r.tasks)},
          {"faster_than_compile", rate(r.faster_compile, r.tasks)},
          {"geomean_speedup_eager", geomean(r.log_speedup_eager, r.timed)},
          {"geomean_speedup_compile", geomean(r.log_speedup_compile, r.timed)},
          {"pass_at_1", rate(r.pass_at_1, r.tasks)},
          {"pass_at_k", rate(r.pass_at_k, r.tasks)},
          {"k", r.min_attempts},
          {"fast_1", rate(r.fast_1, r.tasks)},
          {"fast_1.2", rate(r.fast_1_2, r.tasks)},
          {"fast_2", rate(r.fast_2, r.tasks)}};
}

}  // namespace

run_summary summarize(const std::vector<episode_summary>& episodes) {
  run_summary out;
  // Attempts per task, in first-seen order; a task's level is its spec's.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const episode_summary*>> by_task;
  for (const auto& e : episodes) {
    if (e.ended.reason == termination::infrastructure_failure) {
      out.infrastructure_failures.push_back(e.episode_id);
      continue;
    }
    auto& list = by_task[e.task.id];
    if (list.empty()) order.push_back(e.task.id);
    list.push_back(&e);
  }
  // pass@k needs the run's k first: the fewest attempts of any task.
  int k = 0;
  for (const auto& id : order) {
    const int n = static_cast<int>(by_task[id].size());
    k = k == 0 ? n : std::min(k, n);
  }
  for (const auto& id : order) {
    const auto& attempts = by_task[id];
    int passed = 0;
    for (const auto* a : attempts) passed += a->verdict.reward >= 1;
    const double pass_at_k = 1.0 - all_fail(static_cast<int>(attempts.size()), passed, k);
    for (table1_row* row : {&out.levels[attempts.front()->task.level], &out.overall}) {
      add_task(*row, attempts);
      row->pass_at_k += pass_at_k;
    }
  }
  return out;
}

nlohmann::json summary_json(const run_summary& s) {
  nlohmann::json levels = nlohmann::json::object();
  for (const auto& [level, row] : s.levels) levels[std::to_string(level)] = row_json(row);
  return {{"overall", row_json(s.overall)},
          {"levels", levels},
          {"infrastructure_failures", s.infrastructure_failures},
          {"definitions",
           {{"task", "counted once, by its episodes the agent ended; episodes that ended in an infrastructure "
                     "failure are left out and listed"},
            {"pass_rate", "tasks with an attempt of reward >= 1 (correct, no violation)"},
            {"faster_than_eager", "tasks whose best attempt has reward >= 2 (more than 5% faster than eager)"},
            {"faster_than_compile", "tasks whose best attempt has reward 3 (more than 5% faster than eager and "
                                    "than torch.compile)"},
            {"geomean", "over the tasks that passed, of their best attempt's speed-ups (best: highest reward, then "
                        "fastest against eager); null without one"},
            {"overall", "the tasks of every level pooled: each level weighs by its number of tasks"},
            {"pass_at_k", "unbiased 1 - C(n-c,k)/C(n,k) per task, k the fewest attempts of any task"},
            {"fast_p", "tasks with a passing attempt more than p times as fast as eager"}}}};
}

void print_summary(const run_summary& s, std::ostream& out) {
  const bool several = s.overall.min_attempts > 1;
  out << fmt::format("\n{:<8} {:>6} {:>8} {:>9} {:>11} {:>14} {:>16}", "level", "tasks", "pass", "> eager",
                     "> compile", "geomean eager", "geomean compile");
  if (several) out << fmt::format(" {:>8} {:>8}", "pass@1", fmt::format("pass@{}", s.overall.min_attempts));
  out << "\n";
  auto line = [&](const std::string& name, const table1_row& r) {
    auto percent = [&](double part) { return r.tasks == 0 ? std::string{"-"} : fmt::format("{:.1f}%", 100.0 * part / r.tasks); };
    auto mean = [&](double logs) { return r.timed == 0 ? std::string{"-"} : fmt::format("{:.3f}x", std::exp(logs / r.timed)); };
    out << fmt::format("{:<8} {:>6} {:>8} {:>9} {:>11} {:>14} {:>16}", name, r.tasks, percent(r.passed),
                       percent(r.faster_eager), percent(r.faster_compile), mean(r.log_speedup_eager),
                       mean(r.log_speedup_compile));
    if (several) out << fmt::format(" {:>8} {:>8}", percent(r.pass_at_1), percent(r.pass_at_k));
    out << "\n";
  };
  for (const auto& [level, row] : s.levels) line(std::to_string(level), row);
  line("all", s.overall);
  out << "(a task passes with reward >= 1; > eager / > compile: more than 5% faster, rewards >= 2 and 3; "
         "geomeans over the passing tasks' best attempts";
  if (!s.infrastructure_failures.empty())
    out << fmt::format("; {} episode(s) ended in infrastructure failure and are left out",
                       s.infrastructure_failures.size());
  out << ")\n";
}

void write_summary(const nlohmann::json& summary, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target{path};
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const fs::path temp = target.string() + ".tmp";
  {
    std::ofstream out{temp, std::ios::trunc};
    out << summary.dump(2) << "\n";
    out.flush();
    if (!out) throw std::runtime_error{"cannot write the run summary " + temp.string()};
  }
  fs::rename(temp, target, ec);
  if (ec) throw std::runtime_error{"cannot write the run summary " + target.string() + ": " + ec.message()};
}

}  // namespace cuda_agent::cli
