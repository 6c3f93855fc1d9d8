#include "messages/reward.hpp"

#include <cmath>

namespace cuda_agent {
namespace {

// b(t, t0). Every comparison with NaN is false, so an unmeasured time is never faster.
bool faster(double t, double t0) { return t0 > 0 && (t0 - t) / t0 > 0.05; }

nlohmann::json number_or_null(double x) {
  return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
}

}  // namespace

int32_t milestone_reward(bool correct, double t_new_ms, double t_eager_ms, double t_compile_ms) {
  if (!correct) return -1;
  const bool beats_eager = faster(t_new_ms, t_eager_ms);
  if (beats_eager && faster(t_new_ms, t_compile_ms)) return 3;
  return beats_eager ? 2 : 1;
}

nlohmann::json check_json(const reward_record& record) {
  return {
      {"compiled", record.compiled},
      {"correct", record.correct},
      {"violations", record.violations},
      {"reward", record.reward},
      {"t_eager_ms", number_or_null(record.t_eager_ms)},
      {"t_compile_ms", number_or_null(record.t_compile_ms)},
      {"t_new_ms", number_or_null(record.t_new_ms)},
      {"speedup_eager", number_or_null(record.speedup_eager)},
      {"speedup_compile", number_or_null(record.speedup_compile)},
      {"error", record.error.empty() ? nlohmann::json(nullptr) : nlohmann::json(record.error)},
      {"timing",
       {{"baseline", record.timing.baseline},
        {"baseline_age_s", number_or_null(record.timing.baseline_age_s)},
        {"cv_eager", number_or_null(record.timing.cv_eager)},
        {"cv_compile", number_or_null(record.timing.cv_compile)},
        {"cv_new", number_or_null(record.timing.cv_new)},
        {"measurements", record.timing.measurements},
        {"reliable", record.timing.reliable}}},
  };
}

}  // namespace cuda_agent
