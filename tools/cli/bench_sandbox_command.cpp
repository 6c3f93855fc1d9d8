// `cuda-agent bench sandbox`: what running an agent's command in the episode sandbox costs.
// Times N runs of `true` and of `python3 -c pass` through the sandbox (bubblewrap, limits) and
// the same with sandbox.mode = none (limits only), and the Read and Edit tools on a 1000-line
// file, printing median and 90th percentile. A sandbox that cannot start is a one-line error.
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "actors/tools/tools.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

struct percentiles {
  double median_ms, p90_ms;
};

template <class F>
percentiles time_runs(int runs, F&& run) {
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto start = clock_type::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms[std::min(ms.size() - 1, ms.size() * 9 / 10)]};
}

int bench_sandbox(const settings& config, int runs) {
  std::string pattern = "/tmp/cuda-agent-bench-sandbox-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) throw usage_error("cannot create a scratch workdir in /tmp");
  const fs::path workdir = pattern;
  fs::permissions(workdir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
  struct cleanup {
    fs::path path;
    ~cleanup() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  } remove_later{workdir};

  auto isolated = sandbox_settings::from(config);
  auto plain = isolated;
  plain.isolate = false;
  std::vector<std::pair<std::string, sandbox>> boxes;
  try {
    if (isolated.isolate) boxes.emplace_back("bwrap", sandbox{workdir, isolated});
    boxes.emplace_back("none", sandbox{workdir, plain});
    for (auto& [name, box] : boxes) {
      box.prepare_workdir();
      box.probe();
    }
  } catch (const sandbox_error& e) {
    throw usage_error(e.what());
  }

  fmt::print("{:<28} {:>6} {:>12} {:>12}\n", "what", "runs", "median ms", "p90 ms");
  for (auto& [name, box] : boxes) {
    for (const std::string command : {"true", "python3 -c pass"}) {
      const auto t = time_runs(runs, [&] {
        const auto r = box.run(command, std::chrono::seconds{30});
        if (!r.ok()) throw usage_error(fmt::format("'{}' failed in the sandbox: {}", command, r.describe()));
      });
      fmt::print("{:<28} {:>6} {:>12.2f} {:>12.2f}\n", fmt::format("{} `{}`", name, command), runs,
                 t.median_ms, t.p90_ms);
    }
  }

  std::ofstream{workdir / "big.py"} << [] {
    std::string text;
    for (int i = 0; i < 1000; ++i) text += fmt::format("x_{} = {}  # a line of a file\n", i, i);
    return text;
  }();
  tools::tool_session session{sandbox{workdir, plain}, tools::tool_limits::from(config)};
  const auto read = time_runs(runs, [&] {
    tools::run_tool(session, tool_call{"c", "Read", R"({"file_path": "big.py"})"}, "bench");
  });
  fmt::print("{:<28} {:>6} {:>12.3f} {:>12.3f}\n", "Read 1000 lines", runs, read.median_ms,
             read.p90_ms);
  int flip = 0;
  const auto edit = time_runs(runs, [&] {
    const auto from = flip % 2 ? "x_500 = 0" : "x_500 = 500";
    const auto to = flip++ % 2 ? "x_500 = 500" : "x_500 = 0";
    const auto r = tools::run_tool(
        session,
        tool_call{"c", "Edit",
                  fmt::format(R"({{"file_path": "big.py", "old_string": "{}", "new_string": "{}"}})",
                              from, to)},
        "bench");
    if (r.is_error) throw usage_error("Edit failed: " + r.output);
  });
  fmt::print("{:<28} {:>6} {:>12.3f} {:>12.3f}\n", "Edit in 1000 lines", runs, edit.median_ms,
             edit.p90_ms);
  return 0;
}

}  // namespace

void add_bench_sandbox_command(CLI::App& bench, invocation& inv) {
  auto* cmd = bench.add_subcommand("sandbox", "Cost of agent commands in the sandbox and of the file tools");
  auto runs = std::make_shared<int>(50);
  cmd->add_option("--runs", *runs, "Timed runs per case")->check(CLI::Range(1, 100000));
  cmd->callback([&inv, runs] { inv.action = [&inv, runs] { return bench_sandbox(inv.config, *runs); }; });
}

}  // namespace cuda_agent::cli
