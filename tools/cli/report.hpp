// `cuda-agent report`: one self-contained HTML page about a run, drawn from its message log.
//
// The page (tools/cli/report_template.html, compiled in) holds no external resource: its CSS and
// its script are inline, and the run's data is one JSON blob in a <script type="application/json">
// element that the script renders (tables, SVG charts). It shows:
// - Table 1 per level and overall: run_summary's summarize() and summary_json(), so the numbers
//   are summary.json's;
// - the reward histogram and the speed-up distributions against eager and torch.compile;
// - every episode of the run in a sortable table, each linking to its section: a timeline of its
//   turns, tool calls, builds, verifies, profiles and final evaluation with their latencies (the
//   log's timestamps), and the last version of each file its Write/Edit/MultiEdit calls wrote;
// - the compiler pool's and the GPU pool's jobs in flight over the run;
// - the learning curves when training metrics exist (train's metrics.jsonl and eval.jsonl beside
//   the log, and learner_update records in it).
// `rollout` and `eval` write it as runs/<id>/report.html, beside summary.json.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/rollout_manager.hpp"

namespace cuda_agent::cli {

struct report_request {
  std::filesystem::path log_dir;
  // The run the report is about (episode ids "<run_id>-NNNN..."); empty: the run whose record
  // comes last in the log (the most recent one).
  std::string run_id;
  // train's metrics.jsonl; empty: looked for in the log's folder and the one above it (train
  // writes DIR/metrics.jsonl beside DIR/rollout_log and DIR/demo_log).
  std::filesystem::path metrics;
  // The run's settled episodes as the rollout holds them in memory; null: rebuilt from the log
  // as the rollout manager settles them (per episode index, the first attempt the agent ended,
  // else its last attempt: an infrastructure failure), as `cuda-agent report` does.
  const std::vector<episode_summary>* settled = nullptr;
  nlohmann::json run_info;  // extra fields shown on the page (corpus, policy, device, ...); may be null
};

// The data blob of the page: {"run": {...}, "summary": summary_json(...), "episodes": [...],
// "pools": {...}, "learning": {...} or null, "notes": [...]}. Throws usage_error (one line, with
// the fix) for a directory that does not exist, is not a message log, holds no records or no
// episode (of `run_id`), or is corrupt.
nlohmann::json report_data(const report_request& request);

// The page with `data` embedded. Every '<' in the JSON is written \u003c, so no text in the
// log (a "</script>" or "<!--" in a kernel's source) can end or re-open the script element.
std::string render_report(const nlohmann::json& data);

// report_data, render_report, and the page written to `out` whole or not at all (a temporary
// file renamed over it; its folder made); returns the data. Throws usage_error as report_data,
// and naming `out` when it is a directory or cannot be written.
nlohmann::json write_report(const report_request& request, const std::filesystem::path& out);

// The page template, compiled in from tools/cli/report_template.html (report_template.cpp.in).
const std::string& report_template_html();

}  // namespace cuda_agent::cli
