// The nine agent tools: Bash, Read, Write, Edit, MultiEdit, Glob, Grep, BashOutput, KillBash.
// Each is a plain function over the episode's tool_session and the call's JSON arguments
// (names in skills/tools/<Tool>.json); run_tool() dispatches a tool_call and never throws.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "actors/tools/tool_session.hpp"
#include "messages/messages.hpp"
#include "messages/tool_names.hpp"

namespace cuda_agent::tools {

// What a tool gives back before it becomes a tool_result.
struct tool_output {
  std::string text;
  int exit_code = 0;
  bool is_error = false;
  bool truncated = false;
};

// The tools the registry implements, by name (sorted); messages/tool_names.hpp lists the nine the
// contract promises, and a test keeps the two equal.
std::vector<std::string> implemented_tools();
// The arguments a tool takes (as in skills/tools/<Tool>.json); empty for an unknown tool.
const std::vector<std::string>& tool_arguments(const std::string& tool);

// Runs one call: unknown tools, bad arguments and failures become error results naming the
// problem; output longer than sandbox.output_limit_bytes is cut with a marker.
tool_result run_tool(tool_session& session, const tool_call& call, const std::string& episode_id);

// `build`, `verify` or `profile` when the command (trimmed) is exactly one of them: those are
// run by the compiler and GPU pools, not in the sandbox. Nothing otherwise.
std::optional<std::string> routed_command(std::string_view command);

// Cuts text longer than `limit` bytes (at a UTF-8 character boundary) and appends a marker
// saying how much was left out. Invalid UTF-8 is replaced, so that the text is valid JSON.
std::string limit_output(std::string text, std::size_t limit, bool* truncated,
                         std::size_t more_dropped = 0);
std::string valid_utf8(std::string_view text);

// --- Argument access: each throws tool_error naming the argument ---------------------------------

// The arguments object; throws tool_error if the text is not a JSON object or names an argument
// the tool does not have.
nlohmann::json parse_arguments(const std::string& arguments_json,
                               const std::vector<std::string>& known);
std::string required_string(const nlohmann::json& args, const char* name);
std::optional<std::string> optional_string(const nlohmann::json& args, const char* name);
std::optional<int64_t> optional_int(const nlohmann::json& args, const char* name);
bool optional_bool(const nlohmann::json& args, const char* name, bool fallback);

// --- The tools (file_tools.cpp, shell_tools.cpp) -------------------------------------------------
tool_output read_tool(tool_session& s, const nlohmann::json& args);
tool_output write_tool(tool_session& s, const nlohmann::json& args);
tool_output edit_tool(tool_session& s, const nlohmann::json& args);
tool_output multi_edit_tool(tool_session& s, const nlohmann::json& args);
tool_output glob_tool(tool_session& s, const nlohmann::json& args);
tool_output grep_tool(tool_session& s, const nlohmann::json& args);
tool_output bash_tool(tool_session& s, const nlohmann::json& args);
tool_output bash_output_tool(tool_session& s, const nlohmann::json& args);
tool_output kill_bash_tool(tool_session& s, const nlohmann::json& args);

}  // namespace cuda_agent::tools
