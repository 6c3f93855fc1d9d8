// A rollout's episode ids, written and read in this one place: "RUN-0007" for the 8th episode of
// run RUN, "-resume2" when a resumed run started it, "-retry1" when it reruns an episode lost to
// an infrastructure failure ("RUN-0007-resume2-retry1").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cuda_agent {

struct episode_id_parts {
  std::string run_id;
  int32_t index = 0;
  int32_t resume = 0;  // 0: the run's first start
  int32_t retry = 0;   // 0: the first attempt
};

std::string format_episode_id(const episode_id_parts& parts);

// The parts of `id` when it is an episode id of run `run_id`; nullopt otherwise (another run's
// episode, or an id not made by format_episode_id).
std::optional<episode_id_parts> parse_episode_id(std::string_view id, std::string_view run_id);

// The parts of `id` when it is an episode id of any run, the run being the longest prefix that
// makes it one ("a-0001-0002" is episode 2 of run "a-0001"); nullopt otherwise.
std::optional<episode_id_parts> parse_episode_id(std::string_view id);

}  // namespace cuda_agent
