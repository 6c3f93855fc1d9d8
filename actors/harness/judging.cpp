#include "actors/harness/judging.hpp"

namespace cuda_agent::harness {

judging_parameters judging_from(const settings& config) {
  judging_parameters j;
  j.atol = config.get_real("harness.atol");
  j.rtol = config.get_real("harness.rtol");
  j.input_sets = static_cast<int32_t>(config.get_int("harness.input_sets"));
  j.warmup_runs = static_cast<int32_t>(config.get_int("harness.warmup_runs"));
  j.timed_runs = static_cast<int32_t>(config.get_int("harness.timed_runs"));
  j.max_cv = config.get_real("harness.max_cv");
  j.candidate_timeout_s = static_cast<double>(config.get_int("harness.candidate_timeout_s"));
  j.memory_limit_mb = config.get_int("harness.memory_limit_mb");
  j.cpu_threads = static_cast<int32_t>(config.get_int("harness.cpu_threads"));
  j.compile_mode = config.get_string("harness.compile_mode");
  return j;
}

}  // namespace cuda_agent::harness
