#include "actors/model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <tuple>

#include <ATen/autocast_mode.h>

#include "actors/model/cuda_graph.hpp"
#include "actors/model/safetensors.hpp"

namespace cuda_agent::model {
namespace {

struct linear {
  torch::Tensor weight;
  torch::Tensor bias;  // undefined: none
  torch::Tensor operator()(const torch::Tensor& x) const { return torch::linear(x, weight, bias); }
};

// As transformers' LlamaRMSNorm: normalised in float32, cast back, then scaled. A float32 input
// with a float32 weight (a float32 model, or the residual stream of the learner's bfloat16
// autocast against float32 weights) goes to ATen's rms_norm: the same arithmetic, in one fused
// kernel each way on CUDA instead of about eight forward and a dozen backward. Other dtypes keep
// transformers' two roundings (to x's dtype, then the product with the weight).
// `fused` takes ATen's path in any dtype (a training copy's norms: transformer::training_copy).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps, bool fused = false) {
  if (fused || (x.scalar_type() == torch::kFloat32 && weight.scalar_type() == torch::kFloat32)) {
    return at::rms_norm(x, {x.size(-1)}, weight, eps);
  }
  torch::Tensor h = x.to(torch::kFloat32);
  torch::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  h = h * torch::rsqrt(variance + eps);
  return weight * h.to(x.scalar_type());
}

torch::Tensor rotate_half(const torch::Tensor& x) {
  int64_t half = x.size(-1) / 2;
  return torch::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

// x [B, heads, T, D]; cos, sin [B, T, D].
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos.unsqueeze(1) + rotate_half(x) * sin.unsqueeze(1);
}

std::string shape_string(c10::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Inverse frequencies of the rotary embedding and the factor on cos/sin, computed in float32
// step by step as transformers' modeling_rope_utils does, so that cos/sin agree to the last bit
// as far as the operations allow.
std::pair<torch::Tensor, double> rope_frequencies(const model_config& c) {
  const int64_t dim = c.head_dim;
  const double base = c.rope_theta;
  const rope_scaling& r = c.rope;
  auto f32 = torch::TensorOptions().dtype(torch::kFloat32);
  torch::Tensor exponents = torch::arange(0, dim, 2, torch::kInt64).to(torch::kFloat32) / double(dim);
  torch::Tensor inv_freq = torch::pow(base, exponents).reciprocal();
  if (r.type == "default") return {inv_freq, 1.0};
  if (r.type == "linear") return {inv_freq / r.factor, 1.0};
  if (r.type == "llama3") {
    const double old_context = double(r.original_max_position_embeddings);
    const double low_wavelen = old_context / r.low_freq_factor;
    const double high_wavelen = old_context / r.high_freq_factor;
    torch::Tensor wavelen = inv_freq.reciprocal() * (2 * M_PI);
    torch::Tensor scaled = torch::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    torch::Tensor smooth = (wavelen.reciprocal() * old_context - r.low_freq_factor) /
                           (r.high_freq_factor - r.low_freq_factor);
    torch::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    torch::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    return {torch::where(medium, smoothed, scaled), 1.0};
  }
  // yarn
  const double original = double(r.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (double(dim) * std::log(original / (rotations * 2 * M_PI))) / (2 * std::log(base));
  };
  double low = correction_dim(r.beta_fast);
  double high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  torch::Tensor pos_freqs = torch::pow(base, exponents);
  torch::Tensor extrapolation = pos_freqs.reciprocal();
  torch::Tensor interpolation = (pos_freqs * r.factor).reciprocal();
  torch::Tensor ramp = ((torch::arange(dim / 2, f32) - low) / (high - low)).clamp(0, 1);
  torch::Tensor extrapolation_factor = 1 - ramp;
  inv_freq = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  return {inv_freq, r.attention_factor};
}

const char* dtype_name(torch::ScalarType dtype) {
  switch (dtype) {
    case torch::kFloat32: return "float32";
    case torch::kBFloat16: return "bfloat16";
    case torch::kFloat16: return "float16";
    default: return "";
  }
}

std::vector<int64_t> aten_attention_order() {
  static const std::vector<int64_t> order = [] {
    std::vector<int64_t> out;
    for (at::SDPBackend b : at::globalContext().sDPPriorityOrder()) out.push_back(int64_t(b));
    return out;
  }();
  return order;
}

// Scaled dot-product attention of q [B, heads, Tq, D] over k, v [B, kv_heads, Tk, D]: under
// `mask` [B, 1, Tq, Tk] bool where defined, else causal or (a single query) full.
torch::Tensor attend(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, const torch::Tensor& mask,
                     bool causal) {
  const int64_t heads = q.size(1), kv = k.size(1);
  // Of SDPA's fused kernels only flash attention (CUDA, half or bfloat16, no explicit mask)
  // takes grouped query heads; anywhere else enable_gqa falls back to the math kernel and its
  // [B, heads, Tq, Tk] scores, which training keeps for the backward (60 GB a layer at 32k
  // tokens and 14 heads). Keys and values repeated to every head let the memory-efficient
  // kernel (CUDA) or the CPU flash kernel run instead, for 2 x heads x Tk x D more; so they are
  // where cuDNN is preferred (prefer_cudnn_attention), which takes equal head counts. A single
  // query's scores are small, and repeating a whole cache per decode step would cost more.
  const torch::ScalarType dtype = autocast_scope::current(q.device()).value_or(q.scalar_type());
  const bool flash_takes_gqa =
      q.is_cuda() && !mask.defined() && (dtype == torch::kBFloat16 || dtype == torch::kHalf) &&
      !(cudnn_attention_preferred());
  const bool repeat = heads != kv && !flash_takes_gqa && q.size(2) > 1;
  if (repeat) {
    k = k.repeat_interleave(heads / kv, 1);
    v = v.repeat_interleave(heads / kv, 1);
  }
  return at::scaled_dot_product_attention(q, k, v, mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt,
                                          0.0, causal && !mask.defined(), std::nullopt,
                                          /*enable_gqa=*/heads != kv && !repeat);
}

// One decode step (one new token per sequence) of B sequences with caches of different lengths,
// attention for all of them in a few launches per layer whatever B is: the new keys and values
// go into every cache in one multi-tensor copy, every cache is gathered into one padded batch in
// another, and one variable-length flash-attention call reads each sequence's own length of it
// (seqused_k). The per-sequence path instead launches about five kernels per sequence and layer,
// which bounds decode at large batches by launches, not by the GPU.
struct kv_cache_storage {  // a kv_cache's tensors, which only transformer (a friend) can hand out
  std::vector<torch::Tensor>* keys;
  std::vector<torch::Tensor>* values;
};

class batched_decode {
 public:
  batched_decode(const std::vector<kv_cache_storage>& caches, const std::vector<int64_t>& cached,
                 const torch::TensorOptions& cache_opts)
      : caches_(caches), cached_(cached) {
    const auto B = int64_t(caches.size());
    for (int64_t length : cached) longest_ = std::max(longest_, length + 1);
    const torch::Tensor& first = caches.front().keys->front();
    kv_ = first.size(1);
    D_ = first.size(2);
    padded_keys_ = torch::empty({B, longest_, kv_, D_}, cache_opts);
    padded_values_ = torch::empty({B, longest_, kv_, D_}, cache_opts);
    std::vector<int32_t> cu_q(static_cast<size_t>(B + 1)), cu_k(static_cast<size_t>(B + 1)), used(static_cast<size_t>(B));
    for (int64_t b = 0; b <= B; ++b) {
      cu_q[size_t(b)] = int32_t(b);
      cu_k[size_t(b)] = int32_t(b * longest_);
      if (b < B) used[size_t(b)] = int32_t(cached[size_t(b)] + 1);
    }
    const auto int_opts = torch::TensorOptions().dtype(torch::kInt32);
    const auto device = cache_opts.device();
    cu_q_ = torch::tensor(cu_q, int_opts).to(device);
    cu_k_ = torch::tensor(cu_k, int_opts).to(device);
    used_ = torch::tensor(used, int_opts).to(device);
  }

  // Appends layer l's new keys and values [B, kv, D] to the caches and returns the attention of
  // `queries` [B, heads, D] (one per sequence) over each sequence's whole cache, [B, heads, D].
  // Every argument is contiguous.
  torch::Tensor attend(int64_t l, const torch::Tensor& queries, const torch::Tensor& new_keys,
                       const torch::Tensor& new_values) {
    const auto B = int64_t(caches_.size());
    std::vector<torch::Tensor> into, from;
    into.reserve(size_t(2 * B));
    from.reserve(size_t(2 * B));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t past = cached_[size_t(b)];
      into.push_back((*caches_[size_t(b)].keys)[size_t(l)].slice(0, past, past + 1));
      from.push_back(new_keys.slice(0, b, b + 1));
      into.push_back((*caches_[size_t(b)].values)[size_t(l)].slice(0, past, past + 1));
      from.push_back(new_values.slice(0, b, b + 1));
    }
    at::_foreach_copy_(into, from);
    into.clear();
    from.clear();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t length = cached_[size_t(b)] + 1;
      into.push_back(padded_keys_[b].slice(0, 0, length));
      from.push_back((*caches_[size_t(b)].keys)[size_t(l)].slice(0, 0, length));
      into.push_back(padded_values_[b].slice(0, 0, length));
      from.push_back((*caches_[size_t(b)].values)[size_t(l)].slice(0, 0, length));
    }
    at::_foreach_copy_(into, from);
    auto out = at::_flash_attention_forward(queries, padded_keys_.view({B * longest_, kv_, D_}),
                                            padded_values_.view({B * longest_, kv_, D_}), cu_q_, cu_k_,
                                            /*max_q=*/1, /*max_k=*/longest_, /*dropout_p=*/0.0,
                                            /*is_causal=*/false, /*return_debug_mask=*/false, std::nullopt,
                                            std::nullopt, std::nullopt, used_);
    return std::get<0>(out);
  }

 private:
  std::vector<kv_cache_storage> caches_;
  std::vector<int64_t> cached_;
  int64_t longest_ = 0, kv_ = 0, D_ = 0;
  torch::Tensor padded_keys_, padded_values_, cu_q_, cu_k_, used_;
};

}  // namespace

void prefer_cudnn_attention(bool on) {
  std::vector<int64_t> order = aten_attention_order();  // ATen's own, taken before any change
  if (on) {
    order.erase(std::remove(order.begin(), order.end(), int64_t(at::SDPBackend::cudnn_attention)), order.end());
    order.insert(order.begin(), int64_t(at::SDPBackend::cudnn_attention));
  }
  at::globalContext().setSDPPriorityOrder(order);
}

bool cudnn_attention_preferred() {
  return at::globalContext().sDPPriorityOrder()[0] == at::SDPBackend::cudnn_attention;
}

// The caches' decode pool (transformer::set_decode_pool): per layer one tensor of `slots` caches
// of `tokens` positions each, [slots + 1, tokens, kv_heads, head_dim], and the slots not taken.
// The extra slot is never leased: a pooled step's graph is captured on it, so that the warm-up
// run before the capture writes into no cache. Shared with the leases of the caches in it, so
// that it lives as long as the last of them.
class decode_pool {
 public:
  decode_pool(int64_t slots, int64_t tokens, int64_t layer_count, int64_t kv, int64_t D,
              const torch::TensorOptions& opts)
      : slots(slots), tokens(tokens) {
    for (int64_t l = 0; l < layer_count; ++l) {
      keys.push_back(torch::empty({slots + 1, tokens, kv, D}, opts));
      values.push_back(torch::empty({slots + 1, tokens, kv, D}, opts));
    }
    for (int64_t s = slots - 1; s >= 0; --s) free_.push_back(s);
  }

  int64_t free_count() {
    std::lock_guard<std::mutex> lock(mutex_);
    return int64_t(free_.size());
  }

  std::optional<int64_t> take() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (free_.empty()) return std::nullopt;
    const int64_t slot = free_.back();
    free_.pop_back();
    return slot;
  }

  void give_back(int64_t slot) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(slot);
  }

  const int64_t slots, tokens;
  int64_t scratch() const { return slots; }
  std::vector<torch::Tensor> keys, values;  // per layer

 private:
  std::mutex mutex_;  // caches may be destroyed on another thread than the one that steps
  std::vector<int64_t> free_;
};

struct kv_cache::slot_lease {
  std::shared_ptr<decode_pool> pool;
  int64_t slot;
  slot_lease(const slot_lease&) = delete;  // one owner: a copy would give the slot back twice
  slot_lease& operator=(const slot_lease&) = delete;
  ~slot_lease() { pool->give_back(slot); }
};

kv_cache::kv_cache() = default;
kv_cache::kv_cache(kv_cache&&) noexcept = default;
kv_cache& kv_cache::operator=(kv_cache&&) noexcept = default;
kv_cache::~kv_cache() = default;

struct transformer::layers {
  struct block {
    torch::Tensor input_norm, post_norm, q_norm, k_norm;
    linear q, k, v, o, gate, up, down;
    bool fused_norm = false;  // a training copy's (transformer::training_copy)

    // The attention inputs for the residual stream x [B, T, hidden]: q [B, heads, T, D] and
    // k, v [B, kv_heads, T, D], with Qwen3's q/k norm and the rope of these positions applied.
    std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> attention_inputs(
        const model_config& c, const torch::Tensor& x, const torch::Tensor& cos,
        const torch::Tensor& sin) const {
      const int64_t B = x.size(0), T = x.size(1), D = c.head_dim;
      const torch::Tensor h = rms_norm(x, input_norm, c.rms_norm_eps, fused_norm);
      torch::Tensor qs = q(h).view({B, T, c.num_attention_heads, D});
      torch::Tensor ks = k(h).view({B, T, c.num_key_value_heads, D});
      torch::Tensor vs = v(h).view({B, T, c.num_key_value_heads, D}).transpose(1, 2);
      if (c.qk_norm) {
        qs = rms_norm(qs, q_norm, c.rms_norm_eps, fused_norm);
        ks = rms_norm(ks, k_norm, c.rms_norm_eps, fused_norm);
      }
      return {apply_rope(qs.transpose(1, 2), cos, sin), apply_rope(ks.transpose(1, 2), cos, sin), vs};
    }

    // The rest of the block after attention `a` [B, heads, T, D]: output projection and the
    // SwiGLU MLP, each added to the residual stream.
    torch::Tensor finish(const model_config& c, const torch::Tensor& x, const torch::Tensor& a) const {
      const int64_t B = x.size(0), T = x.size(1);
      torch::Tensor out = x + o(a.transpose(1, 2).reshape({B, T, c.num_attention_heads * c.head_dim}));
      const torch::Tensor h = rms_norm(out, post_norm, c.rms_norm_eps, fused_norm);
      return out + down(torch::silu(gate(h)) * up(h));
    }

    // The whole layer over a batch (hidden_states): `mask` [B, 1, T, T] bool, or undefined for
    // causal attention.
    torch::Tensor run(const model_config& c, const torch::Tensor& x, const torch::Tensor& cos,
                      const torch::Tensor& sin, const torch::Tensor& mask) const {
      const auto [q, k, v] = attention_inputs(c, x, cos, sin);
      return finish(c, x, attend(q, k, v, mask, /*causal=*/true));
    }
  };

  // One layer whose backward recomputes it (the reentrant scheme of torch.utils.checkpoint):
  // the graph keeps the layer's input instead of its activations. The backward runs the layer
  // again with grad on and back-propagates through that copy, which accumulates the layer's
  // weight gradients into their .grad; the node itself returns only the input's gradient, so
  // its output requires grad only through x (hidden_states recomputes only such layers).
  struct recomputed_block : torch::autograd::Function<recomputed_block> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                 const torch::Tensor& cos, const torch::Tensor& sin, const torch::Tensor* mask,
                                 const block* b, const model_config* c) {
      // The mask travels by pointer: an undefined tensor cannot be a Function's input.
      ctx->save_for_backward({x, cos, sin});
      ctx->saved_data["mask"] = *mask;
      // The block and config outlive the graph (the model does); IValues hold no pointers.
      ctx->saved_data["block"] = int64_t(reinterpret_cast<intptr_t>(b));
      ctx->saved_data["config"] = int64_t(reinterpret_cast<intptr_t>(c));
      // The backward runs outside the forward's autocast scope: it recomputes under the same.
      const auto autocast = autocast_scope::current(x.device());
      ctx->saved_data["autocast"] = autocast ? int64_t(*autocast) : int64_t(-1);
      return b->run(*c, x, cos, sin, *mask);
    }

    static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                   torch::autograd::variable_list grads) {
      const auto saved = ctx->get_saved_variables();
      const auto* b = reinterpret_cast<const block*>(intptr_t(ctx->saved_data["block"].toInt()));
      const auto* c = reinterpret_cast<const model_config*>(intptr_t(ctx->saved_data["config"].toInt()));
      torch::Tensor x = saved[0].detach().requires_grad_(true);
      const int64_t autocast = ctx->saved_data["autocast"].toInt();
      torch::Tensor y;
      {
        torch::AutoGradMode grad_on(true);
        const autocast_scope precision{
            x.device(), autocast < 0 ? std::nullopt : std::optional(static_cast<torch::ScalarType>(autocast))};
        y = b->run(*c, x, saved[1], saved[2], ctx->saved_data["mask"].toTensor());
      }
      torch::autograd::backward({y}, {grads[0]});
      return {x.grad(), torch::Tensor{}, torch::Tensor{}, torch::Tensor{}, torch::Tensor{}, torch::Tensor{}};
    }
  };
  struct slot {
    std::string name;
    torch::Tensor* tensor;
    std::vector<int64_t> shape;
  };
  torch::Tensor embed;
  std::vector<block> blocks;
  torch::Tensor norm;
  torch::Tensor lm_head;  // the same tensor as embed where the embeddings are tied
  torch::Tensor inv_freq;  // float32 on the device
  double attention_scaling = 1.0;
  std::vector<slot> slots;  // every weight under its Hugging Face name, in checkpoint order
  bool fused_norm = false;  // the final norm's; the blocks carry their own

  // The rotary tables of `positions` [B, T] (int64): cos and sin [B, T, head_dim] in `dtype`.
  std::pair<torch::Tensor, torch::Tensor> rope(const torch::Tensor& positions, torch::ScalarType dtype) const {
    torch::Tensor freqs = positions.to(torch::kFloat32).unsqueeze(-1) * inv_freq;
    torch::Tensor emb = torch::cat({freqs, freqs}, -1);
    return {(emb.cos() * attention_scaling).to(dtype), (emb.sin() * attention_scaling).to(dtype)};
  }

  const slot* find(const std::string& name) const {
    for (const auto& s : slots) {
      if (s.name == name) return &s;
    }
    return nullptr;
  }
};

// The decode step of B sequences as CUDA graphs (set_cuda_graphs): the work between two layers'
// attentions is one graph, replayed on static tensors, and only the attention itself (its cache
// copies and the flash-attention call, whose shapes change every step) runs eagerly. A step is
// then num_hidden_layers + 1 graph launches and a few launches per layer, instead of about
// forty launches per layer. One set of graphs per batch size, captured on first use into one
// memory pool; weights change in place (load_weights), so the graphs stay valid.
struct transformer::decode_batch {
  torch::Tensor ids, positions;             // [B, 1] int64: the step's static inputs
  std::vector<torch::Tensor> queries;       // per layer, [B, heads, D]: graph l's outputs
  std::vector<torch::Tensor> keys, values;  // per layer, [B, kv_heads, D]
  std::vector<torch::Tensor> attention;     // per layer, [B, heads, D]: graph l + 1's input
  torch::Tensor logits;                     // [B, vocab] float32: the last graph's output
  std::vector<std::unique_ptr<captured_graph>> graphs;  // num_hidden_layers + 1
};

transformer::decode_batch& transformer::graphed_batch(int64_t B) {
  std::unique_ptr<decode_batch>& found = graphs_[B];
  if (found) return *found;
  const model_config& c = config_;
  const layers& L = *layers_;
  const int64_t layer_count = c.num_hidden_layers, heads = c.num_attention_heads, D = c.head_dim;
  auto g = std::make_unique<decode_batch>();
  const auto long_opts = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  g->ids = torch::zeros({B, 1}, long_opts);
  g->positions = torch::zeros({B, 1}, long_opts);
  g->queries.resize(size_t(layer_count));
  g->keys.resize(size_t(layer_count));
  g->values.resize(size_t(layer_count));
  for (int64_t l = 0; l < layer_count; ++l) {
    g->attention.push_back(torch::zeros({B, heads, D}, torch::TensorOptions().dtype(dtype_).device(device_)));
  }
  // Tensors that one graph writes and a later one reads: allocated in the pool during capture
  // and kept alive here, so that no later capture reuses their memory.
  torch::Tensor cos, sin;
  std::vector<torch::Tensor> residual(size_t(layer_count + 1));
  const captured_graph::pool_id pool = captured_graph::new_pool();
  for (int64_t s = 0; s <= layer_count; ++s) {
    auto work = [&, s] {
      if (s == 0) {
        std::tie(cos, sin) = L.rope(g->positions, dtype_);
        residual[0] = torch::embedding(L.embed, g->ids);
      } else {
        residual[size_t(s)] = L.blocks[size_t(s - 1)].finish(c, residual[size_t(s - 1)], g->attention[size_t(s - 1)].unsqueeze(2));
      }
      if (s < layer_count) {
        const auto [q, k, v] = L.blocks[size_t(s)].attention_inputs(c, residual[size_t(s)], cos, sin);
        g->queries[size_t(s)] = q.squeeze(2).contiguous();
        g->keys[size_t(s)] = k.squeeze(2).contiguous();
        g->values[size_t(s)] = v.squeeze(2).contiguous();
      } else {
        const torch::Tensor hidden = rms_norm(residual[size_t(s)].view({B, c.hidden_size}), L.norm, c.rms_norm_eps);
        g->logits = torch::linear(hidden, L.lm_head).to(torch::kFloat32);
      }
    };
    g->graphs.push_back(std::make_unique<captured_graph>(work, pool));
  }
  found = std::move(g);
  return *found;
}

void transformer::set_cuda_graphs(bool on) {
  if (on && !captured_graph::available()) {
    throw model_error("this cuda-agent was built without the CUDA toolkit's headers, so it cannot capture CUDA graphs; "
                      "set policy.cuda_graphs = false or rebuild where /usr/local/cuda exists");
  }
  cuda_graphs_ = on;
  if (!on) {  // their memory back
    graphs_.clear();
    pooled_graphs_.clear();
  }
}

// The decode step of B sequences whose caches all hold slots of the pool, captured whole: the
// inputs are the token ids, positions and slots; each layer writes its new keys and values into
// the pool at (slot, position) and reads every slot in place, up to its sequence's length, with
// one variable-length flash-attention call (seqused_k). One graph per batch size.
struct transformer::pooled_step {
  torch::Tensor inputs;         // [3, B] int64: token ids, positions, slots
  torch::Tensor query_starts;   // [B + 1] int32: 0, 1, .., B (one query per sequence)
  torch::Tensor key_starts;     // [B + 1] int32: where each slot starts in a layer's pool
  torch::Tensor keys_used;      // [B] int32: each sequence's length with its new token
  torch::Tensor logits;         // [B, vocab] float32: the graph's output
  std::unique_ptr<captured_graph> graph;
};

transformer::pooled_step& transformer::graphed_pooled_step(int64_t B) {
  std::unique_ptr<pooled_step>& found = pooled_graphs_[B];
  if (found) return *found;
  const model_config& c = config_;
  const layers& L = *layers_;
  const decode_pool& P = *pool_;
  const int64_t kv = c.num_key_value_heads, D = c.head_dim;
  auto g = std::make_unique<pooled_step>();
  const auto long_opts = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  const auto int_opts = torch::TensorOptions().dtype(torch::kInt32).device(device_);
  g->inputs = torch::zeros({3, B}, long_opts);
  g->inputs[2].fill_(P.scratch());  // the capture's warm-up run writes into the scratch slot
  g->query_starts = torch::arange(B + 1, int_opts);
  g->key_starts = torch::full({B + 1}, (P.slots + 1) * P.tokens, int_opts);
  g->keys_used = torch::ones({B}, int_opts);
  auto work = [&] {
    const torch::Tensor ids = g->inputs[0].view({B, 1}), positions = g->inputs[1].view({B, 1});
    const torch::Tensor slot_starts = g->inputs[2] * P.tokens;
    const torch::Tensor rows = slot_starts + g->inputs[1];  // each new token's row in a layer's pool
    g->key_starts.narrow(0, 0, B).copy_(slot_starts);
    g->keys_used.copy_(g->inputs[1] + 1);
    const auto [cos, sin] = L.rope(positions, dtype_);
    torch::Tensor x = torch::embedding(L.embed, ids);
    for (size_t l = 0; l < L.blocks.size(); ++l) {
      const auto& blk = L.blocks[l];
      const auto [q, k, v] = blk.attention_inputs(c, x, cos, sin);
      torch::Tensor keys = P.keys[l].view({-1, kv, D}), values = P.values[l].view({-1, kv, D});
      keys.index_copy_(0, rows, k.squeeze(2));
      values.index_copy_(0, rows, v.squeeze(2));
      const auto out = at::_flash_attention_forward(
          q.squeeze(2).contiguous(), keys, values, g->query_starts, g->key_starts, /*max_q=*/1,
          /*max_k=*/P.tokens, /*dropout_p=*/0.0, /*is_causal=*/false, /*return_debug_mask=*/false, std::nullopt,
          std::nullopt, std::nullopt, g->keys_used);
      x = blk.finish(c, x, std::get<0>(out).unsqueeze(2));
    }
    const torch::Tensor hidden = rms_norm(x.view({B, c.hidden_size}), L.norm, c.rms_norm_eps);
    g->logits = torch::linear(hidden, L.lm_head).to(torch::kFloat32);
  };
  g->graph = std::make_unique<captured_graph>(work, captured_graph::new_pool());
  found = std::move(g);
  return *found;
}

void transformer::set_decode_pool(int64_t slots, int64_t tokens) {
  if (slots < 0 || tokens < 0 || (slots > 0 && tokens == 0)) {
    throw model_error("decode pool of " + std::to_string(slots) + " slots of " + std::to_string(tokens) +
                      " tokens: both must be positive (or 0 slots, no pool)");
  }
  pooled_graphs_.clear();
  pool_.reset();  // caches in its slots keep it until they are gone
  if (slots == 0) return;
  const model_config& c = config_;
  const auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
  try {
    pool_ = std::make_shared<decode_pool>(slots, tokens, c.num_hidden_layers, c.num_key_value_heads, c.head_dim, opts);
  } catch (const c10::Error&) {
    const double gib = 2.0 * double(c.num_hidden_layers) * double(slots + 1) * double(tokens) *
                       double(c.num_key_value_heads * c.head_dim) * double(torch::elementSize(dtype_)) / double(1 << 30);
    char size[32];
    std::snprintf(size, sizeof size, "%.1f", gib);
    throw model_error("a decode pool of " + std::to_string(slots) + " slots of " + std::to_string(tokens) + " tokens (" +
                      size + " GiB) cannot be allocated on " + device_.str() +
                      "; lower policy.decode_pool_slots or policy.decode_pool_tokens");
  }
}

int64_t transformer::free_pool_slots() const { return pool_ ? pool_->free_count() : 0; }

int64_t transformer::pool_slot_tokens() const { return pool_ ? pool_->tokens : 0; }

void transformer::release_slot(kv_cache& cache) {
  if (cache.lease_) own_storage(cache, std::max<int64_t>(cache.length_, 16));
}

void transformer::own_storage(kv_cache& cache, int64_t capacity) {
  const model_config& c = config_;
  const auto opts = torch::TensorOptions().dtype(dtype_).device(device_);
  cache.keys_.resize(size_t(c.num_hidden_layers));
  cache.values_.resize(size_t(c.num_hidden_layers));
  for (auto* stores : {&cache.keys_, &cache.values_}) {
    for (torch::Tensor& store : *stores) {
      torch::Tensor own = torch::empty({capacity, c.num_key_value_heads, c.head_dim}, opts);
      if (store.defined() && cache.length_ > 0) own.slice(0, 0, cache.length_).copy_(store.slice(0, 0, cache.length_));
      store = own;
    }
  }
  cache.lease_.reset();  // a slot it held goes back to the pool
}

// Into a free slot of the pool, where the cache holds none and will fit one: its tokens so far
// are copied there. (Out of a slot it outgrows: step()'s growth below.)
void transformer::place_in_pool(kv_cache& cache, int64_t need) {
  if (!pool_ || cache.lease_ || need > pool_->tokens) return;
  const std::optional<int64_t> slot = pool_->take();
  if (!slot) return;
  std::unique_ptr<kv_cache::slot_lease> lease{new kv_cache::slot_lease{pool_, *slot}};
  std::vector<torch::Tensor> keys, values;
  for (size_t l = 0; l < pool_->keys.size(); ++l) {
    keys.push_back(pool_->keys[l][*slot]);
    values.push_back(pool_->values[l][*slot]);
    if (cache.length_ > 0) {
      keys.back().slice(0, 0, cache.length_).copy_(cache.keys_[l].slice(0, 0, cache.length_));
      values.back().slice(0, 0, cache.length_).copy_(cache.values_[l].slice(0, 0, cache.length_));
    }
  }
  cache.keys_ = std::move(keys);
  cache.values_ = std::move(values);
  cache.lease_ = std::move(lease);  // the memory it held before, if any, goes back
}

autocast_scope::autocast_scope(torch::Device device, std::optional<torch::ScalarType> dtype)
    : type_(device.type()),
      was_enabled_(at::autocast::is_autocast_enabled(type_)),
      was_dtype_(at::autocast::get_autocast_dtype(type_)) {
  at::autocast::set_autocast_enabled(type_, dtype.has_value());
  if (dtype) at::autocast::set_autocast_dtype(type_, *dtype);
  at::autocast::increment_nesting();
}

autocast_scope::~autocast_scope() {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(type_, was_enabled_);
  at::autocast::set_autocast_dtype(type_, was_dtype_);
}

std::optional<torch::ScalarType> autocast_scope::current(torch::Device device) {
  if (!at::autocast::is_autocast_enabled(device.type())) return std::nullopt;
  return at::autocast::get_autocast_dtype(device.type());
}

int64_t kv_cache::bytes() const {
  int64_t total = 0;
  for (const auto& t : keys_) total += int64_t(t.nbytes());
  for (const auto& t : values_) total += int64_t(t.nbytes());
  return total;
}

void kv_cache::truncate(int64_t n) {
  if (n < 0 || n > length_) {
    throw model_error("kv_cache::truncate(" + std::to_string(n) + ") on a cache of " +
                      std::to_string(length_) + " tokens");
  }
  length_ = n;
}

// Tensors always carry an index; "cuda" means cuda:0 in a process that never changes devices,
// and the caches' device checks compare with the tensors' devices.
static torch::Device indexed(torch::Device device) {
  return device.is_cuda() && !device.has_index() ? torch::Device{torch::kCUDA, 0} : device;
}

transformer::transformer(model_config config, torch::Device device, torch::ScalarType dtype)
    : config_(std::move(config)), device_(indexed(device)), dtype_(dtype), layers_(std::make_unique<layers>()) {
  const model_config& c = config_;
  layers& L = *layers_;
  L.blocks.resize(size_t(c.num_hidden_layers));
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;
  const bool o_bias = c.attention_bias && c.model_type != "qwen2";
  auto add = [&](std::string name, torch::Tensor* t, std::vector<int64_t> shape) {
    L.slots.push_back({std::move(name), t, std::move(shape)});
  };
  add("model.embed_tokens.weight", &L.embed, {c.vocab_size, H});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers::block& b = L.blocks[size_t(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", &b.input_norm, {H});
    add(p + "self_attn.q_proj.weight", &b.q.weight, {q_out, H});
    if (c.attention_bias) add(p + "self_attn.q_proj.bias", &b.q.bias, {q_out});
    add(p + "self_attn.k_proj.weight", &b.k.weight, {kv_out, H});
    if (c.attention_bias) add(p + "self_attn.k_proj.bias", &b.k.bias, {kv_out});
    add(p + "self_attn.v_proj.weight", &b.v.weight, {kv_out, H});
    if (c.attention_bias) add(p + "self_attn.v_proj.bias", &b.v.bias, {kv_out});
    add(p + "self_attn.o_proj.weight", &b.o.weight, {H, q_out});
    if (o_bias) add(p + "self_attn.o_proj.bias", &b.o.bias, {H});
    if (c.qk_norm) {
      add(p + "self_attn.q_norm.weight", &b.q_norm, {D});
      add(p + "self_attn.k_norm.weight", &b.k_norm, {D});
    }
    add(p + "post_attention_layernorm.weight", &b.post_norm, {H});
    add(p + "mlp.gate_proj.weight", &b.gate.weight, {I, H});
    if (c.mlp_bias) add(p + "mlp.gate_proj.bias", &b.gate.bias, {I});
    add(p + "mlp.up_proj.weight", &b.up.weight, {I, H});
    if (c.mlp_bias) add(p + "mlp.up_proj.bias", &b.up.bias, {I});
    add(p + "mlp.down_proj.weight", &b.down.weight, {H, I});
    if (c.mlp_bias) add(p + "mlp.down_proj.bias", &b.down.bias, {H});
  }
  add("model.norm.weight", &L.norm, {H});
  if (!c.tie_word_embeddings) add("lm_head.weight", &L.lm_head, {c.vocab_size, H});
  auto [inv_freq, scaling] = rope_frequencies(c);
  L.inv_freq = inv_freq.to(device);
  L.attention_scaling = scaling;
}

transformer::~transformer() = default;

std::shared_ptr<transformer> transformer::load(const std::filesystem::path& dir, torch::Device device,
                                               torch::ScalarType dtype) {
  if (dtype != torch::kFloat32 && dtype != torch::kBFloat16 && dtype != torch::kFloat16) {
    throw model_error(dir.string() + ": dtype " + c10::toString(dtype) +
                      " is not supported (float32, bfloat16 or float16)");
  }
  if (device.is_cuda() && (!torch::cuda::is_available() || device.index() >= int(torch::cuda::device_count()))) {
    throw model_error(dir.string() + ": device " + device.str() + " requested, but " +
                      std::to_string(torch::cuda::device_count()) +
                      " CUDA devices are visible (a CPU-only LibTorch, or no GPU on this host)");
  }
  model_config config = model_config::read(dir);
  safetensors_checkpoint checkpoint(dir);
  std::shared_ptr<transformer> model(new transformer(std::move(config), device, dtype));
  layers& L = *model->layers_;
  std::set<std::string> expected;
  for (const auto& s : L.slots) {
    expected.insert(s.name);
    if (!checkpoint.contains(s.name)) {
      throw model_error(dir.string() + ": missing tensor '" + s.name +
                        "' (the weights do not match config.json)");
    }
    const safetensors_entry& e = checkpoint.entry(s.name);
    if (e.shape != s.shape) {
      throw model_error(checkpoint.file_of(s.name).string() + ": tensor '" + s.name + "' has shape " +
                        shape_string(e.shape) + ", config.json implies " + shape_string(s.shape));
    }
  }
  for (const auto& name : checkpoint.names()) {
    if (expected.count(name)) continue;
    // Tied checkpoints may still carry the head; old ones carry rotary buffers.
    if (name == "lm_head.weight" && model->config_.tie_word_embeddings) continue;
    if (name.size() >= 19 && name.compare(name.size() - 19, 19, "rotary_emb.inv_freq") == 0) continue;
    throw model_error(checkpoint.file_of(name).string() + ": unexpected tensor '" + name +
                      "' (config.json describes no such weight)");
  }
  for (const auto& s : L.slots) {
    *s.tensor = checkpoint.load(s.name, device, dtype).set_requires_grad(true);
  }
  if (model->config_.tie_word_embeddings) L.lm_head = L.embed;
  return model;
}

std::shared_ptr<transformer> transformer::training_copy(torch::ScalarType dtype) const {
  std::shared_ptr<transformer> copy(new transformer(config_, device_, dtype));
  layers& L = *copy->layers_;
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < L.slots.size(); ++i) {
    *L.slots[i].tensor = layers_->slots[i].tensor->to(dtype, /*non_blocking=*/false, /*copy=*/true).set_requires_grad(true);
  }
  if (config_.tie_word_embeddings) L.lm_head = L.embed;
  L.fused_norm = true;
  for (auto& b : L.blocks) b.fused_norm = true;
  copy->version_ = version_;
  return copy;
}

kv_cache transformer::new_cache() const { return kv_cache{}; }

torch::Tensor transformer::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask) {
  return logits(hidden_states(input_ids, attention_mask));
}

torch::Tensor transformer::logits(const torch::Tensor& hidden) const {
  return torch::linear(hidden, layers_->lm_head).to(torch::kFloat32);
}

const torch::Tensor& transformer::output_weight() const { return layers_->lm_head; }

torch::Tensor transformer::hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                         bool recompute_layers) {
  const model_config& c = config_;
  const layers& L = *layers_;
  if (input_ids.dim() != 2) throw model_error("transformer::forward: input_ids must be [batch, tokens]");
  const int64_t B = input_ids.size(0), T = input_ids.size(1);
  torch::Tensor ids = input_ids.to(device_, torch::kInt64);
  if (ids.numel() > 0 && (ids.min().item<int64_t>() < 0 || ids.max().item<int64_t>() >= c.vocab_size)) {
    throw model_error("transformer::forward: a token id outside [0, " + std::to_string(c.vocab_size) + ")");
  }
  torch::Tensor mask;  // [B, 1, T, T] bool, or undefined: causal only
  if (attention_mask.defined() && attention_mask.sizes() != input_ids.sizes()) {
    throw model_error("transformer::forward: attention_mask must have input_ids' shape");
  }
  const torch::Tensor keep = attention_mask.defined() ? attention_mask.to(device_).to(torch::kBool) : torch::Tensor{};
  // Right padding only (every row ones, then zeros): causal attention already keeps each real
  // token off the padding after it, so the fused kernels run without a mask (an explicit one
  // takes the math path, whose T x T scores do not fit long sequences). Padding rows differ,
  // and nothing reads them.
  const bool right_padded =
      keep.defined() &&
      (T < 2 || !keep.narrow(1, 1, T - 1).logical_and(keep.narrow(1, 0, T - 1).logical_not()).any().item<bool>());
  if (keep.defined() && !right_padded) {
    auto bool_opts = torch::TensorOptions().dtype(torch::kBool).device(device_);
    torch::Tensor keys = keep.view({B, 1, 1, T});
    torch::Tensor causal = torch::ones({T, T}, bool_opts).tril();
    // A padding query also sees itself, so that no row is empty (NaN otherwise).
    mask = causal.logical_and(keys).logical_or(torch::eye(T, bool_opts));
  }
  torch::Tensor positions = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(device_))
                                .unsqueeze(0)
                                .expand({B, T});
  const auto [cos, sin] = L.rope(positions, dtype_);

  torch::Tensor x = torch::embedding(L.embed, ids);
  for (const auto& b : L.blocks) {
    if (recompute_layers && torch::GradMode::is_enabled() && x.requires_grad()) {
      x = layers::recomputed_block::apply(x, cos, sin, &mask, &b, &c);
    } else {
      x = b.run(c, x, cos, sin, mask);
    }
  }
  return rms_norm(x, L.norm, c.rms_norm_eps, L.fused_norm);
}

torch::Tensor transformer::step(const std::vector<std::vector<int64_t>>& tokens,
                                const std::vector<kv_cache*>& caches) {
  torch::NoGradGuard no_grad;
  const model_config& c = config_;
  const layers& L = *layers_;
  const int64_t B = int64_t(tokens.size());
  if (B == 0 || caches.size() != tokens.size()) {
    throw model_error("transformer::step: one cache per sequence, at least one sequence");
  }
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads, D = c.head_dim;
  const int64_t layer_count = c.num_hidden_layers;
  std::set<const kv_cache*> distinct;
  int64_t N = 0;
  for (int64_t b = 0; b < B; ++b) {
    kv_cache* cache = caches[size_t(b)];
    if (!cache || !distinct.insert(cache).second) {
      throw model_error("transformer::step: a null cache, or one cache for two sequences");
    }
    if (tokens[size_t(b)].empty()) throw model_error("transformer::step: a sequence without new tokens");
    for (int64_t id : tokens[size_t(b)]) {
      if (id < 0 || id >= c.vocab_size) {
        throw model_error("transformer::step: token id " + std::to_string(id) + " outside [0, " +
                          std::to_string(c.vocab_size) + ")");
      }
    }
    if (!cache->keys_.empty() &&
        (int64_t(cache->keys_.size()) != layer_count || cache->keys_[0].device() != device_ ||
         cache->keys_[0].scalar_type() != dtype_ || cache->keys_[0].size(1) != kv ||
         cache->keys_[0].size(2) != D)) {
      throw model_error("transformer::step: a kv_cache made by another model");
    }
    N = std::max(N, int64_t(tokens[size_t(b)].size()));
  }

  // Capacity: doubled when it runs out, so that appending costs amortised O(1) copies.
  auto cache_opts = torch::TensorOptions().dtype(dtype_).device(device_);
  for (int64_t b = 0; b < B; ++b) {
    kv_cache* cache = caches[size_t(b)];
    const int64_t need = cache->length_ + int64_t(tokens[size_t(b)].size());
    place_in_pool(*cache, need);
    int64_t capacity = cache->keys_.empty() ? 0 : cache->keys_[0].size(0);
    if (need <= capacity) continue;
    own_storage(*cache, std::max<int64_t>({need, capacity * 2, 16}));
  }

  // Every sequence's new tokens, right-padded to N: projections and MLP run batched; attention
  // runs per sequence against its own cache, so caches of different lengths are never copied
  // into one padded tensor.
  std::vector<int64_t> ids(static_cast<size_t>(B * N), 0), positions(static_cast<size_t>(B * N), 0);
  std::vector<int64_t> cached(static_cast<size_t>(B)), fresh(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    cached[size_t(b)] = caches[size_t(b)]->length_;
    fresh[size_t(b)] = int64_t(tokens[size_t(b)].size());
    for (int64_t i = 0; i < N; ++i) {
      if (i < fresh[size_t(b)]) ids[size_t(b * N + i)] = tokens[size_t(b)][size_t(i)];
      positions[size_t(b * N + i)] = cached[size_t(b)] + i;
    }
  }
  auto long_cpu = torch::TensorOptions().dtype(torch::kInt64);

  const bool batched = (batched_decode_ || cuda_graphs_) && N == 1 && device_.is_cuda() &&
                       (dtype_ == torch::kBFloat16 || dtype_ == torch::kHalf);
  const bool all_pooled = pool_ && std::all_of(caches.begin(), caches.end(), [&](const kv_cache* cache) {
    return cache->lease_ && cache->lease_->pool == pool_;
  });
  if (batched && cuda_graphs_ && all_pooled) {
    std::vector<int64_t> inputs(static_cast<size_t>(3 * B));
    for (int64_t b = 0; b < B; ++b) {
      inputs[size_t(b)] = ids[size_t(b)];
      inputs[size_t(B + b)] = cached[size_t(b)];
      inputs[size_t(2 * B + b)] = caches[size_t(b)]->lease_->slot;
    }
    pooled_step& g = graphed_pooled_step(B);
    g.inputs.copy_(torch::from_blob(inputs.data(), {3, B}, long_cpu));
    g.graph->replay();
    ++pooled_steps_;
    for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->length_ += 1;
    return g.logits.clone();  // the next replay overwrites g.logits
  }
  torch::Tensor id_tensor = torch::from_blob(ids.data(), {B, N}, long_cpu).to(device_);
  torch::Tensor pos_tensor = torch::from_blob(positions.data(), {B, N}, long_cpu).to(device_);
  std::optional<batched_decode> decode;
  if (batched) {
    std::vector<kv_cache_storage> storage;
    for (kv_cache* cache : caches) storage.push_back({&cache->keys_, &cache->values_});
    decode.emplace(storage, cached, cache_opts);
  }
  if (decode && cuda_graphs_) {
    decode_batch& g = graphed_batch(B);
    g.ids.copy_(id_tensor);
    g.positions.copy_(pos_tensor);
    g.graphs[0]->replay();
    for (int64_t l = 0; l < layer_count; ++l) {
      g.attention[size_t(l)].copy_(decode->attend(l, g.queries[size_t(l)], g.keys[size_t(l)], g.values[size_t(l)]));
      g.graphs[size_t(l + 1)]->replay();
    }
    for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->length_ += 1;
    return g.logits.clone();  // the next replay overwrites g.logits
  }

  const auto [cos, sin] = L.rope(pos_tensor, dtype_);
  // Prompts on empty caches (the engine's prefills of new sequences) attend together: causal
  // attention over the right-padded batch is exact for every real position, since none of them
  // sees a later one, padding included.
  const bool fresh_batch = N > 1 && std::all_of(cached.begin(), cached.end(), [](int64_t p) { return p == 0; });
  // Per sequence: its attention mask over cache + new tokens (undefined where plain causal or a
  // single query does).
  std::vector<torch::Tensor> masks(static_cast<size_t>(B));
  std::vector<bool> causal(size_t(B), false);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = fresh[size_t(b)], past = cached[size_t(b)];
    if (n == 1) continue;
    if (past == 0) {
      causal[size_t(b)] = true;
      continue;
    }
    auto opts = torch::TensorOptions().dtype(torch::kInt64).device(device_);
    masks[size_t(b)] = torch::arange(past + n, opts).unsqueeze(0) <= (torch::arange(n, opts) + past).unsqueeze(1);
  }

  torch::Tensor x = torch::embedding(L.embed, id_tensor);
  for (int64_t l = 0; l < layer_count; ++l) {
    const auto& blk = L.blocks[size_t(l)];
    const auto [q, k, v] = blk.attention_inputs(c, x, cos, sin);
    if (decode) {
      const torch::Tensor a = decode->attend(l, q.squeeze(2).contiguous(), k.squeeze(2).contiguous(),
                                             v.squeeze(2).contiguous());
      x = blk.finish(c, x, a.unsqueeze(2));
      continue;
    }
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = fresh[size_t(b)], past = cached[size_t(b)];
      caches[size_t(b)]->keys_[size_t(l)].slice(0, past, past + n).copy_(k[b].slice(1, 0, n).transpose(0, 1));
      caches[size_t(b)]->values_[size_t(l)].slice(0, past, past + n).copy_(v[b].slice(1, 0, n).transpose(0, 1));
    }
    if (fresh_batch) {
      x = blk.finish(c, x, attend(q, k, v, {}, /*causal=*/true));
      continue;
    }
    torch::Tensor out = torch::zeros({B, heads, N, D}, cache_opts);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = fresh[size_t(b)], past = cached[size_t(b)];
      const kv_cache& cache = *caches[size_t(b)];
      torch::Tensor qb = q.slice(0, b, b + 1).slice(2, 0, n);
      torch::Tensor kb = cache.keys_[size_t(l)].slice(0, 0, past + n).transpose(0, 1).unsqueeze(0);
      torch::Tensor vb = cache.values_[size_t(l)].slice(0, 0, past + n).transpose(0, 1).unsqueeze(0);
      const torch::Tensor& mask = masks[size_t(b)];
      torch::Tensor a = attend(qb, kb, vb, mask, causal[size_t(b)]);
      out.slice(0, b, b + 1).slice(2, 0, n).copy_(a);
    }
    x = blk.finish(c, x, out);
  }
  std::vector<int64_t> last(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) last[size_t(b)] = b * N + fresh[size_t(b)] - 1;
  torch::Tensor last_index = torch::from_blob(last.data(), {B}, long_cpu).to(device_);
  torch::Tensor final_hidden = x.reshape({B * N, c.hidden_size}).index_select(0, last_index);
  final_hidden = rms_norm(final_hidden, L.norm, c.rms_norm_eps);
  torch::Tensor logits = torch::linear(final_hidden, L.lm_head).to(torch::kFloat32);
  for (int64_t b = 0; b < B; ++b) caches[size_t(b)]->length_ += fresh[size_t(b)];
  return logits;
}

std::vector<std::pair<std::string, torch::Tensor>> transformer::named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  out.reserve(layers_->slots.size());
  for (const auto& s : layers_->slots) out.emplace_back(s.name, *s.tensor);
  return out;
}

void transformer::load_weights(const std::vector<std::pair<std::string, torch::Tensor>>& weights,
                               int64_t version) {
  // Everything is checked before anything is copied, so a bad update leaves the weights whole.
  std::set<std::string> seen;
  for (const auto& [name, tensor] : weights) {
    const layers::slot* s = layers_->find(name);
    if (!s) throw model_error("transformer::load_weights: unknown weight '" + name + "'");
    if (!seen.insert(name).second) throw model_error("transformer::load_weights: '" + name + "' given twice");
    if (tensor.sizes().vec() != s->shape) {
      throw model_error("transformer::load_weights: '" + name + "' has shape " + shape_string(tensor.sizes()) +
                        ", expected " + shape_string(s->shape));
    }
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : weights) layers_->find(name)->tensor->copy_(tensor);
  version_ = version;
}

void transformer::save_pretrained(const std::filesystem::path& dir, int64_t shard_bytes) const {
  std::filesystem::create_directories(dir);
  nlohmann::json json = config_.to_json();
  json["dtype"] = dtype_name(dtype_);
  {
    std::ofstream out(dir / "config.json", std::ios::trunc);
    out << json.dump(2) << "\n";
    if (!out) throw model_error((dir / "config.json").string() + ": cannot be written");
  }
  write_safetensors_checkpoint(dir, named_parameters(), shard_bytes);
}

}  // namespace cuda_agent::model
