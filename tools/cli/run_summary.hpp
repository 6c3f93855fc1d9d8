// The paper's Table 1 over a run's settled episodes: per level and overall, the rate of tasks
// whose kernel passed, was faster than eager and faster than torch.compile, and the geometric
// mean speed-ups; with K attempts per task, pass@1, pass@K and KernelBench's fast_p beside it.
// `rollout` and `eval` print it and write it as summary.json next to their episodes.
//
// Definitions (also written into the JSON, so that a reader need not find this file):
// - a task counts once, by its episodes the agent ended; an episode that ended in an
//   infrastructure failure (no verdict of the agent's kernel) is left out and listed;
// - pass: some attempt has reward >= 1 (correct, no violation); faster than eager: reward >= 2;
//   faster than compile: reward 3 (the reward's milestones: more than 5% faster);
// - the geomeans are over the tasks that passed, of their best attempt's measured speed-ups
//   (best: highest reward, then the fastest against eager); a failed task has no time;
// - overall pools the tasks of every level, so each level weighs by its number of tasks;
// - pass@1 is the mean over tasks of c / n (c of n attempts passed); pass@k, k the fewest
//   attempts any task has, is the unbiased 1 - C(n - c, k) / C(n, k); fast_p is the fraction of
//   tasks with an attempt that passed and is more than p times as fast as eager (p = 1, 1.2, 2).
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/rollout_manager.hpp"

namespace cuda_agent::cli {

struct table1_row {
  int tasks = 0;
  int attempts = 0;  // episodes over those tasks
  int passed = 0, faster_eager = 0, faster_compile = 0;
  int min_attempts = 0;  // the k of pass@k
  double pass_at_1 = 0, pass_at_k = 0;  // sums over tasks until summarize() divides
  int fast_1 = 0, fast_1_2 = 0, fast_2 = 0;
  double log_speedup_eager = 0, log_speedup_compile = 0;
  int timed = 0;  // passing tasks whose best attempt has both speed-ups
};

struct run_summary {
  std::map<int, table1_row> levels;
  table1_row overall;
  std::vector<std::string> infrastructure_failures;  // episode ids, in result order
};

run_summary summarize(const std::vector<episode_summary>& episodes);

// {"overall": {...}, "levels": {"1": {...}, ...}, "infrastructure_failures": [...],
//  "definitions": {...}}; each row: tasks, attempts, pass_rate, faster_than_eager,
// faster_than_compile, geomean_speedup_eager, geomean_speedup_compile (null without a passing
// task), pass_at_1, pass_at_k, k, fast_1, fast_1.2, fast_2. Rates are fractions.
nlohmann::json summary_json(const run_summary& summary);

void print_summary(const run_summary& summary, std::ostream& out);

// Writes `summary` as JSON to `path` (its folder made), whole or not at all (a temporary file
// renamed over it). Throws std::runtime_error naming the path.
void write_summary(const nlohmann::json& summary, const std::string& path);

}  // namespace cuda_agent::cli
