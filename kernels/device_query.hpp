// What the CUDA runtime reports about this host's GPUs, and a smoke test that a kernel really
// runs on one. Built only where a CUDA toolkit is found (CUDA_AGENT_HAVE_CUDA).
#pragma once

#include <string>
#include <vector>

namespace cuda_agent {

struct gpu_device_info {
  int index = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int multiprocessors = 0;
  long long global_memory_bytes = 0;
  int l2_cache_bytes = 0;
  // "sm_90": the only architecture the kernel build needs to target for this device.
  std::string arch() const { return "sm_" + std::to_string(compute_major * 10 + compute_minor); }
};

struct gpu_report {
  int runtime_version = 0;  // e.g. 13000
  int driver_version = 0;   // 0 when no driver is installed
  std::vector<gpu_device_info> devices;
  std::string error;  // why no devices were listed, if none were
};

gpu_report query_gpus();

// Launches a kernel that writes i*3+1 into n elements and checks every value on the host.
// Returns an empty string on success, otherwise what went wrong.
std::string run_gpu_smoke_test(int device);

// NCCL's version as "2.28.9", or empty where NCCL was not built in.
std::string nccl_version();

}  // namespace cuda_agent
