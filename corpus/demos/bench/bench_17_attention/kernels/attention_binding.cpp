#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include "../binding_registry.h"

// Inputs must be contiguous float32 CUDA tensors; outputs are allocated here, computed by the
// kernels on the current stream.
static void check_input(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda(), name, " must be a CUDA tensor");
  TORCH_CHECK(t.scalar_type() == torch::kFloat, name, " must be float32");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

static void check_launch(const char* what) {
  const cudaError_t err = cudaGetLastError();
  TORCH_CHECK(err == cudaSuccess, what, " launch failed: ", cudaGetErrorString(err));
}

extern "C" void attention_run(const float* q, const float* k, const float* v, float* scores,
                              float* out, long batch, long seq, long dim, cudaStream_t stream);

static torch::Tensor attention_forward(torch::Tensor q, torch::Tensor k, torch::Tensor v) {
  check_input(q, "q");
  check_input(k, "k");
  check_input(v, "v");
  TORCH_CHECK(q.dim() == 3 && q.sizes() == k.sizes() && q.sizes() == v.sizes(),
              "q, k and v must all be (batch, seq, dim)");
  auto scores = torch::empty({q.size(0), q.size(1), q.size(1)}, q.options());
  auto out = torch::empty_like(q);
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  attention_run(q.data_ptr<float>(), k.data_ptr<float>(), v.data_ptr<float>(),
                scores.data_ptr<float>(), out.data_ptr<float>(), q.size(0), q.size(1),
                q.size(2), stream);
  check_launch(__func__);
  return out;
}

static void register_attention(pybind11::module& m) { m.def("attention_forward", &attention_forward); }
REGISTER_BINDING(attention, register_attention)
