// Compiler output condensed for a language model: errors only (with the code line and caret
// that follow each), first errors first, duplicates dropped, paths relative to the solution,
// capped in length with a pointer to the full log.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cuda_agent::build {

struct diagnostics_options {
  // Prefixes replaced in every line, in order ("/abs/stage/" -> "").
  std::vector<std::pair<std::string, std::string>> rewrites;
  std::size_t max_chars = 4000;
  std::string full_log;  // named in the trailer when something was left out
};

std::string condense_diagnostics(std::string_view output, const diagnostics_options& options);

// Undefined symbols the linker reported, other than the Python C API (an extension module
// takes those from the interpreter that loads it).
std::vector<std::string> undefined_symbols(std::string_view linker_output);

}  // namespace cuda_agent::build
