#include "actors/harness/cpu_reservation.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace cuda_agent::harness {
namespace {

cpu_set_t allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) CPU_SET(0, &set);
  return set;
}

}  // namespace

std::vector<int> timing_cpus(const std::string& spec, const std::string& device) {
  const cpu_set_t allowed = allowed_cpus();
  std::vector<int> cpus;
  if (spec == "none" || device != "cpu") return cpus;
  if (spec == "auto") {
    if (CPU_COUNT(&allowed) < 2) return cpus;
    for (int c = CPU_SETSIZE - 1; c >= 0; --c)
      if (CPU_ISSET(c, &allowed)) return {c};
  }
  size_t at = 0;
  while (at <= spec.size()) {
    const size_t end = std::min(spec.find(',', at), spec.size());
    const std::string item = spec.substr(at, end - at);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 4)
      throw std::invalid_argument{"harness.timing_cpus = '" + spec +
                                  "': give auto, none or core numbers separated by commas (e.g. 3 or 2,3)"};
    const int c = std::stoi(item);
    if (c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed))
      throw std::invalid_argument{"harness.timing_cpus: core " + item +
                                  " is not one this process may run on; name one of its cores, or auto"};
    if (std::find(cpus.begin(), cpus.end(), c) == cpus.end()) cpus.push_back(c);
    at = end + 1;
  }
  if (static_cast<int>(cpus.size()) >= CPU_COUNT(&allowed))
    throw std::invalid_argument{"harness.timing_cpus = '" + spec +
                                "' names every core this process has; leave at least one for everything else"};
  return cpus;
}

bool reserve_timing_cpus(const std::vector<int>& cpus) {
  if (cpus.empty()) return true;
  cpu_set_t rest = allowed_cpus();
  for (int c : cpus) CPU_CLR(c, &rest);
  bool ok = true;
  // Every thread: CAF's scheduler and the CUDA runtime may have started some already.
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    const pid_t tid = static_cast<pid_t>(std::stol(task.path().filename().string()));
    if (::sched_setaffinity(tid, sizeof rest, &rest) != 0 && errno != ESRCH) ok = false;
  }
  return ok && !ec;
}

}  // namespace cuda_agent::harness
