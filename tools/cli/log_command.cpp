// Placeholder until the message-log commands land.
#include "tools/cli/commands.hpp"
namespace cuda_agent::cli {
void add_log_command(CLI::App&, invocation&) {}
}  // namespace cuda_agent::cli
