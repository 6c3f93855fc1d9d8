#include "actors/policy/tool_schemas.hpp"

#include <algorithm>
#include <fstream>

#include "config/settings.hpp"

namespace cuda_agent::policy {
namespace {

using nlohmann::json;

std::string join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : ", ") + w;
  return out;
}

bool has_type(const json& value, const std::string& type) {
  if (type == "string") return value.is_string();
  if (type == "integer") return value.is_number_integer();
  if (type == "number") return value.is_number();
  if (type == "boolean") return value.is_boolean();
  if (type == "array") return value.is_array();
  if (type == "object") return value.is_object();
  return true;  // a type this check does not know is not held against the model
}

std::string cut(const std::string& text, size_t limit) {
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

}  // namespace

std::vector<std::string> offered_tools(const tool_schemas& schemas,
                                       const std::vector<std::string>& listed) {
  if (!listed.empty()) return listed;
  std::vector<std::string> all;
  for (const auto& [name, schema] : schemas) all.push_back(name);
  return all;
}

tool_schemas load_tool_schemas(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec))
    throw config_error{"policy.tools_dir '" + dir.string() +
                       "' is not a directory; point it at skills/tools of the cuda-agent checkout"};
  tool_schemas schemas;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(entry.path());
    const auto doc = json::parse(in, nullptr, false);
    const auto name = entry.path().stem().string();
    if (doc.is_discarded() || !doc.is_object() || doc.value("name", "") != name ||
        !doc.contains("parameters") || !doc["parameters"].is_object())
      throw config_error{"tool schema " + entry.path().string() +
                         " must be a JSON object with \"name\": \"" + name +
                         "\" and a \"parameters\" object (OpenAI function format)"};
    schemas.emplace(name, doc);
  }
  if (schemas.empty())
    throw config_error{"policy.tools_dir '" + dir.string() + "' holds no <Tool>.json schemas"};
  return schemas;
}

std::string check_tool_call(const tool_schemas& schemas, const std::vector<std::string>& offered,
                            const std::string& tool, const std::string& arguments) {
  const auto tools = offered_tools(schemas, offered);
  if (tool.empty()) return "the tool call names no tool; the tools are: " + join(tools);
  const auto schema = schemas.find(tool);
  if (schema == schemas.end() || std::find(tools.begin(), tools.end(), tool) == tools.end())
    return "unknown tool '" + tool + "'; the tools are: " + join(tools);
  const auto args = json::parse(arguments, nullptr, false);
  if (args.is_discarded())
    return "the arguments of " + tool + " are not valid JSON: " + cut(arguments, 200);
  if (!args.is_object()) return "the arguments of " + tool + " must be a JSON object";

  const auto& parameters = schema->second["parameters"];
  const json properties = parameters.value("properties", json::object());
  for (const auto& required : parameters.value("required", json::array()))
    if (required.is_string() && !args.contains(required.get<std::string>()))
      return tool + " needs the argument '" + required.get<std::string>() + "'";
  const bool closed = parameters.value("additionalProperties", true) == false;
  for (const auto& [key, value] : args.items()) {
    const auto property = properties.find(key);
    if (property == properties.end()) {
      if (closed) return tool + " has no argument '" + key + "'";
      continue;
    }
    const auto type = property->value("type", "");
    if (!has_type(value, type)) return tool + ": argument '" + key + "' must be " + type;
  }
  return {};
}

}  // namespace cuda_agent::policy
