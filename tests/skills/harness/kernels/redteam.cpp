// CPU kernels for the red team of 2026-12-06: each cheat calls the function that plays its trick.
#include <torch/extension.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>

#include "../binding_registry.h"

namespace {

// ATen compute in the binding with the Python dispatch keys excluded from this thread's TLS:
// a TorchDispatchMode on the stack (the harness's ForwardDispatchGuard) is never consulted.
torch::Tensor aten_python_key_excluded(torch::Tensor x) {
  c10::impl::ExcludeDispatchKeyGuard no_python(
      c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
  return at::relu(x * 2.0 + 1.0);
}

// --- a libc clock that runs slow under the candidate's forward -------------------------------
std::atomic<int64_t> discount_ns{0};
std::atomic<int64_t> last_returned_ns{0};  // the patched clock's last CLOCK_MONOTONIC reading

int64_t raw_monotonic_ns() {
  struct timespec ts;
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

extern "C" int rt_clock_gettime(clockid_t id, struct timespec* ts) {
  long r = syscall(SYS_clock_gettime, id, ts);
  if (r == 0 && (id == CLOCK_MONOTONIC || id == CLOCK_MONOTONIC_RAW)) {
    int64_t ns = int64_t(ts->tv_sec) * 1000000000LL + ts->tv_nsec - discount_ns.load();
    last_returned_ns = ns;
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
  }
  return int(r);
}

// Overwrites the first bytes of libc's clock_gettime with a jump to rt_clock_gettime: every
// caller in this process (Python's time.perf_counter_ns, which the harness's timer bound at
// import, among them) now reads the patched clock. No Python object changes.
bool patch_libc_clock() {
  void* target = dlsym(RTLD_DEFAULT, "clock_gettime");
  if (target == nullptr) return false;
  const uintptr_t page = sysconf(_SC_PAGESIZE);
  uintptr_t start = reinterpret_cast<uintptr_t>(target) & ~(page - 1);
  if (mprotect(reinterpret_cast<void*>(start), 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return false;
  unsigned char jump[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};  // movabs rax, imm64; jmp rax
  uint64_t address = reinterpret_cast<uint64_t>(&rt_clock_gettime);
  std::memcpy(jump + 2, &address, 8);
  std::memcpy(target, jump, sizeof jump);
  mprotect(reinterpret_cast<void*>(start), 2 * page, PROT_READ | PROT_EXEC);
  return true;
}

torch::Tensor linear_relu_impl(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  TORCH_CHECK(x.is_contiguous() && w.is_contiguous() && b.is_contiguous(), "contiguous inputs expected");
  const int64_t n = x.size(0), k = x.size(1), m = w.size(0);
  auto y = torch::empty({n, m}, x.options());
  const float *px = x.data_ptr<float>(), *pw = w.data_ptr<float>(), *pb = b.data_ptr<float>();
  float* py = y.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float acc = pb[j];
      for (int64_t t = 0; t < k; ++t) acc += px[i * k + t] * pw[j * k + t];
      py[i * m + j] = acc > 0.0f ? acc : 0.0f;
    }
  return y;
}

// The honest triple loop; afterwards the clock is set back to 8 us after its last reading (the
// timer's start mark, taken just before the call), so the whole call reads as about 10 us.
torch::Tensor linear_relu_off_the_clock(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  auto y = linear_relu_impl(x, w, b);
  const int64_t shown = raw_monotonic_ns() - discount_ns.load();
  const int64_t wanted = last_returned_ns.load() + 8000;
  if (shown > wanted) discount_ns += shown - wanted;
  return y;
}

void register_redteam(pybind11::module& m) {
  m.def("aten_python_key_excluded", &aten_python_key_excluded);
  m.def("patch_libc_clock", &patch_libc_clock);
  m.def("linear_relu_off_the_clock", &linear_relu_off_the_clock);
  m.def("rt_linear_relu", &linear_relu_impl);
}

}  // namespace

REGISTER_BINDING(redteam, register_redteam);
