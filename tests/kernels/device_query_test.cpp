// Runs on hosts built with CUDA; where the runtime finds no GPU (a CPU-only CI machine) the
// device tests are skipped, saying so.
#include <gtest/gtest.h>

#include "kernels/device_query.hpp"

namespace cuda_agent {
namespace {

TEST(device_query, reports_the_runtime_version) {
  const auto report = query_gpus();
  EXPECT_GE(report.runtime_version, 12000);
}

TEST(device_query, a_kernel_runs_and_writes_every_element_on_each_gpu) {
  const auto report = query_gpus();
  if (report.devices.empty()) GTEST_SKIP() << "no GPU here: " << report.error;
  for (const auto& device : report.devices) {
    EXPECT_GE(device.compute_major, 7) << device.name;
    EXPECT_GT(device.multiprocessors, 0);
    EXPECT_EQ(run_gpu_smoke_test(device.index), "") << device.name;
  }
}

}  // namespace
}  // namespace cuda_agent
