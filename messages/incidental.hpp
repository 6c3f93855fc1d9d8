// What a message holds that is incidental to an episode's outcome. Two honest runs of the same
// episode, from the same policy answers, differ in these fields and nowhere else:
// - clock: readings of a clock (when it started, how long it took). They differ even when every
//   answer is read back from the log, so hermetic replay drops them too.
// - measured: what real work reports about itself besides its result: cache hits, the paths of
//   shared caches, measured times and the speed-ups and spreads made from them. Live replay
//   (`cuda-agent replay --live`, actors/replay.cpp) re-runs that work and drops them as well;
//   what remains (a build's success and diagnostics, a verdict, the reward, every tool's output)
//   decides the outcome, and the first difference there is a real divergence.
// Each list names top-level fields of the message type; the type's definition is in messages.hpp.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cuda_agent {

struct incidental_fields {
  std::vector<std::string> clock;
  std::vector<std::string> measured;
};

// The incidental fields of the message type named `type` (empty lists for a type that has none).
const incidental_fields& incidental_fields_of(std::string_view type);

// Text with every measured reading masked: each decimal number (digits, '.', digits) becomes '#'.
// Tool output and the observations built from it quote measured times ("median 0.0354 ms",
// "cv 0.202"); whole numbers (line numbers, sizes, run counts) are kept and compared.
std::string mask_measured_numbers(const std::string& text);

}  // namespace cuda_agent
