// Bash, BashOutput and KillBash: commands run in the episode's sandbox, in the foreground (to
// completion or the timeout) or in the background (polled with BashOutput, ended with KillBash).
#include <regex>

#include "actors/tools/tools.hpp"

namespace cuda_agent::tools {
namespace {

std::shared_ptr<background_process> find_shell(tool_session& s, const std::string& id) {
  auto process = s.background(id);
  if (!process) {
    std::string known;
    for (const auto& k : s.background_ids()) known += (known.empty() ? "" : ", ") + k;
    throw tool_error{"no background command '" + id + "'" +
                     (known.empty() ? std::string{"; none was started"}
                                    : "; the ones started are: " + known)};
  }
  return process;
}

std::string keep_matching_lines(const std::string& text, const std::string& filter) {
  std::regex re;
  try {
    re = std::regex{filter};
  } catch (const std::regex_error& e) {
    throw tool_error{"argument 'filter' is not a valid regular expression: " +
                     std::string{e.what()}};
  }
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    auto end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const auto line = text.substr(start, end - start);
    if (std::regex_search(line, re)) out += line + "\n";
    start = end + 1;
  }
  return out;
}

}  // namespace

tool_output bash_tool(tool_session& s, const nlohmann::json& args) {
  const auto command = required_string(args, "command");
  const auto& settings = s.box().settings();
  const auto timeout_ms = optional_int(args, "timeout");
  const bool background = optional_bool(args, "run_in_background", false);
  (void)optional_string(args, "description");  // for the reader of the log; checked, not used
  if (command.find_first_not_of(" \t\r\n") == std::string::npos)
    throw tool_error{"argument 'command' is empty"};
  if (timeout_ms && (*timeout_ms < 1 || *timeout_ms > settings.max_timeout.count()))
    throw tool_error{"argument 'timeout' must be between 1 and " +
                     std::to_string(settings.max_timeout.count()) + " milliseconds"};
  if (const auto routed = routed_command(command))
    throw tool_error{"`" + *routed + "` is carried out by the episode, not in the shell; "
                     "this call did not reach it"};

  if (background) {
    const auto limit = timeout_ms ? std::chrono::milliseconds{*timeout_ms} : settings.max_timeout;
    auto id = s.add_background(command, s.box().start(command, limit));
    return {"Started in the background as " + id + " (killed after " +
            std::to_string(limit.count()) + " ms). Read its output with BashOutput "
            "{\"bash_id\": \"" + id + "\"}; end it with KillBash."};
  }

  const auto limit = timeout_ms ? std::chrono::milliseconds{*timeout_ms} : settings.default_timeout;
  const auto r = s.box().run(command, limit);
  tool_output out;
  out.text = r.out;
  if (!r.err.empty()) {
    if (!out.text.empty() && out.text.back() != '\n') out.text += '\n';
    out.text += r.err;
  }
  if (!out.text.empty() && out.text.back() != '\n') out.text += '\n';
  if (r.output_truncated) {
    out.truncated = true;
    out.text += "[output truncated: the command wrote more than " +
                std::to_string(settings.output_limit_bytes) + " bytes to a stream]\n";
  }
  if (r.timed_out) {
    out.exit_code = 124;
    out.text += "[timed out after " + std::to_string(limit.count()) +
                " ms; the command and every process it started were killed]";
  } else if (r.signaled) {
    out.exit_code = 128 + r.term_signal;
    out.text += "[" + r.describe() + "]";
  } else if (r.exit_code != 0) {
    out.exit_code = r.exit_code;
    out.text += "[exit code " + std::to_string(r.exit_code) + "]";
  } else if (out.text.empty()) {
    out.text = "(no output)";
  }
  while (!out.text.empty() && out.text.back() == '\n') out.text.pop_back();
  return out;
}

tool_output bash_output_tool(tool_session& s, const nlohmann::json& args) {
  const auto id = required_string(args, "bash_id");
  const auto filter = optional_string(args, "filter");
  auto process = find_shell(s, id);
  auto snap = process->take_output();
  tool_output out;
  out.text = filter ? keep_matching_lines(snap.output, *filter) : snap.output;
  if (!out.text.empty() && out.text.back() != '\n') out.text += '\n';
  if (snap.dropped_bytes > 0) {
    out.truncated = true;
    out.text += "[" + std::to_string(snap.dropped_bytes) +
                " bytes of output were dropped because nobody read them; poll more often]\n";
  }
  if (snap.output.empty()) out.text += "(no new output)\n";
  out.text += "[" + id + ": " + snap.describe() + "]";
  if (!snap.running) out.exit_code = snap.exited ? snap.exit_code : 128 + snap.term_signal;
  return out;
}

tool_output kill_bash_tool(tool_session& s, const nlohmann::json& args) {
  const auto id = required_string(args, "bash_id");
  auto process = find_shell(s, id);
  if (process->wait_for(std::chrono::milliseconds{0}))
    return {id + " had already ended (" + process->state().describe() + ")"};
  process->kill();
  return {"Killed " + id + " and every process it started"};
}

}  // namespace cuda_agent::tools
