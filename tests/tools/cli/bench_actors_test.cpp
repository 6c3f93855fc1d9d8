// `cuda-agent bench actors` run as the built binary with tiny parameters: it completes, prints
// every field, runs every simulated episode to its scripted end, and refuses bad flags with one
// line. Speeds are printed, never asserted.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/tools/cli/cli_runner.hpp"

namespace cuda_agent {
namespace {

using testing::cli;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in{text};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The rows of the episode table: "  label   value  note" -> label: value.
std::map<std::string, std::string> episode_rows(const std::string& out) {
  std::map<std::string, std::string> rows;
  for (const auto& line : lines_of(out)) {
    if (line.rfind("  ", 0) != 0) continue;
    const auto gap = line.find("  ", 2);
    if (gap == std::string::npos) continue;
    std::istringstream value{line.substr(gap)};
    std::string first;
    value >> first;
    rows[line.substr(2, gap - 2)] = first;
  }
  return rows;
}

TEST(bench_actors, tiny_run_prints_every_field_and_ends_every_episode) {
  const auto r = cli({"bench", "actors", "--messages", "300", "--episodes", "24", "--steps", "3",
                      "--policy-ms", "2", "--tool-ms", "1", "--compile-ms", "1", "--gpu-ms", "2",
                      "--gpu-slots", "2", "--compiler-workers", "3"});
  ASSERT_TRUE(r.ok()) << r.describe() << "\n" << r.out << r.err;

  for (const char* row : {"round trip, atoms", "round trip, tool_request/result", "one way, atoms",
                          "one way, recorded_message"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
  EXPECT_NE(r.out.find("24 x 3 steps"), std::string::npos) << r.out;

  auto rows = episode_rows(r.out);
  for (const char* field :
       {"episodes ended cleanly", "total steps", "wall time s", "ideal time s", "overhead us/step",
        "cpu us/step", "peak waiting, gpu pool", "peak waiting, compiler", "messages processed"})
    EXPECT_TRUE(rows.count(field)) << field << "\n" << r.out;
  EXPECT_EQ(rows["episodes ended cleanly"], "24") << r.out;
  EXPECT_EQ(rows["total steps"], "72") << r.out;
  EXPECT_GT(std::stod(rows["wall time s"]), 0.0) << r.out;
  // One GPU job per step plus the final evaluation, 2 ms each, at most 2 at a time.
  EXPECT_GE(std::stod(rows["ideal time s"]), 24 * 4 * 0.002 / 2) << r.out;
  // Each episode waits for at most one job per pool, and the queue never refuses one.
  const int peak = std::stoi(rows["peak waiting, gpu pool"]);
  EXPECT_GE(peak, 0);
  EXPECT_LE(peak, 24);
  EXPECT_NE(r.out.find("rejected 0"), std::string::npos) << r.out;
  EXPECT_GT(std::stoll(rows["messages processed"]), 24 * 3) << r.out;
}

TEST(bench_actors, bad_flags_are_one_line_errors) {
  for (std::vector<std::string> args :
       {std::vector<std::string>{"--episodes", "0"}, {"--steps", "0"}, {"--gpu-slots", "0"},
        {"--gpu-ms", "-1"}, {"--messages", "lots"}}) {
    const std::string flag = args[0];
    args.insert(args.begin(), {"bench", "actors"});
    const auto r = cli(args);
    EXPECT_TRUE(r.exited) << flag;
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.err;
    const auto errors = lines_of(r.err);
    ASSERT_EQ(errors.size(), 1u) << flag << ": " << r.err;
    EXPECT_EQ(errors[0].rfind("cuda-agent: error: ", 0), 0u) << errors[0];
    EXPECT_NE(errors[0].find(flag), std::string::npos) << errors[0];
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(bench_actors, is_listed_under_bench) {
  const auto r = cli({"bench", "--help"});
  ASSERT_TRUE(r.ok()) << r.describe() << r.err;
  EXPECT_NE(r.out.find("actors"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace cuda_agent
