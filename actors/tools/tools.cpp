#include "actors/tools/tools.hpp"

#include <chrono>
#include <functional>
#include <map>

namespace cuda_agent::tools {
namespace {

using tool_function = tool_output (*)(tool_session&, const nlohmann::json&);

struct tool_entry {
  tool_function run;
  std::vector<std::string> arguments;
};

const std::map<std::string, tool_entry>& registry() {
  static const std::map<std::string, tool_entry> tools = {
      {"Bash", {bash_tool, {"command", "timeout", "run_in_background", "description"}}},
      {"Read", {read_tool, {"file_path", "offset", "limit"}}},
      {"Write", {write_tool, {"file_path", "content"}}},
      {"Edit", {edit_tool, {"file_path", "old_string", "new_string", "replace_all"}}},
      {"MultiEdit", {multi_edit_tool, {"file_path", "edits"}}},
      {"Glob", {glob_tool, {"pattern", "path"}}},
      {"Grep",
       {grep_tool,
        {"pattern", "path", "glob", "output_mode", "case_insensitive", "line_numbers"}}},
      {"BashOutput", {bash_output_tool, {"bash_id", "filter"}}},
      {"KillBash", {kill_bash_tool, {"bash_id"}}},
  };
  return tools;
}

// Length of the UTF-8 sequence starting at s[i], or 0 when it is not a valid one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 0;
  return n;
}

std::string type_of(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

}  // namespace

std::vector<std::string> implemented_tools() {
  std::vector<std::string> names;
  for (const auto& [name, entry] : registry()) names.push_back(name);
  return names;
}

const std::vector<std::string>& tool_arguments(const std::string& tool) {
  static const std::vector<std::string> none;
  const auto it = registry().find(tool);
  return it == registry().end() ? none : it->second.arguments;
}

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto n = utf8_length(text, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string limit_output(std::string text, std::size_t limit, bool* truncated,
                         std::size_t more_dropped) {
  text = valid_utf8(text);
  if (text.size() <= limit && more_dropped == 0) return text;
  std::size_t cut = std::min(limit, text.size());
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  const auto omitted = text.size() - cut + more_dropped;
  text.resize(cut);
  if (!text.empty() && text.back() != '\n') text += '\n';
  text += "[output truncated: " + std::to_string(omitted) + " more bytes not shown]";
  if (truncated) *truncated = true;
  return text;
}

std::optional<std::string> routed_command(std::string_view command) {
  const auto first = command.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::nullopt;
  const auto last = command.find_last_not_of(" \t\r\n");
  const auto word = command.substr(first, last - first + 1);
  for (const char* routed : {"build", "verify", "profile"})
    if (word == routed) return std::string{routed};
  return std::nullopt;
}

nlohmann::json parse_arguments(const std::string& arguments_json,
                               const std::vector<std::string>& known) {
  nlohmann::json args;
  try {
    args = arguments_json.empty() ? nlohmann::json::object() : nlohmann::json::parse(arguments_json);
  } catch (const nlohmann::json::parse_error&) {
    throw tool_error{"the arguments are not valid JSON; send one JSON object"};
  }
  if (!args.is_object()) throw tool_error{"the arguments must be a JSON object"};
  for (const auto& [name, value] : args.items()) {
    bool ok = false;
    for (const auto& k : known) ok = ok || name == k;
    if (!ok) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw tool_error{"unknown argument '" + name + "'; this tool takes: " + list};
    }
  }
  return args;
}

std::string required_string(const nlohmann::json& args, const char* name) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null())
    throw tool_error{"missing required argument '" + std::string{name} + "' (a string)"};
  if (!it->is_string())
    throw tool_error{"argument '" + std::string{name} + "' must be a string, got " + type_of(*it)};
  return it->get<std::string>();
}

std::optional<std::string> optional_string(const nlohmann::json& args, const char* name) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null()) return std::nullopt;
  if (!it->is_string())
    throw tool_error{"argument '" + std::string{name} + "' must be a string, got " + type_of(*it)};
  return it->get<std::string>();
}

std::optional<int64_t> optional_int(const nlohmann::json& args, const char* name) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null()) return std::nullopt;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    const double v = it->get<double>();
    if (v == static_cast<double>(static_cast<int64_t>(v))) return static_cast<int64_t>(v);
  }
  throw tool_error{"argument '" + std::string{name} + "' must be an integer, got " + type_of(*it)};
}

bool optional_bool(const nlohmann::json& args, const char* name, bool fallback) {
  const auto it = args.find(name);
  if (it == args.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw tool_error{"argument '" + std::string{name} + "' must be true or false, got " +
                     type_of(*it)};
  return it->get<bool>();
}

tool_result run_tool(tool_session& session, const tool_call& call, const std::string& episode_id) {
  const auto start = std::chrono::steady_clock::now();
  tool_result result;
  result.episode_id = episode_id;
  result.call_id = call.call_id;
  result.tool = call.tool;
  tool_output out;
  const auto it = registry().find(call.tool);
  try {
    if (it == registry().end()) {
      std::string list;
      for (const auto& name : tool_names()) list += (list.empty() ? "" : ", ") + name;
      throw tool_error{"unknown tool '" + call.tool + "'; the tools are: " + list};
    }
    const auto args = parse_arguments(call.arguments_json, it->second.arguments);
    out = it->second.run(session, args);
  } catch (const tool_error& e) {
    out = tool_output{std::string{"Error: "} + e.what(), 1, true, false};
  } catch (const sandbox_error& e) {
    out = tool_output{std::string{"Error: "} + e.what(), 1, true, false};
  } catch (const std::exception& e) {
    // Ours, not the agent's (a full disk, a failed spawn): still an answer, never a dead actor.
    out = tool_output{std::string{"Error: the tool failed: "} + e.what(), 1, true, false};
  }
  bool truncated = out.truncated;
  result.output = limit_output(std::move(out.text), session.output_limit(), &truncated);
  result.truncated = truncated;
  result.exit_code = out.exit_code;
  result.is_error = out.is_error;
  result.duration_ms = std::chrono::duration<double, std::milli>(
                           std::chrono::steady_clock::now() - start).count();
  return result;
}

}  // namespace cuda_agent::tools
