// `cuda-agent report LOG_DIR --out report.html`: the run in a message log as one self-contained
// HTML page (tools/cli/report.hpp says what it shows).
#include <iostream>
#include <memory>

#include <fmt/format.h>

#include "tools/cli/commands.hpp"
#include "tools/cli/report.hpp"

namespace cuda_agent::cli {
namespace {

struct report_options {
  std::string log_dir;
  std::string out = "report.html";
  std::string run_id;
  std::string metrics;
};

int run_report(const report_options& o) {
  report_request request;
  request.log_dir = o.log_dir;
  request.run_id = o.run_id;
  request.metrics = o.metrics;
  const auto data = write_report(request, o.out);
  const auto& run = data["run"];
  if (o.run_id.empty() && run["runs_in_log"].size() > 1)
    std::cerr << fmt::format("report: run {}, the last of the {} runs in the log (--run-id picks another)\n",
                             run["run_id"].get<std::string>(), run["runs_in_log"].size());
  std::cout << "report: " << o.out << "\n";
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app, invocation& inv) {
  auto* cmd = app.add_subcommand(
      "report", "Write a run's message log as one self-contained HTML page: Table 1, reward and speed-up "
                "charts, every episode's timeline and final kernel, pool use, learning curves");
  auto o = std::make_shared<report_options>();
  cmd->add_option("log_dir", o->log_dir, "The run's message log directory (rollout's --log, eval's DIR/log)")
      ->type_name("LOG_DIR")
      ->required();
  cmd->add_option("--out", o->out, "The page to write (default: report.html)")->type_name("FILE.html");
  cmd->add_option("--run-id", o->run_id, "The run to report on, where the log holds several (default: the last)");
  cmd->add_option("--metrics", o->metrics, "train's metrics.jsonl for the learning curves (default: "
                                           "metrics.jsonl in LOG_DIR or the folder above it, if there)")
      ->type_name("FILE");
  cmd->callback([&inv, o] { inv.action = [o] { return run_report(*o); }; });
}

}  // namespace cuda_agent::cli
