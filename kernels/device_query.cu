#include "kernels/device_query.hpp"

#include <cuda_runtime.h>

#include <vector>

#ifdef CUDA_AGENT_HAVE_NCCL
#include <nccl.h>
#endif

namespace cuda_agent {
namespace {

__global__ void fill_pattern(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * 3 + 1;
}

std::string describe(cudaError_t e, const char* what) {
  return std::string{what} + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
}

}  // namespace

gpu_report query_gpus() {
  gpu_report report;
  cudaRuntimeGetVersion(&report.runtime_version);
  cudaDriverGetVersion(&report.driver_version);
  int count = 0;
  if (const auto e = cudaGetDeviceCount(&count); e != cudaSuccess) {
    report.error = describe(e, "cudaGetDeviceCount");
    return report;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (const auto e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
      report.error = describe(e, "cudaGetDeviceProperties");
      continue;
    }
    report.devices.push_back({i, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                              static_cast<long long>(prop.totalGlobalMem), prop.l2CacheSize});
  }
  return report;
}

std::string run_gpu_smoke_test(int device) {
  constexpr int n = 1 << 20;
  if (const auto e = cudaSetDevice(device); e != cudaSuccess) return describe(e, "cudaSetDevice");
  int* d_out = nullptr;
  if (const auto e = cudaMalloc(&d_out, n * sizeof(int)); e != cudaSuccess)
    return describe(e, "cudaMalloc");
  std::string error;
  // Poison first, so that an element the kernel failed to write cannot look right.
  cudaMemset(d_out, 0xff, n * sizeof(int));
  fill_pattern<<<(n + 255) / 256, 256>>>(d_out, n);
  std::vector<int> host(n);
  if (auto e = cudaGetLastError(); e != cudaSuccess) {
    error = describe(e, "kernel launch");
  } else if (e = cudaMemcpy(host.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost);
             e != cudaSuccess) {
    error = describe(e, "cudaMemcpy");
  } else {
    for (int i = 0; i < n && error.empty(); ++i)
      if (host[i] != i * 3 + 1)
        error = "element " + std::to_string(i) + " is " + std::to_string(host[i]) + ", expected " +
                std::to_string(i * 3 + 1);
  }
  cudaFree(d_out);
  return error;
}

std::string nccl_version() {
#ifdef CUDA_AGENT_HAVE_NCCL
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
#else
  return {};
#endif
}

}  // namespace cuda_agent
