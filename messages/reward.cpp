#include "messages/messages.hpp"

namespace cuda_agent {
namespace {

// b(t, t0): more than 5% faster than the baseline. Comparisons with NaN are false, so a time
// that was not measured is never faster.
bool faster(double t, double t0) { return t0 > 0 && (t0 - t) / t0 > 0.05; }

}  // namespace

int32_t milestone_reward(bool correct, double t_new_ms, double t_eager_ms, double t_compile_ms) {
  if (!correct) return -1;
  const bool beats_eager = faster(t_new_ms, t_eager_ms);
  if (beats_eager && faster(t_new_ms, t_compile_ms)) return 3;
  return beats_eager ? 2 : 1;
}

}  // namespace cuda_agent
