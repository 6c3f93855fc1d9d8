// The paper's milestone reward and the `cuda-agent check --json` rendering of a reward_record.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "messages/messages.hpp"

namespace cuda_agent {

// b(t, t0) = (t0 - t) / t0 > 5%: -1 when not correct; 3 when faster than both eager and
// torch.compile; 2 when faster than eager only; 1 otherwise. Exactly 5% is not faster, and a
// time that was not measured (NaN) or a baseline that is not positive never is.
int32_t milestone_reward(bool correct, double t_new_ms, double t_eager_ms, double t_compile_ms);

// The one-line JSON object of `cuda-agent check --json` (docs/ARCHITECTURE.md, "The harness"):
// compiled, correct, violations, reward, t_eager_ms, t_compile_ms, t_new_ms, speedup_eager,
// speedup_compile, error, timing (timing_quality's fields); NaN times and speed-ups and an empty
// error are null.
// episode_id and job_id are not part of it.
nlohmann::json check_json(const reward_record& record);

}  // namespace cuda_agent
