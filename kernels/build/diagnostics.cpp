#include "kernels/build/diagnostics.hpp"

#include <regex>
#include <set>
#include <sstream>

namespace cuda_agent::build {
namespace {

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  std::istringstream in{std::string(text)};
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string rewrite(std::string line, const diagnostics_options& options) {
  for (const auto& [from, to] : options.rewrites) {
    if (from.empty()) continue;
    for (size_t at = line.find(from); at != std::string::npos; at = line.find(from, at + to.size()))
      line.replace(at, from.size(), to);
  }
  return line;
}

// "file:12:5: error: ...", "file(12): error: ..." (nvcc), "error: ..." (drivers, nvcc),
// "...: undefined reference to `x'" (ld), "ld: ..." lines.
const std::regex& error_line() {
  static const std::regex re(
      R"((^|: |\) ?: )(fatal error|error|catastrophic error)( [A-Za-z0-9#]+)?:|undefined reference to|multiple definition of|cannot find -l)");
  return re;
}
const std::regex& any_diagnostic() {
  static const std::regex re(
      R"(^\S.*(:\d+:\d+: |\(\d+\): )(warning|note|remark)|^In file included from|^\s+from |^[^ ].*: In (function|instantiation|member function|constructor)|^compilation terminated|^collect2: |^\S+: note: |^\d+ errors? detected|^Error limit reached)");
  return re;
}

}  // namespace

std::string condense_diagnostics(std::string_view output, const diagnostics_options& options) {
  const auto lines = split_lines(output);
  std::vector<std::string> blocks;
  std::set<std::string> seen;
  size_t total_errors = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!std::regex_search(lines[i], error_line())) continue;
    if (lines[i].rfind("collect2: error: ld returned", 0) == 0) continue;  // says nothing new
    ++total_errors;
    std::string block = rewrite(lines[i], options);
    // The source line and caret (and nvcc's context lines) follow until the next diagnostic.
    for (size_t j = i + 1, kept = 0; j < lines.size() && kept < 4; ++j, ++kept) {
      if (std::regex_search(lines[j], error_line()) || std::regex_search(lines[j], any_diagnostic()))
        break;
      if (lines[j].find_first_not_of(" \t") == std::string::npos) break;
      block += "\n" + rewrite(lines[j], options);
    }
    if (seen.insert(rewrite(lines[i], options)).second) blocks.push_back(std::move(block));
  }
  if (blocks.empty()) {
    // No line looked like an error (a killed compiler, a crash): keep the tail, which says why.
    std::string tail;
    for (size_t i = lines.size() > 20 ? lines.size() - 20 : 0; i < lines.size(); ++i)
      tail += rewrite(lines[i], options) + "\n";
    blocks.push_back(tail);
  }

  std::string out;
  size_t shown = 0;
  for (const auto& block : blocks) {
    if (out.size() + block.size() + 1 > options.max_chars && shown > 0) break;
    out += block.substr(0, options.max_chars) + "\n";
    ++shown;
  }
  if (shown < blocks.size() || total_errors > blocks.size()) {
    std::ostringstream trailer;
    trailer << "[" << blocks.size() - shown << " more distinct errors not shown";
    if (total_errors > blocks.size()) trailer << ", " << total_errors - blocks.size() << " repeats dropped";
    trailer << "; full log: " << options.full_log << "]\n";
    out += trailer.str();
  }
  return out;
}

std::vector<std::string> undefined_symbols(std::string_view linker_output) {
  static const std::regex re(R"(undefined reference to [`']([^']+)')");
  std::vector<std::string> symbols;
  std::set<std::string> seen;
  for (const auto& line : split_lines(linker_output)) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    const std::string symbol = m[1];
    if (symbol.rfind("Py", 0) == 0 || symbol.rfind("_Py", 0) == 0) continue;
    if (seen.insert(symbol).second) symbols.push_back(symbol);
  }
  return symbols;
}

}  // namespace cuda_agent::build
