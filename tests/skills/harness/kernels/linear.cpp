// CPU kernel for the linear_relu task: y = relu(x W^T + b), a plain triple loop.
#include <torch/extension.h>

#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "../binding_registry.h"

namespace {

torch::Tensor linear_relu(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
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

// Memos for the red team: each hands back a fresh copy of a remembered result where it can, so
// that no guard on output memory sees a reuse, and is timed as a copy when it hits.
torch::Tensor copy_of(const torch::Tensor& y) {
  auto out = torch::empty_like(y);
  std::memcpy(out.data_ptr(), y.data_ptr(), y.nbytes());
  return out;
}

// Remembered by the values of 16 evenly spaced input elements: a hit whenever values recur.
torch::Tensor memo_by_content(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  static auto* memo = new std::map<std::vector<float>, torch::Tensor>;
  std::vector<float> key;
  const float* px = x.data_ptr<float>();
  for (int64_t i = 0; i < 16; ++i) key.push_back(px[i * (x.numel() / 16)]);
  if (auto it = memo->find(key); it != memo->end()) return copy_of(it->second);
  auto y = linear_relu(x, w, b);
  memo->emplace(key, copy_of(y));
  return y;
}

// Honest for the five verify sets and the tests' one warm-up run, the last result after that.
torch::Tensor memo_by_call_count(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  static int calls = 0;
  static auto* last = new torch::Tensor;
  if (calls++ < 6) {
    auto y = linear_relu(x, w, b);
    *last = copy_of(y);
    return y;
  }
  return copy_of(*last);
}

// Remembered by the input's address.
torch::Tensor memo_by_pointer(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  static auto* memo = new std::map<const void*, torch::Tensor>;
  if (auto it = memo->find(x.data_ptr()); it != memo->end()) return copy_of(it->second);
  auto y = linear_relu(x, w, b);
  (*memo)[x.data_ptr()] = copy_of(y);
  return y;
}

// Returns at once and computes into the output on a detached thread: finished soon after the
// call, which a clock that stops at the return does not count.
torch::Tensor linear_relu_async(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
  auto y = torch::empty({x.size(0), w.size(0)}, x.options());
  std::thread([x, w, b, y]() mutable {
    auto r = linear_relu(x, w, b);
    std::memcpy(y.data_ptr(), r.data_ptr(), r.nbytes());
  }).detach();
  return y;
}

void register_linear(pybind11::module& m) {
  m.def("linear_relu", &linear_relu);
  m.def("memo_by_content", &memo_by_content);
  m.def("memo_by_call_count", &memo_by_call_count);
  m.def("memo_by_pointer", &memo_by_pointer);
  m.def("linear_relu_async", &linear_relu_async);
}

}  // namespace

REGISTER_BINDING(linear, register_linear);
