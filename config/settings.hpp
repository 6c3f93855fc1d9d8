// The validated settings of one cuda-agent invocation.
//
// Settings come from three layers, later ones winning: built-in defaults, a TOML file
// (`--config FILE`), and `--set KEY=VALUE` overrides. Every key is declared in the schema below;
// an unknown key, a value of the wrong type or out of range is a `config_error` naming the key.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace cuda_agent {

struct config_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class setting_type { boolean, integer, real, string, choice };

struct setting_spec {
  std::string key;  // "section.name"
  setting_type type;
  std::string default_value;         // as it would be written in TOML, without quotes
  std::vector<std::string> choices;  // for setting_type::choice
  int64_t min = INT64_MIN;           // for integers
  int64_t max = INT64_MAX;
  std::string doc;  // one line, shown by `cuda-agent config schema`
};

using setting_value = std::variant<bool, int64_t, double, std::string>;

class settings {
 public:
  // Every key cuda-agent understands, in documentation order.
  static const std::vector<setting_spec>& schema();

  settings();  // the defaults

  // Reads a TOML file; throws config_error naming the file, line and key on any problem.
  void load_file(const std::filesystem::path& path);
  // Parses "section.key=value" (the value written as on the command line: no quotes needed).
  void apply_override(std::string_view assignment);

  bool get_bool(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_real(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;  // strings and choices

  // The effective settings as a TOML document, with where each value came from.
  std::string to_toml() const;

 private:
  struct entry {
    setting_value value;
    std::string origin;  // "default", a file path, or "--set"
  };
  const entry& find(std::string_view key, setting_type type) const;
  void assign(const setting_spec& spec, setting_value value, std::string origin);

  std::map<std::string, entry, std::less<>> values_;
};

}  // namespace cuda_agent
