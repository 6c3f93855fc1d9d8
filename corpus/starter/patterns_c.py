"""Starter patterns, part C: small network blocks."""
from .patterns_a import HEADER

MLP = {
    "name": "mlp", "category": "block", "operators": ["nn.Linear", "nn.ReLU", "nn.Linear"],
    "task": HEADER + '''

class Model(nn.Module):
    """Two-layer perceptron: Linear, ReLU, Linear."""

    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


batch = {batch}
in_features = {in_features}
hidden = {hidden}
out_features = {out_features}


def get_inputs():
    return [torch.randn(batch, in_features)]


def get_init_inputs():
    return [in_features, hidden, out_features]
''',
    "sizes": {"smoke": {"batch": 64, "in_features": 128, "hidden": 256, "out_features": 128},
              "bench": {"batch": 4096, "in_features": 4096, "hidden": 8192, "out_features": 4096}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x):
        return cuda_extension.mlp_forward(x, self.fc1.weight, self.fc1.bias, self.fc2.weight,
                                          self.fc2.bias)
''',
    "binding": '''
extern "C" void mlp_run(const float* x, const float* w1, const float* b1, const float* w2,
                        const float* b2, float* h, float* y, long batch, long in, long hidden,
                        long out@SD);

static torch::Tensor mlp_forward(torch::Tensor x, torch::Tensor w1, torch::Tensor b1,
                                 torch::Tensor w2, torch::Tensor b2) {
  for (const auto* t : {&x, &w1, &b1, &w2, &b2}) check_input(*t, "mlp argument");
  TORCH_CHECK(x.dim() == 2 && w1.size(1) == x.size(1) && w2.size(1) == w1.size(0),
              "shapes must chain: x (B, in), fc1 (hidden, in), fc2 (out, hidden)");
  auto h = torch::empty({x.size(0), w1.size(0)}, x.options());  // the hidden activations
  auto y = torch::empty({x.size(0), w2.size(0)}, x.options());
  @STREAM
  mlp_run(x.data_ptr<float>(), w1.data_ptr<float>(), b1.data_ptr<float>(), w2.data_ptr<float>(),
          b2.data_ptr<float>(), h.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
          w1.size(0), w2.size(0)@S);
  @POST
  return y;
}

static void register_mlp(pybind11::module& m) { m.def("mlp_forward", &mlp_forward); }
REGISTER_BINDING(mlp, register_mlp)
''',
    "cpu": '''@GEMM
// fc1 into h, ReLU in place, fc2 into y.
extern "C" void mlp_run(const float* x, const float* w1, const float* b1, const float* w2,
                        const float* b2, float* h, float* y, long batch, long in, long hidden,
                        long out) {
  gemm(x, w1, b1, h, batch, hidden, in, 1);
  for (long i = 0; i < batch * hidden; ++i) h[i] = h[i] > 0.0f ? h[i] : 0.0f;
  gemm(h, w2, b2, y, batch, out, hidden, 1);
}
''',
    "cuda": '''#include <cuda_runtime.h>
@GEMM
@ELEMENTWISE
__global__ void relu_inplace(float* __restrict__ h, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x)
    h[i] = fmaxf(h[i], 0.0f);
}

// fc1 into h, ReLU in place, fc2 into y.
extern "C" void mlp_run(const float* x, const float* w1, const float* b1, const float* w2,
                        const float* b2, float* h, float* y, long batch, long in, long hidden,
                        long out, cudaStream_t stream) {
  gemm(x, w1, b1, h, (int)batch, (int)hidden, (int)in, 1, 1, 0, 0, 0, 1.0f, stream);
  relu_inplace<<<blocks_for(batch * hidden), 256, 0, stream>>>(h, batch * hidden);
  gemm(h, w2, b2, y, (int)batch, (int)out, (int)hidden, 1, 1, 0, 0, 0, 1.0f, stream);
}
''',
}

ATTENTION = {
    "name": "attention", "category": "block",
    "operators": ["torch.matmul", "torch.mul", "torch.softmax", "torch.matmul"],
    "task": HEADER + '''

class Model(nn.Module):
    """Scaled dot-product attention of one head: softmax(q k^T / sqrt(d)) v."""

    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        scores = torch.matmul(q, k.transpose(-2, -1)) * (q.size(-1) ** -0.5)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


batch = {batch}
seq = {seq}
dim = {dim}


def get_inputs():
    return [torch.randn(batch, seq, dim), torch.randn(batch, seq, dim), torch.randn(batch, seq, dim)]


def get_init_inputs():
    return []
''',
    "sizes": {"smoke": {"batch": 4, "seq": 64, "dim": 32},
              "bench": {"batch": 64, "seq": 2048, "dim": 64}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, q, k, v):
        return cuda_extension.attention_forward(q, k, v)
''',
    "binding": '''
extern "C" void attention_run(const float* q, const float* k, const float* v, float* scores,
                              float* out, long batch, long seq, long dim@SD);

static torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  check_input(q, "q");
  check_input(k, "k");
  check_input(v, "v");
  TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes() && q.sizes() == v.sizes(),
              "q, k and v must all be (batch, seq, dim)");
  auto scores = torch::empty({q.size(0), q.size(1), q.size(1)}, q.options());
  auto out = torch::empty_like(q);
  @STREAM
  attention_run(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                scores.data_ptr<float>(), out.data_ptr<float>(), q.size(0), q.size(1),
                q.size(2)@S);
  @POST
  return out;
}

static void register_attention(pybind11::module& m) { m.def("attention_forward", &attention_forward); }
REGISTER_BINDING(attention, register_attention)
''',
    "cpu": '''#include <cmath>
@GEMM
// Per batch: scores = q k^T * scale, row softmax in place, out = scores v.
extern "C" void attention_run(const float* q, const float* k, const float* v, float* scores,
                              float* out, long batch, long seq, long dim) {
  const float scale = 1.0f / std::sqrt((float)dim);
  for (long b = 0; b < batch; ++b) {
    const long off = b * seq * dim;
    float* s = scores + b * seq * seq;
    gemm(q + off, k + off, nullptr, s, seq, seq, dim, 1);
    for (long i = 0; i < seq; ++i) {
      float* row = s + i * seq;
      float mx = -INFINITY;
      for (long j = 0; j < seq; ++j) mx = std::fmax(mx, row[j] * scale);
      float sum = 0.0f;
      for (long j = 0; j < seq; ++j) {
        row[j] = std::exp(row[j] * scale - mx);
        sum += row[j];
      }
      for (long j = 0; j < seq; ++j) row[j] /= sum;
    }
    gemm(s, v + off, nullptr, out + off, seq, dim, seq, 0);
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
#include <math_constants.h>
@GEMM
@REDUCE
@MAX
// Row softmax in place over the (batch * seq) rows of the score matrix.
__global__ void softmax_rows(float* __restrict__ s, long cols) {
  __shared__ float shared[32];
  float* row = s + blockIdx.x * cols;
  float mx = -INFINITY;
  for (long c = threadIdx.x; c < cols; c += kThreads) mx = fmaxf(mx, row[c]);
  mx = block_max(mx, shared);
  float sum = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sum += __expf(row[c] - mx);
  const float inv = 1.0f / block_sum(sum, shared);
  for (long c = threadIdx.x; c < cols; c += kThreads) row[c] = __expf(row[c] - mx) * inv;
}

// Batched: scores = q k^T * scale (the GEMM's alpha), softmax, out = scores v.
extern "C" void attention_run(const float* q, const float* k, const float* v, float* scores,
                              float* out, long batch, long seq, long dim, cudaStream_t stream) {
  const float scale = rsqrtf((float)dim);
  gemm(q, k, nullptr, scores, (int)seq, (int)seq, (int)dim, 1, (int)batch, seq * dim, seq * dim,
       seq * seq, scale, stream);
  softmax_rows<<<batch * seq, kThreads, 0, stream>>>(scores, seq);
  gemm(scores, v, nullptr, out, (int)seq, (int)dim, (int)seq, 0, (int)batch, seq * seq,
       seq * dim, seq * dim, 1.0f, stream);
}
''',
}

RMSNORM = {
    "name": "rmsnorm", "category": "block",
    "operators": ["torch.pow", "torch.mean", "torch.rsqrt", "torch.mul"],
    "task": HEADER + '''

class Model(nn.Module):
    """RMS normalisation over the last dimension with a learned scale."""

    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


rows = {rows}
features = {features}


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features]
''',
    "sizes": {"smoke": {"rows": 256, "features": 256}, "bench": {"rows": 32768, "features": 8192}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, features, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return cuda_extension.rmsnorm_forward(x, self.weight, self.eps)
''',
    "binding": '''
extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps@SD);

static torch::Tensor rmsnorm_forward(torch::Tensor x, torch::Tensor weight, double eps) {
  check_input(x, "x");
  check_input(weight, "weight");
  const long cols = x.size(-1);
  TORCH_CHECK(weight.numel() == cols, "weight must match the last dimension");
  auto y = torch::empty_like(x);
  @STREAM
  rmsnorm_run(x.data_ptr<float>(), weight.data_ptr<float>(), y.data_ptr<float>(),
              x.numel() / cols, cols, (float)eps@S);
  @POST
  return y;
}

static void register_rmsnorm(pybind11::module& m) { m.def("rmsnorm_forward", &rmsnorm_forward); }
REGISTER_BINDING(rmsnorm, register_rmsnorm)
''',
    "cpu": '''#include <cmath>

// y = x / sqrt(mean(x^2) + eps) * w, per row.
extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps) {
  for (long r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    double sq = 0.0;
    for (long c = 0; c < cols; ++c) sq += (double)xr[c] * xr[c];
    const float inv = (float)(1.0 / std::sqrt(sq / cols + eps));
    for (long c = 0; c < cols; ++c) y[r * cols + c] = xr[c] * inv * w[c];
  }
}
''',
    "cuda": '''#include <cuda_runtime.h>
#include <math_constants.h>
@REDUCE
// One block per row: mean of squares by a block reduction, then the scaled write.
__global__ void rmsnorm_kernel(const float* __restrict__ x, const float* __restrict__ w,
                               float* __restrict__ y, long cols, float eps) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * cols;
  float* yr = y + blockIdx.x * cols;
  float sq = 0.0f;
  for (long c = threadIdx.x; c < cols; c += kThreads) sq += xr[c] * xr[c];
  const float inv = rsqrtf(block_sum(sq, shared) / cols + eps);
  for (long c = threadIdx.x; c < cols; c += kThreads) yr[c] = xr[c] * inv * w[c];
}

extern "C" void rmsnorm_run(const float* x, const float* w, float* y, long rows, long cols,
                            float eps, cudaStream_t stream) {
  rmsnorm_kernel<<<rows, kThreads, 0, stream>>>(x, w, y, cols, eps);
}
''',
}

CONV_RELU = {
    "name": "conv_relu", "category": "block", "operators": ["nn.Conv2d", "torch.relu"],
    "task": HEADER + '''

class Model(nn.Module):
    """3x3 convolution (padding 1) followed by ReLU."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        return torch.relu(self.conv(x))


batch = {batch}
in_channels = {in_channels}
out_channels = {out_channels}
height = {height}
width = {width}


def get_inputs():
    return [torch.randn(batch, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels]
''',
    "sizes": {"smoke": {"batch": 2, "in_channels": 8, "out_channels": 16, "height": 32, "width": 32},
              "bench": {"batch": 64, "in_channels": 64, "out_channels": 64, "height": 256,
                        "width": 256}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1)

    def forward(self, x):
        return cuda_extension.conv_relu_forward(x, self.conv.weight, self.conv.bias)
''',
    "binding": '''
extern "C" void conv_relu_run(const float* x, const float* w, const float* b, float* y, long n,
                              long cin, long cout, long h, long wd@SD);

static torch::Tensor conv_relu_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
  check_input(x, "x");
  check_input(weight, "weight");
  check_input(bias, "bias");
  TORCH_CHECK(x.dim() == 4 && weight.dim() == 4 && weight.size(1) == x.size(1) &&
                  weight.size(2) == 3 && weight.size(3) == 3,
              "need x (N, Cin, H, W) and a (Cout, Cin, 3, 3) weight");
  auto y = torch::empty({x.size(0), weight.size(0), x.size(2), x.size(3)}, x.options());
  @STREAM
  conv_relu_run(x.data_ptr<float>(), weight.data_ptr<float>(), bias.data_ptr<float>(),
                y.data_ptr<float>(), x.size(0), x.size(1), weight.size(0), x.size(2), x.size(3)@S);
  @POST
  return y;
}

static void register_conv_relu(pybind11::module& m) { m.def("conv_relu_forward", &conv_relu_forward); }
REGISTER_BINDING(conv_relu, register_conv_relu)
''',
    "cpu": '''// Direct 3x3 convolution, stride 1, zero padding 1, bias, then ReLU.
extern "C" void conv_relu_run(const float* x, const float* w, const float* b, float* y, long n,
                              long cin, long cout, long h, long wd) {
  for (long img = 0; img < n; ++img)
    for (long co = 0; co < cout; ++co) {
      float* out = y + (img * cout + co) * h * wd;
      for (long i = 0; i < h * wd; ++i) out[i] = b[co];
      for (long ci = 0; ci < cin; ++ci) {
        const float* in = x + (img * cin + ci) * h * wd;
        const float* k = w + (co * cin + ci) * 9;
        for (long r = 0; r < h; ++r)
          for (long c = 0; c < wd; ++c) {
            float acc = 0.0f;
            for (long dr = -1; dr <= 1; ++dr) {
              const long rr = r + dr;
              if (rr < 0 || rr >= h) continue;
              for (long dc = -1; dc <= 1; ++dc) {
                const long cc = c + dc;
                if (cc < 0 || cc >= wd) continue;
                acc += in[rr * wd + cc] * k[(dr + 1) * 3 + (dc + 1)];
              }
            }
            out[r * wd + c] += acc;
          }
      }
      for (long i = 0; i < h * wd; ++i) out[i] = out[i] > 0.0f ? out[i] : 0.0f;
    }
}
''',
    "cuda": '''#include <cuda_runtime.h>

// Direct 3x3 convolution, stride 1, zero padding 1, bias and ReLU. A block computes a 16x16
// output tile for 8 output channels; each input channel's 18x18 halo tile and the 8 filters
// go through shared memory.
namespace {
constexpr int kTileSide = 16;
constexpr int kCoPerBlock = 8;
}

__global__ void conv_relu_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                 const float* __restrict__ b, float* __restrict__ y, int cin,
                                 int cout, int h, int wd) {
  __shared__ float tile[kTileSide + 2][kTileSide + 2];
  __shared__ float filt[kCoPerBlock][9];
  const int tiles_x = (wd + kTileSide - 1) / kTileSide;
  const int tx = threadIdx.x % kTileSide, ty = threadIdx.x / kTileSide;
  const int col = (blockIdx.x % tiles_x) * kTileSide + tx;
  const int row = (blockIdx.x / tiles_x) * kTileSide + ty;
  const int co0 = blockIdx.y * kCoPerBlock;
  const int img = blockIdx.z;
  float acc[kCoPerBlock];
  for (int j = 0; j < kCoPerBlock; ++j) acc[j] = 0.0f;
  const int row0 = (blockIdx.x / tiles_x) * kTileSide - 1, col0 = (blockIdx.x % tiles_x) * kTileSide - 1;
  for (int ci = 0; ci < cin; ++ci) {
    const float* in = x + ((long)img * cin + ci) * h * wd;
    for (int e = threadIdx.x; e < (kTileSide + 2) * (kTileSide + 2); e += blockDim.x) {
      const int r = row0 + e / (kTileSide + 2), c = col0 + e % (kTileSide + 2);
      tile[e / (kTileSide + 2)][e % (kTileSide + 2)] =
          (r >= 0 && r < h && c >= 0 && c < wd) ? in[(long)r * wd + c] : 0.0f;
    }
    for (int e = threadIdx.x; e < kCoPerBlock * 9; e += blockDim.x) {
      const int co = co0 + e / 9;
      filt[e / 9][e % 9] = co < cout ? w[((long)co * cin + ci) * 9 + e % 9] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kCoPerBlock; ++j) {
      float s = 0.0f;
#pragma unroll
      for (int dr = 0; dr < 3; ++dr)
#pragma unroll
        for (int dc = 0; dc < 3; ++dc) s += tile[ty + dr][tx + dc] * filt[j][dr * 3 + dc];
      acc[j] += s;
    }
    __syncthreads();
  }
  if (row >= h || col >= wd) return;
  for (int j = 0; j < kCoPerBlock; ++j) {
    const int co = co0 + j;
    if (co < cout) y[(((long)img * cout + co) * h + row) * wd + col] = fmaxf(acc[j] + b[co], 0.0f);
  }
}

extern "C" void conv_relu_run(const float* x, const float* w, const float* b, float* y, long n,
                              long cin, long cout, long h, long wd, cudaStream_t stream) {
  const int tiles = (int)(((h + kTileSide - 1) / kTileSide) * ((wd + kTileSide - 1) / kTileSide));
  const dim3 grid(tiles, (unsigned)((cout + kCoPerBlock - 1) / kCoPerBlock), (unsigned)n);
  conv_relu_kernel<<<grid, kTileSide * kTileSide, 0, stream>>>(x, w, b, y, (int)cin, (int)cout,
                                                               (int)h, (int)wd);
}
''',
}

SWIGLU = {
    "name": "swiglu", "category": "block",
    "operators": ["nn.Linear", "F.silu", "torch.mul", "nn.Linear"],
    "task": HEADER + '''

class Model(nn.Module):
    """SwiGLU feed-forward block: w3(silu(w1 x) * w2 x), no biases."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.w3(F.silu(self.w1(x)) * self.w2(x))


batch = {batch}
dim = {dim}
hidden = {hidden}


def get_inputs():
    return [torch.randn(batch, dim)]


def get_init_inputs():
    return [dim, hidden]
''',
    "sizes": {"smoke": {"batch": 64, "dim": 128, "hidden": 256},
              "bench": {"batch": 2048, "dim": 4096, "hidden": 8192}},
    "model_new": '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(dim, hidden, bias=False)
        self.w3 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return cuda_extension.swiglu_forward(x, self.w1.weight, self.w2.weight, self.w3.weight)
''',
    "binding": '''
extern "C" void swiglu_run(const float* x, const float* w1, const float* w2, const float* w3,
                           float* gate, float* up, float* y, long batch, long dim,
                           long hidden@SD);

static torch::Tensor swiglu_forward(torch::Tensor x, torch::Tensor w1, torch::Tensor w2,
                                    torch::Tensor w3) {
  for (const auto* t : {&x, &w1, &w2, &w3}) check_input(*t, "swiglu argument");
  TORCH_CHECK(x.dim() == 2 && w1.size(1) == x.size(1) && w2.sizes() == w1.sizes() &&
                  w3.size(1) == w1.size(0) && w3.size(0) == x.size(1),
              "need x (B, dim), w1 and w2 (hidden, dim), w3 (dim, hidden)");
  auto gate = torch::empty({x.size(0), w1.size(0)}, x.options());
  auto up = torch::empty({x.size(0), w1.size(0)}, x.options());
  auto y = torch::empty_like(x);
  @STREAM
  swiglu_run(x.data_ptr<float>(), w1.data_ptr<float>(), w2.data_ptr<float>(), w3.data_ptr<float>(),
             gate.data_ptr<float>(), up.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
             x.size(1), w1.size(0)@S);
  @POST
  return y;
}

static void register_swiglu(pybind11::module& m) { m.def("swiglu_forward", &swiglu_forward); }
REGISTER_BINDING(swiglu, register_swiglu)
''',
    "cpu": '''#include <cmath>
@GEMM
// gate = x w1^T, up = x w2^T, gate = silu(gate) * up, y = gate w3^T.
extern "C" void swiglu_run(const float* x, const float* w1, const float* w2, const float* w3,
                           float* gate, float* up, float* y, long batch, long dim, long hidden) {
  gemm(x, w1, nullptr, gate, batch, hidden, dim, 1);
  gemm(x, w2, nullptr, up, batch, hidden, dim, 1);
  for (long i = 0; i < batch * hidden; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
  gemm(gate, w3, nullptr, y, batch, dim, hidden, 1);
}
''',
    "cuda": '''#include <cuda_runtime.h>
@GEMM
@ELEMENTWISE
__global__ void silu_mul(float* __restrict__ gate, const float* __restrict__ up, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    const float g = gate[i];
    gate[i] = g / (1.0f + __expf(-g)) * up[i];
  }
}

// gate = x w1^T, up = x w2^T, gate = silu(gate) * up, y = gate w3^T.
extern "C" void swiglu_run(const float* x, const float* w1, const float* w2, const float* w3,
                           float* gate, float* up, float* y, long batch, long dim, long hidden,
                           cudaStream_t stream) {
  gemm(x, w1, nullptr, gate, (int)batch, (int)hidden, (int)dim, 1, 1, 0, 0, 0, 1.0f, stream);
  gemm(x, w2, nullptr, up, (int)batch, (int)hidden, (int)dim, 1, 1, 0, 0, 0, 1.0f, stream);
  silu_mul<<<blocks_for(batch * hidden), 256, 0, stream>>>(gate, up, batch * hidden);
  gemm(gate, w3, nullptr, y, (int)batch, (int)dim, (int)hidden, 1, 1, 0, 0, 0, 1.0f, stream);
}
''',
}

BLOCKS = [MLP, ATTENTION, RMSNORM, CONV_RELU, SWIGLU]
