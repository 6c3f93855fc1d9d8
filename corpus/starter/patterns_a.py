"""Starter patterns, part A: single operators. Each pattern holds the task program (sizes
filled per set), ModelNew, the C++ kernel (smoke set), the CUDA kernel (bench set) and the
binding body (tokens @SD/@S/@STREAM/@POST filled per device, see snippets.py)."""

HEADER = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"

ELEMENTWISE_TASK = HEADER + '''

class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


rows = {rows}
cols = {cols}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

UNARY_MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.{fn}(x)
'''

UNARY_BINDING = '''
extern "C" void {name}_run(const float* x, float* y, long n@SD);

static torch::Tensor {fn}(torch::Tensor x) {{
  check_input(x, "x");
  auto y = torch::empty_like(x);
  @STREAM
  {name}_run(x.data_ptr<float>(), y.data_ptr<float>(), x.numel()@S);
  @POST
  return y;
}}

static void register_{name}(pybind11::module& m) {{ m.def("{fn}", &{fn}, "{doc}"); }}
REGISTER_BINDING({name}, register_{name})
'''


def unary(name, doc, expr, op, c_expr):
    """An elementwise map y = f(x) written once as a C expression of `v`."""
    fn = f"{name}_forward"
    return {
        "name": name, "category": "single", "operators": [op],
        "task": ELEMENTWISE_TASK.replace("{doc}", doc).replace("{expr}", expr),
        "sizes": {"smoke": {"rows": 256, "cols": 256}, "bench": {"rows": 16384, "cols": 32768}},
        "model_new": UNARY_MODEL_NEW.format(fn=fn),
        "binding": UNARY_BINDING.format(name=name, fn=fn, doc=doc),
        "cpu": f'''#include <cmath>

// {doc}
extern "C" void {name}_run(const float* x, float* y, long n) {{
  for (long i = 0; i < n; ++i) {{
    const float v = x[i];
    y[i] = {c_expr};
  }}
}}
''',
        "cuda": f'''#include <cuda_runtime.h>
@ELEMENTWISE
// {doc}
__global__ void {name}_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {{
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {{
    const float v = x[i];
    y[i] = {c_expr};
  }}
}}

extern "C" void {name}_run(const float* x, float* y, long n, cudaStream_t stream) {{
  {name}_kernel<<<blocks_for(n), 256, 0, stream>>>(x, y, n);
}}
''',
    }


ROWS_TASK = HEADER + '''

class Model(nn.Module):
    """{doc}"""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


rows = {rows}
cols = {cols}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
'''

SOFTMAX = {
    "name": "softmax", "category": "single", "operators": ["torch.softmax"],
    "task": ROWS_TASK.replace("{doc}", "Softmax over the last dimension.")
                     .replace("{expr}", "torch.softmax(x, dim=-1)"),
    "sizes": {"smoke": {"rows": 256, "cols": 256}, "bench": {"rows": 131072, "cols": 4096}},
    "model_new": UNARY_MODEL_NEW.format(fn="softmax_forward"),
    "binding": '''
extern "C" void softmax_run(const float* x, float* y, long rows, long cols@SD);

static torch::Tensor softmax_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D");
  auto y = torch::empty_like(x);
  @STREAM
  softmax_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1)@S);
  @POST
  return y;
}

static void register_softmax(pybind11::module& m) { m.def("softmax_forward", &softmax_forward); }
REGISTER_BINDING(softmax, register_softmax)
''',
    "cpu": '''#include <cmath>

// Row softmax: subtract the row maximum for stability, exponentiate, normalise.
extern "C" void softmax_run(const float* x, float* y, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mx = xr[0];
    for (long c = 1; c < cols; ++c) mx = xr[c] > mx ? xr[c] : mx;
    float sum = 0.0f;
    for (long c = 0; c < cols; ++c) {
      yr[c] = std::exp(xr[c] - mx);
      sum += yr[c];
    }
    const float inv = 1.0f / sum;
    for (long c = 0; c < cols; ++c) yr[c] *= inv;
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
#include <math_constants.h>
@REDUCE
@MAX
// One block per row: maximum, sum of exponentials, then the normalised write.
__global__ void softmax_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float mx = -INFINITY;
  for (long c = threadIdx.x; c < cols; c += kThreads) mx = fmaxf(mx, xr[c]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sum += __expf(xr[c] - mx);
  const float inv = 1.0f / block_sum(sum, shared);
  for (long c = threadIdx.x; c < cols; c += kThreads) yr[c] = __expf(xr[c] - mx) * inv;
}

extern "C" void softmax_run(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
  softmax_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
''',
}

ROW_SUM = {
    "name": "row_sum", "category": "single", "operators": ["torch.sum"],
    "task": ROWS_TASK.replace("{doc}", "Sum over the last dimension.")
                     .replace("{expr}", "torch.sum(x, dim=-1)"),
    "sizes": {"smoke": {"rows": 512, "cols": 256}, "bench": {"rows": 131072, "cols": 8192}},
    "model_new": UNARY_MODEL_NEW.format(fn="row_sum_forward"),
    "binding": '''
extern "C" void row_sum_run(const float* x, float* y, long rows, long cols@SD);

static torch::Tensor row_sum_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 2, "x must be 2-D");
  auto y = torch::empty({x.size(0)}, x.options());
  @STREAM
  row_sum_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1)@S);
  @POST
  return y;
}

static void register_row_sum(pybind11::module& m) { m.def("row_sum_forward", &row_sum_forward); }
REGISTER_BINDING(row_sum, register_row_sum)
''',
    "cpu": '''// Sum of each row, accumulated in double so long rows keep their precision.
extern "C" void row_sum_run(const float* x, float* y, long rows, long cols) {
  for (long r = 0; r < rows; ++r) {
    double acc = 0.0;
    for (long c = 0; c < cols; ++c) acc += x[r * cols + c];
    y[r] = (float)acc;
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
#include <math_constants.h>
@REDUCE
// One block per row, vectorised float4 loads when the row allows it.
__global__ void row_sum_kernel(const float* __restrict__ x, float* __restrict__ y, long cols) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float acc = 0.0f;
  if (cols % 4 == 0) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    for (long c = threadIdx.x; c < cols / 4; c += kThreads) {
      const float4 v = x4[c];
      acc += (v.x + v.y) + (v.z + v.w);
    }
  } else {
    for (long c = threadIdx.x; c < cols; c += kThreads) acc += xr[c];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) y[blockIdx.x] = acc;
}

extern "C" void row_sum_run(const float* x, float* y, long rows, long cols, cudaStream_t stream) {
  row_sum_kernel<<<rows, kThreads, 0, stream>>>(x, y, cols);
}
''',
}

MATMUL = {
    "name": "matmul", "category": "single", "operators": ["torch.matmul"],
    "task": HEADER + '''

class Model(nn.Module):
    """Matrix product of an (M, K) and a (K, N) matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


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
        return cuda_extension.matmul_forward(a, b)
''',
    "binding": '''
extern "C" void matmul_run(const float* a, const float* b, float* c, long m, long n, long k@SD);

static torch::Tensor matmul_forward(torch::Tensor a, torch::Tensor b) {
  check_input(a, "a");
  check_input(b, "b");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "need (M, K) @ (K, N)");
  auto c = torch::empty({a.size(0), b.size(1)}, a.options());
  @STREAM
  matmul_run(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), b.size(1),
             a.size(1)@S);
  @POST
  return c;
}

static void register_matmul(pybind11::module& m) { m.def("matmul_forward", &matmul_forward); }
REGISTER_BINDING(matmul, register_matmul)
''',
    "cpu": '''@GEMM
extern "C" void matmul_run(const float* a, const float* b, float* c, long m, long n, long k) {
  gemm(a, b, nullptr, c, m, n, k, 0);
}
''',
    "cuda": '''#include <cuda_runtime.h>
@GEMM
extern "C" void matmul_run(const float* a, const float* b, float* c, long m, long n, long k,
                           cudaStream_t stream) {
  gemm(a, b, nullptr, c, (int)m, (int)n, (int)k, 0, 1, 0, 0, 0, 1.0f, stream);
}
''',
}

LAYERNORM_BINDING = '''
extern "C" void {name}_run(const float* x, const float* r, const float* w, const float* b,
                           float* y, long rows, long cols, float eps@SD);

static torch::Tensor {name}_forward({args}torch::Tensor weight, torch::Tensor bias,
                                    double eps) {{
  check_input(x, "x");
  {check_r}
  check_input(weight, "weight");
  check_input(bias, "bias");
  const long cols = x.size(-1);
  TORCH_CHECK(weight.numel() == cols && bias.numel() == cols, "weight/bias must match the last dim");
  auto y = torch::empty_like(x);
  @STREAM
  {name}_run(x.data_ptr<float>(), {r_ptr}, weight.data_ptr<float>(), bias.data_ptr<float>(),
             y.data_ptr<float>(), x.numel() / cols, cols, (float)eps@S);
  @POST
  return y;
}}

static void register_{name}(pybind11::module& m) {{ m.def("{name}_forward", &{name}_forward); }}
REGISTER_BINDING({name}, register_{name})
'''

LAYERNORM_CPU = '''#include <cmath>

// Layer norm over the last dimension of (x + r) (r may be null): mean and biased variance in
// double, then the affine transform.
extern "C" void {name}_run(const float* x, const float* r, const float* w, const float* b,
                           float* y, long rows, long cols, float eps) {{
  for (long i = 0; i < rows; ++i) {{
    const float* xr = x + i * cols;
    const float* rr = r ? r + i * cols : nullptr;
    float* yr = y + i * cols;
    double sum = 0.0, sq = 0.0;
    for (long c = 0; c < cols; ++c) {{
      const double v = xr[c] + (rr ? rr[c] : 0.0f);
      sum += v;
      sq += v * v;
    }}
    const double mean = sum / cols;
    const double var = sq / cols - mean * mean;
    const float inv = (float)(1.0 / std::sqrt(var + eps));
    for (long c = 0; c < cols; ++c) {{
      const float v = xr[c] + (rr ? rr[c] : 0.0f);
      yr[c] = (v - (float)mean) * inv * w[c] + b[c];
    }}
  }}
}}
'''

LAYERNORM_CUDA = '''#include <cuda_runtime.h>
#include <math_constants.h>
@REDUCE
// One block per row of (x + r) (r may be null): two-pass mean and variance, then the affine
// transform.
__global__ void {name}_kernel(const float* __restrict__ x, const float* __restrict__ r,
                              const float* __restrict__ w, const float* __restrict__ b,
                              float* __restrict__ y, long cols, float eps) {{
  __shared__ float shared[32];
  const long base = blockIdx.x * cols;
  float sum = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sum += x[base + c] + (r ? r[base + c] : 0.0f);
  const float mean = block_sum(sum, shared) / cols;
  float sq = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) {{
    const float d = x[base + c] + (r ? r[base + c] : 0.0f) - mean;
    sq += d * d;
  }}
  const float inv = rsqrtf(block_sum(sq, shared) / cols + eps);
  for (long c = threadIdx.x; c < cols; c += kThreads) {{
    const float v = x[base + c] + (r ? r[base + c] : 0.0f);
    y[base + c] = (v - mean) * inv * w[c] + b[c];
  }}
}}

extern "C" void {name}_run(const float* x, const float* r, const float* w, const float* b,
                           float* y, long rows, long cols, float eps, cudaStream_t stream) {{
  {name}_kernel<<<rows, kThreads, 0, stream>>>(x, r, w, b, y, cols, eps);
}}
'''

LAYERNORM = {
    "name": "layernorm", "category": "single", "operators": ["nn.LayerNorm"],
    "task": HEADER + '''

class Model(nn.Module):
    """Layer normalisation over the last dimension, with learned scale and shift."""

    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return self.norm(x)


rows = {rows}
features = {features}


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features]
''',
    "sizes": {"smoke": {"rows": 256, "features": 256}, "bench": {"rows": 65536, "features": 8192}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x):
        return cuda_extension.layernorm_forward(x, self.norm.weight, self.norm.bias, self.norm.eps)
''',
    "binding": LAYERNORM_BINDING.format(name="layernorm", args="torch::Tensor x, ",
                                        check_r="", r_ptr="nullptr"),
    "cpu": LAYERNORM_CPU.format(name="layernorm"),
    "cuda": LAYERNORM_CUDA.format(name="layernorm"),
}

MAXPOOL = {
    "name": "max_pool2d", "category": "single", "operators": ["nn.MaxPool2d"],
    "task": HEADER + '''

class Model(nn.Module):
    """2x2 max pooling with stride 2."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=2)

    def forward(self, x):
        return self.pool(x)


batch = {batch}
channels = {channels}
height = {height}
width = {width}


def get_inputs():
    return [torch.randn(batch, channels, height, width)]


def get_init_inputs():
    return []
''',
    "sizes": {"smoke": {"batch": 4, "channels": 16, "height": 32, "width": 32},
              "bench": {"batch": 64, "channels": 64, "height": 512, "width": 512}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return cuda_extension.max_pool2d_forward(x)
''',
    "binding": '''
extern "C" void max_pool2d_run(const float* x, float* y, long planes, long h, long w@SD);

static torch::Tensor max_pool2d_forward(torch::Tensor x) {
  check_input(x, "x");
  TORCH_CHECK(x.dim() == 4, "x must be (N, C, H, W)");
  auto y = torch::empty({x.size(0), x.size(1), x.size(2) / 2, x.size(3) / 2}, x.options());
  @STREAM
  max_pool2d_run(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0) * x.size(1), x.size(2),
                 x.size(3)@S);
  @POST
  return y;
}

static void register_max_pool2d(pybind11::module& m) {
  m.def("max_pool2d_forward", &max_pool2d_forward);
}
REGISTER_BINDING(max_pool2d, register_max_pool2d)
''',
    "cpu": '''// 2x2 windows, stride 2, floor mode (a trailing odd row or column is dropped).
extern "C" void max_pool2d_run(const float* x, float* y, long planes, long h, long w) {
  const long oh = h / 2, ow = w / 2;
  for (long p = 0; p < planes; ++p)
    for (long i = 0; i < oh; ++i)
      for (long j = 0; j < ow; ++j) {
        const float* src = x + p * h * w + (2 * i) * w + 2 * j;
        float m = src[0];
        m = src[1] > m ? src[1] : m;
        m = src[w] > m ? src[w] : m;
        m = src[w + 1] > m ? src[w + 1] : m;
        y[p * oh * ow + i * ow + j] = m;
      }
}
''',
    "cuda": '''#include <cuda_runtime.h>
@ELEMENTWISE
// One thread per output element, 2x2 window, stride 2, floor mode.
__global__ void max_pool2d_kernel(const float* __restrict__ x, float* __restrict__ y, long planes,
                                  long h, long w) {
  const long oh = h / 2, ow = w / 2, total = planes * oh * ow;
  for (long o = blockIdx.x * (long)blockDim.x + threadIdx.x; o < total;
       o += (long)gridDim.x * blockDim.x) {
    const long j = o % ow, i = (o / ow) % oh, p = o / (oh * ow);
    const float* src = x + p * h * w + (2 * i) * w + 2 * j;
    const float2 top = *reinterpret_cast<const float2*>(src);
    const float2 bottom = *reinterpret_cast<const float2*>(src + w);
    y[o] = fmaxf(fmaxf(top.x, top.y), fmaxf(bottom.x, bottom.y));
  }
}

extern "C" void max_pool2d_run(const float* x, float* y, long planes, long h, long w,
                               cudaStream_t stream) {
  max_pool2d_kernel<<<blocks_for(planes * (h / 2) * (w / 2)), 256, 0, stream>>>(x, y, planes, h, w);
}
''',
}

SINGLE = [
    unary("relu", "ReLU.", "torch.relu(x)", "torch.relu", "v > 0.0f ? v : 0.0f"),
    unary("gelu", "GELU (exact, erf form).", "F.gelu(x)", "F.gelu",
          "0.5f * v * (1.0f + erff(v * 0.70710678118654752f))"),
    SOFTMAX, ROW_SUM, MATMUL, LAYERNORM, MAXPOOL,
]
