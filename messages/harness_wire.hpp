// The harness wire: what a harness worker (skills/harness/worker.py) is sent for one job. One flat
// msgpack map holds the fields of harness_job and those of the job's judging_parameters
// (messages.hpp); skills/harness/wire.py declares the same names with the same defaults for
// Python, and tests/actors/harness/harness_wire_test.cpp fails when a field or a default exists on one
// side only. The worker refuses a field it does not declare.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "messages/messages.hpp"

namespace cuda_agent {

struct harness_job {
  std::string op;  // "evaluate", "verify" or "profile"
  std::string job_id;
  std::string episode_id;
  std::string task_path;
  std::string solution_dir;
  std::string module_path;
  std::string device = "cpu";
  uint64_t seed = 0;  // of the verification's input sets; 0: a random one
  // The profiler slot's own, not the job's: they say where a compiled baseline may be cached
  // (used only while this job's eager time agrees with it) and which cores the slot holds.
  std::string baseline_cache_dir;
  double baseline_max_age_s = 86400;
  std::vector<int32_t> timing_cpus;
};
CUDA_AGENT_FIELDS(harness_job, op, job_id, episode_id, task_path, solution_dir, module_path, device,
                  seed, baseline_cache_dir, baseline_max_age_s, timing_cpus);

}  // namespace cuda_agent
