// The CPU cores that a CPU job's timed runs hold (harness.timing_cpus).
//
// Timed runs on a shared host are true only if nothing else of ours runs on their cores. The
// process that evaluates on CPU (a rollout, `cuda-agent check`) keeps every other thread of its
// own off those cores, and so everything it starts later: compilers, episode tools, harness
// workers and candidates outside their timed runs. The harness worker moves itself and the
// candidate's child onto them for the timed runs only, one job at a time on the host
// (skills/harness/timing.py, held_cores).
#pragma once

#include <string>
#include <vector>

namespace cuda_agent::harness {

// The cores named by a harness.timing_cpus value for a job on `device`: "auto" is the last core
// this process may run on, where it may run on at least two and the device is the CPU; "none",
// a GPU device, or a single-core host hold none; otherwise a comma-separated list of core
// numbers. Throws std::invalid_argument with a one-line reason for anything else, or for a list
// that would leave this process no core of its own.
std::vector<int> timing_cpus(const std::string& spec, const std::string& device);

// Takes `cpus` away from every thread of this process (threads and processes started later
// inherit the rest). Nothing to do for an empty list; returns false where the kernel refused.
bool reserve_timing_cpus(const std::vector<int>& cpus);

}  // namespace cuda_agent::harness
