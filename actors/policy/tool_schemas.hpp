// The tools' JSON schemas (skills/tools/<Tool>.json, OpenAI function format) and the check of a
// model's tool call against them. Shared by the OpenAI-compatible backend and the in-process
// model's chat format; needs nothing but nlohmann-json, so neither drags the other's libraries in.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cuda_agent::policy {

// The tools' JSON schemas in OpenAI function format, by tool name.
using tool_schemas = std::map<std::string, nlohmann::json>;

// Reads every <Tool>.json in `dir`; throws config_error naming the file on a bad one and when
// the directory holds none.
tool_schemas load_tool_schemas(const std::filesystem::path& dir);

// The names of the tools offered in a request: those it lists, or every schema (in name order)
// when it lists none.
std::vector<std::string> offered_tools(const tool_schemas& schemas,
                                       const std::vector<std::string>& listed);

// Checks one call's arguments against the tools offered; returns why it is malformed, or an
// empty string. `arguments` is the text the model wrote.
std::string check_tool_call(const tool_schemas& schemas, const std::vector<std::string>& offered,
                            const std::string& tool, const std::string& arguments);

}  // namespace cuda_agent::policy
