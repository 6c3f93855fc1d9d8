#include "corpus/task_index.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace cuda_agent::corpus {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw corpus_error{path.string() + ": cannot read " + what + "; check the path"};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

const nlohmann::json& field(const nlohmann::json& entry, const char* key, const std::string& where) {
  const auto it = entry.find(key);
  if (it == entry.end())
    throw corpus_error{where + ": lacks '" + key +
                       "'; each entry needs id, level, operators, source and file"};
  return *it;
}

}  // namespace

fs::path resolve_set(const fs::path& corpus_dir, const std::string& set) {
  if (fs::is_regular_file(fs::path{set} / "index.json")) return fs::path{set};
  const fs::path named = corpus_dir / "tasks" / set;
  if (fs::is_regular_file(named / "index.json")) return named;
  throw corpus_error{"no task set '" + set + "': neither " + set + "/index.json nor " +
                     (named / "index.json").string() +
                     " exists; name a set under corpus/tasks or a directory holding index.json"};
}

std::vector<task_spec> load_task_set(const fs::path& set_dir) {
  const fs::path index_path = set_dir / "index.json";
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text(index_path, "the set's index"));
  } catch (const nlohmann::json::parse_error& e) {
    throw corpus_error{index_path.string() + ": not valid JSON (" + e.what() +
                       "); fix or regenerate the index"};
  }
  if (!index.is_object() || !index.contains("tasks") || !index["tasks"].is_array())
    throw corpus_error{index_path.string() + ": must be an object with a 'tasks' list"};
  const std::string set_name = index.value("set", set_dir.filename().string());

  std::vector<task_spec> tasks;
  std::set<std::string> ids;
  std::size_t position = 0;
  for (const auto& entry : index["tasks"]) {
    const std::string where = index_path.string() + " entry " + std::to_string(position++);
    if (!entry.is_object()) throw corpus_error{where + ": must be an object"};
    try {
      task_spec task;
      task.id = field(entry, "id", where).get<std::string>();
      task.level = field(entry, "level", where).get<int32_t>();
      task.source = field(entry, "source", where).get<std::string>();
      task.operators = field(entry, "operators", where).get<std::vector<std::string>>();
      task.name = entry.value("name", task.id);
      if (!ids.insert(task.id).second)
        throw corpus_error{where + ": task id '" + task.id + "' appears twice; ids must be unique"};
      const fs::path file = fs::absolute(set_dir / field(entry, "file", where).get<std::string>());
      task.model_py = read_text(file, "task " + task.id + "'s program");
      task.metadata["set"] = set_name;
      task.metadata["file"] = file.lexically_normal().string();
      task.metadata["sizes"] = entry.value("sizes", nlohmann::json::object()).dump();
      for (const auto& [key, value] : entry.items()) {
        if (key == "id" || key == "level" || key == "source" || key == "operators" ||
            key == "name" || key == "file" || key == "sizes" || key == "demo")
          continue;
        if (value.is_string()) task.metadata[key] = value.get<std::string>();
        else if (value.is_number() || value.is_boolean()) task.metadata[key] = value.dump();
      }
      if (entry.contains("demo")) {
        const fs::path demo = set_dir / entry["demo"].get<std::string>();
        if (fs::is_regular_file(demo / "demo.json"))
          task.metadata["demo"] = fs::absolute(demo).lexically_normal().string();
      }
      tasks.push_back(std::move(task));
    } catch (const nlohmann::json::exception& e) {
      throw corpus_error{where + ": a field has the wrong type (" + e.what() +
                         "); id, source and file are strings, level an integer, operators a list"};
    }
  }
  return tasks;
}

}  // namespace cuda_agent::corpus
