"""Starter patterns, part B: fused operator sequences."""
from .patterns_a import (HEADER, LAYERNORM_BINDING, LAYERNORM_CPU, LAYERNORM_CUDA, ROWS_TASK,
                         UNARY_MODEL_NEW, unary)

BINARY_TASK = HEADER + '''

class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return {expr}


rows = {rows}
cols = {cols}


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

ADD_RELU = {
    "name": "add_relu", "category": "fused", "operators": ["torch.add", "torch.relu"],
    "task": BINARY_TASK.replace("{doc}", "Sum of two tensors, then ReLU.")
                       .replace("{expr}", "torch.relu(x + y)"),
    "sizes": {"smoke": {"rows": 256, "cols": 256}, "bench": {"rows": 16384, "cols": 16384}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return cuda_extension.add_relu_forward(x, y)
''',
    "binding": '''
extern "C" void add_relu_run(const float* x, const float* y, float* out, long n@SD);

static torch::Tensor add_relu_forward(torch::Tensor x, torch::Tensor y) {
  check_input(x, "x");
  check_input(y, "y");
  TORCH_CHECK(x.sizes() == y.sizes(), "x and y must have the same shape");
  auto out = torch::empty_like(x);
  @STREAM
  add_relu_run(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(), x.numel()@S);
  @POST
  return out;
}

static void register_add_relu(pybind11::module& m) { m.def("add_relu_forward", &add_relu_forward); }
REGISTER_BINDING(add_relu, register_add_relu)
''',
    "cpu": '''// relu(x + y) in one pass.
extern "C" void add_relu_run(const float* x, const float* y, float* out, long n) {
  for (long i = 0; i < n; ++i) {
    const float v = x[i] + y[i];
    out[i] = v > 0.0f ? v : 0.0f;
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
@ELEMENTWISE
// relu(x + y) in one pass, float4 loads (n is a multiple of 4 here; the tail is handled anyway).
__global__ void add_relu_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                float* __restrict__ out, long n) {
  const long n4 = n / 4;
  const long stride = (long)gridDim.x * blockDim.x;
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 a = reinterpret_cast<const float4*>(x)[i];
    const float4 b = reinterpret_cast<const float4*>(y)[i];
    float4 r;
    r.x = fmaxf(a.x + b.x, 0.0f);
    r.y = fmaxf(a.y + b.y, 0.0f);
    r.z = fmaxf(a.z + b.z, 0.0f);
    r.w = fmaxf(a.w + b.w, 0.0f);
    reinterpret_cast<float4*>(out)[i] = r;
  }
  for (long i = n4 * 4 + blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = fmaxf(x[i] + y[i], 0.0f);
}

extern "C" void add_relu_run(const float* x, const float* y, float* out, long n,
                             cudaStream_t stream) {
  add_relu_kernel<<<blocks_for(n / 4 + 1), 256, 0, stream>>>(x, y, out, n);
}
''',
}

CENTER_ROWS = {
    "name": "center_rows", "category": "fused", "operators": ["torch.mean", "torch.sub"],
    "task": ROWS_TASK.replace("{doc}", "Each row minus its mean.")
                     .replace("{expr}", "x - torch.mean(x, dim=-1, keepdim=True)"),
    "sizes": {"smoke": {"rows": 256, "cols": 256}, "bench": {"rows": 131072, "cols": 4096}},
    "model_new": UNARY_MODEL_NEW.format(fn="center_rows_forward"),
    "binding": '''
extern "C" void center_rows_run(const float* x, float* y, long rows, long cols@SD);

static torch::Tensor center_rows_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D");
  auto y = torch::empty_like(x);
  @STREAM
  center_rows_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1)@S);
  @POST
  return y;
}

static void register_center_rows(pybind11::module& m) {
  m.def("center_rows_forward", &center_rows_forward);
}
REGISTER_BINDING(center_rows, register_center_rows)
''',
    "cpu": '''// x - mean(x) per row; the mean accumulated in double.
extern "C" void center_rows_run(const float* x, float* y, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (long c = 0; c < cols; ++c) acc += x[r * cols + c];
    const float mean = (float)(acc / cols);
    for (long c = 0; c < cols; ++c) y[r * cols + c] = x[r * cols + c] - mean;
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
#include <math_constants.h>
@REDUCE
// One block per row: the mean by a block reduction, then the centred write.
__global__ void center_rows_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float acc = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) acc += xr[c];
  const float mean = block_sum(acc, shared) / cols;
  for (long c = threadIdx.x; c < cols; c += kThreads) yr[c] = xr[c] - mean;
}

extern "C" void center_rows_run(const float* x, float* y, long rows, long cols,
                                cudaStream_t stream) {
  center_rows_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
''',
}

RESIDUAL_LAYERNORM = {
    "name": "residual_layernorm", "category": "fused", "operators": ["torch.add", "nn.LayerNorm"],
    "task": HEADER + '''

class Model(nn.Module):
    """Residual sum followed by layer normalisation (a transformer's add & norm)."""

    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x, residual):
        return self.norm(x + residual)


rows = {rows}
features = {features}


def get_inputs():
    return [torch.randn(rows, features), torch.randn(rows, features)]


def get_init_inputs():
    return [features]
''',
    "sizes": {"smoke": {"rows": 256, "features": 256}, "bench": {"rows": 65536, "features": 4096}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x, residual):
        return cuda_extension.residual_layernorm_forward(x, residual, self.norm.weight,
                                                         self.norm.bias, self.norm.eps)
''',
    "binding": LAYERNORM_BINDING.format(
        name="residual_layernorm", args="torch::Tensor x, torch::Tensor residual, ",
        check_r='check_input(residual, "residual");\n  TORCH_CHECK(residual.sizes() == x.sizes(), '
                '"residual must match x");',
        r_ptr="residual.data_ptr<float>()"),
    "cpu": LAYERNORM_CPU.format(name="residual_layernorm"),
    "cuda": LAYERNORM_CUDA.format(name="residual_layernorm"),
}

LINEAR_TASK = HEADER + '''

class Model(nn.Module):
    """{doc}"""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return {expr}


batch = {batch}
in_features = {in_features}
out_features = {out_features}


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

LINEAR_MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return cuda_extension.{fn}(x, self.linear.weight, self.linear.bias)
'''

LINEAR_BINDING = '''
extern "C" void {name}_run(const float* x, const float* w, const float* b, float* y, long m,
                           long n, long k@SD);

static torch::Tensor {name}_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {{
  check_input(x, "x");
  check_input(weight, "weight");
  check_input(bias, "bias");
  TORCH_CHECK(x.dim() == 2 && weight.size(1) == x.size(1), "x must be (batch, in_features)");
  auto y = torch::empty({{x.size(0), weight.size(0)}}, x.options());
  @STREAM
  {name}_run(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
             y.data_ptr<float>(), x.size(0), weight.size(0), x.size(1)@S);
  @POST
  return y;
}}

static void register_{name}(pybind11::module& m) {{ m.def("{name}_forward", &{name}_forward); }}
REGISTER_BINDING({name}, register_{name})
'''


def linear_act(name, doc, expr, op, c_expr):
    """y = act(x W^T + b): the GEMM writes x W^T + b, an elementwise pass applies act."""
    return {
        "name": name, "category": "fused", "operators": ["nn.Linear", op],
        "task": LINEAR_TASK.replace("{doc}", doc).replace("{expr}", expr),
        "sizes": {"smoke": {"batch": 64, "in_features": 256, "out_features": 256},
                  "bench": {"batch": 4096, "in_features": 4096, "out_features": 4096}},
        "model_new": LINEAR_MODEL_NEW.format(fn=f"{name}_forward"),
        "binding": LINEAR_BINDING.format(name=name),
        "cpu": f'''#include <cmath>
@GEMM
// {doc}
extern "C" void {name}_run(const float* x, const float* w, const float* b, float* y, long m,
                           long n, long k) {{
  gemm(x, w, b, y, m, n, k, 1);
  for (long i = 0; i < m * n; ++i) {{
    const float v = y[i];
    y[i] = {c_expr};
  }}
}}
''',
        "cuda": f'''#include <cuda_runtime.h>
@GEMM
@ELEMENTWISE
// {doc}
__global__ void {name}_act(float* __restrict__ y, long n) {{
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {{
    const float v = y[i];
    y[i] = {c_expr};
  }}
}}

extern "C" void {name}_run(const float* x, const float* w, const float* b, float* y, long m,
                           long n, long k, cudaStream_t stream) {{
  gemm(x, w, b, y, (int)m, (int)n, (int)k, 1, 1, 0, 0, 0, 1.0f, stream);
  {name}_act<<<blocks_for(m * n), 256, 0, stream>>>(y, m * n);
}}
''',
    }


MATMUL_SIGMOID_SUM = {
    "name": "matmul_sigmoid_sum", "category": "fused",
    "operators": ["torch.matmul", "torch.sigmoid", "torch.sum"],
    "task": HEADER + '''

class Model(nn.Module):
    """Matrix product, sigmoid, then the sum of each row."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.sum(torch.sigmoid(torch.matmul(a, b)), dim=-1)


M = {M}
K = {K}
N = {N}


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
''',
    "sizes": {"smoke": {"M": 128, "K": 128, "N": 128}, "bench": {"M": 4096, "K": 4096, "N": 4096}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return cuda_extension.matmul_sigmoid_sum_forward(a, b)
''',
    "binding": '''
extern "C" void matmul_sigmoid_sum_run(const float* a, const float* b, float* scratch, float* y,
                                       long m, long n, long k@SD);

static torch::Tensor matmul_sigmoid_sum_forward(torch::Tensor a, torch::Tensor b) {
  check_input(a, "a");
  check_input(b, "b");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "need (M, K) @ (K, N)");
  auto scratch = torch::empty({a.size(0), b.size(1)}, a.options());  // the product
  auto y = torch::empty({a.size(0)}, a.options());
  @STREAM
  matmul_sigmoid_sum_run(a.data_ptr<float>(), b.data_ptr<float>(), scratch.data_ptr<float>(),
                         y.data_ptr<float>(), a.size(0), b.size(1), a.size(1)@S);
  @POST
  return y;
}

static void register_matmul_sigmoid_sum(pybind11::module& m) {
  m.def("matmul_sigmoid_sum_forward", &matmul_sigmoid_sum_forward);
}
REGISTER_BINDING(matmul_sigmoid_sum, register_matmul_sigmoid_sum)
''',
    "cpu": '''#include <cmath>
@GEMM
// The product into scratch, then sigmoid and the row sum in one pass over it.
extern "C" void matmul_sigmoid_sum_run(const float* a, const float* b, float* scratch, float* y,
                                       long m, long n, long k) {
  gemm(a, b, nullptr, scratch, m, n, k, 0);
  for (long i = 0; i < m; ++i) {
    double acc = 0.0;
    for (long j = 0; j < n; ++j) acc += 1.0 / (1.0 + std::exp(-(double)scratch[i * n + j]));
    y[i] = (float)acc;
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
#include <math_constants.h>
@GEMM
@REDUCE
// The product into scratch, then one block per row for sigmoid and the sum.
__global__ void sigmoid_row_sum(const float* __restrict__ s, float* __restrict__ y, long n) {
  __shared__ float shared[32];
  const float* row = s + blockIdx.x * n;
  float acc = 0.0f;
  for (long j = threadIdx.x; j < n; j += kThreads) acc += 1.0f / (1.0f + __expf(-row[j]));
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) y[blockIdx.x] = acc;
}

extern "C" void matmul_sigmoid_sum_run(const float* a, const float* b, float* scratch, float* y,
                                       long m, long n, long k, cudaStream_t stream) {
  gemm(a, b, nullptr, scratch, (int)m, (int)n, (int)k, 0, 1, 0, 0, 0, 1.0f, stream);
  sigmoid_row_sum<<<m, kThreads, 0, stream>>>(scratch, y, n);
}
''',
}

FUSED = [
    ADD_RELU,
    unary("swish_scale", "x * sigmoid(x), doubled.", "x * torch.sigmoid(x) * 2.0",
          "torch.sigmoid", "2.0f * v / (1.0f + expf(-v))"),
    unary("hardtanh_scale", "Clamp to [-1, 1], then times 3.", "F.hardtanh(x, -1.0, 1.0) * 3.0",
          "F.hardtanh", "3.0f * fminf(fmaxf(v, -1.0f), 1.0f)"),
    CENTER_ROWS,
    RESIDUAL_LAYERNORM,
    linear_act("linear_relu", "Linear layer then ReLU.", "torch.relu(self.linear(x))", "torch.relu",
               "v > 0.0f ? v : 0.0f"),
    linear_act("linear_gelu", "Linear layer then GELU (erf form).", "F.gelu(self.linear(x))",
               "F.gelu", "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))"),
    MATMUL_SIGMOID_SUM,
]
# The unary helper files these under "single"; these two are fused sequences.
for p in FUSED:
    p["category"] = "fused"
FUSED[1]["operators"] = ["torch.sigmoid", "torch.mul"]
FUSED[2]["operators"] = ["F.hardtanh", "torch.mul"]
