#include <iostream>

#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {
namespace {

const char* type_word(setting_type type) {
  switch (type) {
    case setting_type::boolean: return "boolean";
    case setting_type::integer: return "integer";
    case setting_type::real: return "number";
    case setting_type::string: return "string";
    case setting_type::choice: return "choice";
  }
  return "?";
}

}  // namespace

void add_config_command(CLI::App& app, invocation& inv) {
  auto* config = app.add_subcommand("config", "Inspect settings");
  config->require_subcommand(1);
  config->add_subcommand("show", "Print the effective settings as TOML, with where each came from")
      ->callback([&inv] {
        inv.action = [&inv] {
          std::cout << inv.config.to_toml();
          return 0;
        };
      });
  config->add_subcommand("schema", "List every setting: key, type, default and meaning")
      ->callback([&inv] {
        inv.action = [] {
          for (const auto& spec : settings::schema()) {
            std::cout << spec.key << "  (" << type_word(spec.type);
            if (!spec.choices.empty()) {
              std::cout << ":";
              for (const auto& c : spec.choices) std::cout << " " << c;
            }
            if (spec.type == setting_type::integer)
              std::cout << ", " << spec.min << ".." << spec.max;
            std::cout << ", default " << spec.default_value << ")\n    " << spec.doc << "\n";
          }
          return 0;
        };
      });
}

}  // namespace cuda_agent::cli
