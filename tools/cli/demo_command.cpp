#include "tools/cli/commands.hpp"
namespace cuda_agent::cli {
void add_demo_command(CLI::App&, invocation&) {}
}  // namespace cuda_agent::cli
