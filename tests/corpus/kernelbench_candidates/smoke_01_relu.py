# A KernelBench-format candidate for corpus/tasks/smoke/smoke_01_relu.py (CPU): the same ReLU
# kernel as the workdir demonstration corpus/demos/smoke/smoke_01_relu, given to load_inline.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

relu_kernel = """
// ReLU.
extern "C" void relu_run(const float* x, float* y, long n) {
  for (long i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}
"""

relu_wrapper = """
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

torch::Tensor relu_forward(torch::Tensor x) {
  check_input(x, "x");
  auto y = torch::empty_like(x);
  relu_run(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
  return y;
}
"""

relu = load_inline(
    name="relu_inline",
    cpp_sources=[relu_kernel, relu_wrapper],
    functions=["relu_forward"],
    extra_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = relu

    def forward(self, x):
        return self.relu.relu_forward(x)
