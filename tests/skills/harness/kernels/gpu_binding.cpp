// Bindings of kernels/gpu_elementwise.cu for the GPU red-team candidates.
#include <ATen/cuda/CUDAContext.h>
#include <torch/extension.h>

#include <c10/cuda/CUDAGuard.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "../binding_registry.h"

extern "C" void launch_relu_2x_plus_1(const float* x, float* y, long n, cudaStream_t stream);
extern "C" void launch_on_side_stream(const float* x, float* y, long n);
extern "C" void launch_illegal_access(float* y, cudaStream_t stream);
extern "C" void launch_relu_2x_plus_1_slowly(const float* x, float* y, long n, cudaStream_t stream);

namespace {

torch::Tensor fused_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_relu_2x_plus_1(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                        at::cuda::getCurrentCUDAStream());
  return y;
}

torch::Tensor side_stream_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_on_side_stream(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}

// Sakana-style output reuse: memory from the caching allocator, never written.
torch::Tensor empty_out(torch::Tensor x) { return torch::empty_like(x); }

torch::Tensor illegal_access(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_illegal_access(y.data_ptr<float>(), at::cuda::getCurrentCUDAStream());
  return y;
}

torch::Tensor slow_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  launch_relu_2x_plus_1_slowly(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                               at::cuda::getCurrentCUDAStream());
  return y;
}

// Memos over slow_forward: a fresh device copy of a remembered result where they can.
torch::Tensor copy_of(const torch::Tensor& y) {
  auto out = torch::empty_like(y);
  cudaMemcpyAsync(out.data_ptr(), y.data_ptr(), y.nbytes(), cudaMemcpyDeviceToDevice,
                  at::cuda::getCurrentCUDAStream());
  return out;
}

// Remembered by the values of 16 evenly spaced input elements, read back to the host.
torch::Tensor memo_by_content(torch::Tensor x) {
  static auto* memo = new std::map<std::vector<float>, torch::Tensor>;
  std::vector<float> key(16);
  const auto stream = at::cuda::getCurrentCUDAStream();
  for (int64_t i = 0; i < 16; ++i)
    cudaMemcpyAsync(&key[i], x.data_ptr<float>() + i * (x.numel() / 16), sizeof(float),
                    cudaMemcpyDeviceToHost, stream);
  cudaStreamSynchronize(stream);
  if (auto it = memo->find(key); it != memo->end()) return copy_of(it->second);
  auto y = slow_forward(x);
  memo->emplace(key, copy_of(y));
  return y;
}

// Honest for the five verify sets and one warm-up run, then the last result.
torch::Tensor memo_by_call_count(torch::Tensor x) {
  static int calls = 0;
  static auto* last = new torch::Tensor;
  if (calls++ < 6) {
    auto y = slow_forward(x);
    *last = copy_of(y);
    return y;
  }
  return copy_of(*last);
}

// Returns at once; a host thread launches the slow kernel 5 ms later, after the clock has
// stopped (the timer's launch pad and device-wide synchronisation last about a millisecond:
// a launch within them would be timed like any other).
torch::Tensor thread_launch_forward(torch::Tensor x) {
  auto y = torch::empty_like(x);
  std::thread([x, y]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    c10::cuda::CUDAGuard device(x.device());
    const auto stream = at::cuda::getCurrentCUDAStream();
    launch_relu_2x_plus_1_slowly(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(), stream);
    cudaStreamSynchronize(stream);
  }).detach();
  return y;
}

// --- CUDA's event timing rewritten from native code -----------------------------------------------
// Every cudaEventElapsedTime in this process, PyTorch's own runtime's included, ends in the
// driver's cuEventElapsedTime (the _v2 entry for CUDA 13, the first one for older callers). The
// first bytes of each are overwritten with a jump to a stand-in that reports 5 us: the child's
// CUDA-event timer then reads any forward as nearly free. No Python object changes.
int reports_5us(float* ms, void*, void*) {
  *ms = 0.005f;
  return 0;  // CUDA_SUCCESS
}

bool jump_to(void* target, void* replacement) {
  const uintptr_t page = sysconf(_SC_PAGESIZE);
  const uintptr_t start = reinterpret_cast<uintptr_t>(target) & ~(page - 1);
  if (mprotect(reinterpret_cast<void*>(start), 2 * page, PROT_READ | PROT_WRITE | PROT_EXEC) != 0) return false;
  unsigned char jump[12] = {0x48, 0xB8, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xE0};  // movabs rax, imm64; jmp rax
  const uint64_t address = reinterpret_cast<uint64_t>(replacement);
  std::memcpy(jump + 2, &address, 8);
  std::memcpy(target, jump, sizeof jump);
  return mprotect(reinterpret_cast<void*>(start), 2 * page, PROT_READ | PROT_EXEC) == 0;
}

// The number of driver entries patched (0: none found, and the candidate refuses to load).
int patch_event_timing() {
  std::vector<void*> patched;
  for (const unsigned version : {11000u, 12000u, 13000u}) {
    void* entry = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuEventElapsedTime", &entry, version, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || entry == nullptr)
      continue;
    bool seen = false;
    for (void* p : patched) seen = seen || p == entry;
    if (!seen && jump_to(entry, reinterpret_cast<void*>(&reports_5us))) patched.push_back(entry);
  }
  return static_cast<int>(patched.size());
}

void register_gpu_elementwise(pybind11::module& m) {
  m.def("slow_forward", &slow_forward);
  m.def("patch_event_timing", &patch_event_timing);
  m.def("memo_by_content", &memo_by_content);
  m.def("memo_by_call_count", &memo_by_call_count);
  m.def("fused_forward", &fused_forward);
  m.def("side_stream_forward", &side_stream_forward);
  m.def("empty_out", &empty_out);
  m.def("illegal_access", &illegal_access);
  m.def("thread_launch_forward", &thread_launch_forward);
}

}  // namespace

REGISTER_BINDING(gpu_elementwise, register_gpu_elementwise);
