#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "actors/process/subprocess.hpp"

#include "corpus/task_index.hpp"
#include "tests/actors/message_log/test_support.hpp"  // scratch_dir

namespace cuda_agent::corpus {
namespace {

namespace fs = std::filesystem;

fs::path source_dir() { return CUDA_AGENT_SOURCE_DIR; }

using message_log::testing::scratch_dir;

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream{path} << text;
}

TEST(TaskIndex, ReadsTheShippedSmokeSetWithProgramsAndDemos) {
  const auto set = resolve_set(source_dir() / "corpus", "smoke");
  const auto tasks = load_task_set(set);
  ASSERT_GE(tasks.size(), 20u);
  const auto& first = tasks.front();
  EXPECT_EQ(first.id, "smoke_01_relu");
  EXPECT_EQ(first.level, 1);
  EXPECT_EQ(first.source, "starter");
  EXPECT_EQ(first.operators, std::vector<std::string>{"torch.relu"});
  EXPECT_NE(first.model_py.find("class Model"), std::string::npos);
  EXPECT_EQ(first.metadata.at("set"), "smoke");
  EXPECT_EQ(first.metadata.at("category"), "single");
  EXPECT_EQ(nlohmann::json::parse(first.metadata.at("sizes"))["rows"], 256);
  EXPECT_TRUE(fs::is_regular_file(fs::path{first.metadata.at("demo")} / "demo.json"));
  EXPECT_TRUE(fs::is_regular_file(first.metadata.at("file")));
}

TEST(TaskIndex, ResolvesADirectoryOrANameAndRejectsNeither) {
  const scratch_dir scratch;
  const auto& dir = scratch.path();
  write(dir / "mine" / "index.json", R"({"tasks": []})");
  EXPECT_EQ(resolve_set(source_dir() / "corpus", (dir / "mine").string()), dir / "mine");
  EXPECT_TRUE(load_task_set(dir / "mine").empty());
  try {
    resolve_set(source_dir() / "corpus", "no_such_set");
    FAIL() << "resolved a missing set";
  } catch (const corpus_error& e) {
    EXPECT_NE(std::string{e.what()}.find("no task set 'no_such_set'"), std::string::npos);
  }
}

void expect_error(const fs::path& set, const std::string& fragment) {
  try {
    load_task_set(set);
    FAIL() << "loaded a broken set; expected: " << fragment;
  } catch (const corpus_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(TaskIndex, BrokenIndexesAreOneLineErrors) {
  const scratch_dir scratch;
  const auto& dir = scratch.path();
  write(dir / "a" / "index.json", "{not json");
  expect_error(dir / "a", "not valid JSON");
  write(dir / "b" / "index.json", R"({"tasks": [{"id": "t"}]})");
  expect_error(dir / "b", "lacks 'level'");
  write(dir / "c" / "index.json",
        R"({"tasks": [{"id": "t", "level": 1, "operators": [], "source": "s", "file": "gone.py"}]})");
  expect_error(dir / "c", "cannot read task t's program");
  write(dir / "d" / "t.py", "x = 1\n");
  write(dir / "d" / "index.json",
        R"({"tasks": [{"id": "t", "level": 1, "operators": [], "source": "s", "file": "t.py"},
                      {"id": "t", "level": 1, "operators": [], "source": "s", "file": "t.py"}]})");
  expect_error(dir / "d", "appears twice");
  write(dir / "e" / "index.json",
        R"({"tasks": [{"id": "t", "level": "one", "operators": [], "source": "s", "file": "t.py"}]})");
  expect_error(dir / "e", "wrong type");
  expect_error(dir / "missing", "cannot read the set's index");
}

}  // namespace
}  // namespace cuda_agent::corpus

// --- `cuda-agent corpus` end to end, through the built binary ----------------------------------

namespace cuda_agent::corpus {
namespace {

subprocess_result cli(const std::vector<std::string>& args) {
  const char* binary = std::getenv("CUDA_AGENT_BINARY");
  if (binary == nullptr) throw std::runtime_error("CUDA_AGENT_BINARY is not set; run through ctest");
  std::vector<std::string> argv{binary};
  argv.insert(argv.end(), args.begin(), args.end());
  subprocess_options options;
  options.timeout = std::chrono::seconds{120};
  return run_subprocess(argv, options);
}

TEST(CorpusCommand, ListPrintsTheSetAsJson) {
  const auto r = cli({"corpus", "list", "bench", "--json"});
  ASSERT_TRUE(r.ok()) << r.err;
  const auto tasks = nlohmann::json::parse(r.out);
  ASSERT_EQ(tasks.size(), 20u);
  EXPECT_EQ(tasks[16]["id"], "bench_17_attention");
  EXPECT_EQ(tasks[16]["metadata"]["category"], "block");
}

TEST(CorpusCommand, ValidateRunsTasksThroughTheHarnessPythonAndReportsFailures) {
  const scratch_dir scratch;
  const auto bad = scratch.path() / "bad.py";
  write(bad, "import torch\n\nclass Model(torch.nn.Module):\n    pass\n");
  const auto good = source_dir() / "corpus" / "tasks" / "smoke" / "smoke_01_relu.py";
  const auto r = cli({"corpus", "validate", "--json", good.string(), bad.string()});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["validated"], 2);
  EXPECT_EQ(report["failed"], 1);
  EXPECT_EQ(report["tasks"][0]["ok"], true);
  EXPECT_NE(report["tasks"][1]["error"].get<std::string>().find("lacks get_inputs"),
            std::string::npos);
  EXPECT_NE(r.err.find("[corpus] FAIL bad"), std::string::npos) << r.err;  // progress shown
}

TEST(CorpusCommand, BadUsageIsOneLineAndStatusTwo) {
  const auto missing_set = cli({"corpus", "list", "no_such_set"});
  EXPECT_EQ(missing_set.exit_code, 2);
  EXPECT_NE(missing_set.err.find("no task set 'no_such_set'"), std::string::npos);
  const auto missing_file = cli({"corpus", "import", "ops6k", "/no/such.parquet", "--out", "/tmp/x"});
  EXPECT_EQ(missing_file.exit_code, 2);
  EXPECT_NE(missing_file.err.find("no such file"), std::string::npos) << missing_file.err;
  EXPECT_EQ(std::count(missing_file.err.begin(), missing_file.err.end(), '\n'), 1) << missing_file.err;
}

}  // namespace
}  // namespace cuda_agent::corpus
