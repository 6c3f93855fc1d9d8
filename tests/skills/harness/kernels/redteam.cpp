// CPU kernels for the red team of 2026-12-06: each cheat calls the function that plays its trick.
// Those that compute with ATen in the binding are in redteam_aten*.cpp: this file's module passes
// the harness's check of its symbols (native_code.py), so that its cheats meet the guards after it.
#include <torch/extension.h>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/inotify.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../binding_registry.h"

namespace {

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
  // libc's own address, through the GOT: no dlsym, which the symbol check refuses.
  void* target = reinterpret_cast<void*>(&clock_gettime);
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

// --- rewriting the output file after the runner wrote it ----------------------------------------
// The runner hands a CPU output over as a torch.save file in the exchange directory, which the
// child can write; the worker reads it only after the reply (and maps it MAP_PRIVATE, so even a
// later write to a page it has not touched shows). A native thread, started at import and asleep
// on inotify between requests, writes the right values over the returned ones as soon as the
// runner has closed the file: the timed forward itself returns a never-computed output at once.
std::mutex patch_mutex;
struct Pending {  // the last timed call's inputs (references: they stay alive here)
  torch::Tensor x, w, b;  // w undefined: the elementwise task, y = relu(2x + 1)
} pending;

torch::Tensor relu_2x_plus_1(const torch::Tensor& x) {
  auto y = torch::empty_like(x);
  const float* px = x.data_ptr<float>();
  float* py = y.data_ptr<float>();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float v = 2.0f * px[i] + 1.0f;
    py[i] = v > 0.0f ? v : 0.0f;
  }
  return y;
}

// Where the first tensor's bytes lie in a torch.save archive: the data of its "<name>/data/0"
// entry, stored uncompressed after the entry's local header.
long data_offset(const std::vector<unsigned char>& d) {
  for (size_t i = 0; i + 30 <= d.size(); ++i) {
    if (d[i] != 'P' || d[i + 1] != 'K' || d[i + 2] != 3 || d[i + 3] != 4) continue;
    const size_t name_len = d[i + 26] | (d[i + 27] << 8), extra_len = d[i + 28] | (d[i + 29] << 8);
    if (i + 30 + name_len > d.size()) continue;
    std::string name(d.begin() + i + 30, d.begin() + i + 30 + name_len);
    if (name.size() >= 7 && name.compare(name.size() - 7, 7, "/data/0") == 0) return long(i + 30 + name_len + extra_len);
  }
  return -1;
}

void patch_file(const std::string& path) {
  Pending in;
  {
    std::lock_guard<std::mutex> lock(patch_mutex);
    in = pending;
    pending = Pending();
  }
  if (!in.x.defined()) return;
  // The output, computed only now, long after the clock stopped.
  auto result = in.w.defined() ? linear_relu_impl(in.x, in.w, in.b) : relu_2x_plus_1(in.x);
  int fd = open(path.c_str(), O_RDWR);
  if (fd < 0) return;
  std::vector<unsigned char> data;
  unsigned char buffer[1 << 16];
  for (ssize_t got; (got = read(fd, buffer, sizeof buffer)) > 0;) data.insert(data.end(), buffer, buffer + got);
  const long offset = data_offset(data);
  if (offset >= 0) pwrite(fd, result.data_ptr(), result.nbytes(), offset);
  close(fd);
}

void patcher() {
  const char* tmp = std::getenv("TMPDIR");  // <exchange directory>/tmp
  if (tmp == nullptr) return;
  std::string directory(tmp);
  directory = directory.substr(0, directory.rfind('/'));
  int fd = inotify_init();
  if (fd < 0 || inotify_add_watch(fd, directory.c_str(), IN_CLOSE_WRITE) < 0) return;
  alignas(struct inotify_event) char events[4096];
  for (;;) {
    ssize_t len = read(fd, events, sizeof events);  // asleep between requests
    if (len <= 0) return;
    for (char* p = events; p < events + len;) {
      auto* e = reinterpret_cast<struct inotify_event*>(p);
      if (e->len && std::strncmp(e->name, "outputs-", 8) == 0) patch_file(directory + "/" + e->name);
      p += sizeof(struct inotify_event) + e->len;
    }
  }
}

bool start_patcher() {
  std::thread(patcher).detach();
  return true;
}

// The timed forward: keeps its inputs aside and returns memory it never writes, at once; the
// patcher computes the right values after the clock and writes them into the output file.
torch::Tensor linear_relu_file_rewritten(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  auto y = torch::empty({x.size(0), w.size(0)}, x.options());
  std::lock_guard<std::mutex> lock(patch_mutex);
  pending.x = x, pending.w = w, pending.b = b;
  return y;
}

torch::Tensor relu_file_rewritten(torch::Tensor x) {
  auto y = torch::empty_like(x);
  std::lock_guard<std::mutex> lock(patch_mutex);
  pending.x = x, pending.w = torch::Tensor(), pending.b = torch::Tensor();
  return y;
}

torch::Tensor rt_relu_2x_plus_1(torch::Tensor x) { return relu_2x_plus_1(x); }

// --- slowing the baselines down from the child ---------------------------------------------------
// Native threads started at import thrash the caches and memory bus whenever the candidate's own
// forward is not running, so eager and torch.compile, timed in the worker on the same host, run
// slower. All of them sleep together for 1 ms of every 4 (wait_quiet, which looks for a moment
// with no running thread in the child before each timed set, finds one there), and they stand
// still while the candidate's forward runs.
std::atomic<int> in_forward{0};

int64_t now_ns() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

void sleep_ns(int64_t ns) {
  struct timespec ts{time_t(ns / 1000000000LL), long(ns % 1000000000LL)};
  nanosleep(&ts, nullptr);
}

// Whether the runner's main thread is asleep (blocked in its read of the next request: the
// worker is busy, timing its baselines or comparing).
bool main_thread_asleep() {
  static const std::string path = "/proc/self/task/" + std::to_string(getpid()) + "/stat";
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  char buffer[512];
  ssize_t n = read(fd, buffer, sizeof buffer - 1);
  close(fd);
  if (n <= 0) return false;
  buffer[n] = 0;
  const char* state = std::strrchr(buffer, ')');
  return state != nullptr && state[1] == ' ' && state[2] == 'S';
}

void interferer() {
  std::vector<unsigned char> buffer(32 << 20);
  size_t at = 0;
  for (;;) {
    const int64_t phase = now_ns() % 4000000;
    if (in_forward.load(std::memory_order_relaxed) || !main_thread_asleep()) {
      sleep_ns(20000);
      continue;
    }
    if (phase < 1000000) {
      sleep_ns(1000000 - phase);
      continue;
    }
    for (int i = 0; i < 1024; ++i, at = (at + 64) % buffer.size()) buffer[at] += 1;  // a cache line each
  }
}

bool start_interference(int64_t threads) {
  for (int64_t i = 0; i < threads; ++i) std::thread(interferer).detach();
  return true;
}

// The honest fused kernel; the interference stands still while it runs.
torch::Tensor relu_quietly(torch::Tensor x) {
  in_forward = 1;
  auto y = relu_2x_plus_1(x);
  in_forward = 0;
  return y;
}

void register_redteam(pybind11::module& m) {
  m.def("start_interference", &start_interference);
  m.def("relu_quietly", &relu_quietly);
  m.def("relu_file_rewritten", &relu_file_rewritten);
  m.def("rt_relu_2x_plus_1", &rt_relu_2x_plus_1);
  m.def("start_patcher", &start_patcher);
  m.def("linear_relu_file_rewritten", &linear_relu_file_rewritten);
  m.def("patch_libc_clock", &patch_libc_clock);
  m.def("linear_relu_off_the_clock", &linear_relu_off_the_clock);
  m.def("rt_linear_relu", &linear_relu_impl);
}

}  // namespace

REGISTER_BINDING(redteam, register_redteam);
