// The policy's model: a decoder-only transformer of the Llama, Qwen2 and Qwen3 families in
// LibTorch, loaded from a Hugging Face checkpoint directory (config.json, *.safetensors). One
// library for the two actors that use it: the `torch` policy backend samples with it (through
// generation_engine.hpp), the learner trains it (forward() is differentiable).
//
//   auto model = model::transformer::load(dir, torch::kCPU, torch::kFloat32);
//   torch::Tensor logits = model->forward(input_ids);          // [B, T, vocab]
//   model::kv_cache cache = model->new_cache();
//   torch::Tensor last = model->step({{1, 2, 3}}, {&cache});   // [1, vocab]; cache holds 3 tokens
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "actors/model/model_config.hpp"

namespace cuda_agent::model {

class decode_pool;  // defined in transformer.cpp

// One sequence's keys and values, layer by layer, on the model's device and dtype. Owned by the
// caller (the generation engine keeps one per episode between turns); only the model that made
// it may extend it. Move-only: where the model has a decode pool (set_decode_pool), the cache
// may hold one of its slots, which it gives back when it is destroyed.
class kv_cache {
 public:
  kv_cache();
  kv_cache(kv_cache&&) noexcept;
  kv_cache& operator=(kv_cache&&) noexcept;
  ~kv_cache();

  int64_t length() const { return length_; }  // tokens held
  int64_t bytes() const;                      // device memory held, capacity included
  // Forgets every token from position `n` on (n <= length()).
  void truncate(int64_t n);
  void clear() { truncate(0); }
  // Whether its keys and values live in a slot of a decode pool.
  bool pooled() const { return lease_ != nullptr; }

 private:
  friend class transformer;
  struct slot_lease;  // a decode pool's slot, given back on destruction
  // Token-major, so that any run of positions is one contiguous block (the batched decode step
  // copies them in one launch for all sequences). In a pool's slot they are views of it.
  std::vector<torch::Tensor> keys_;    // per layer: [capacity, kv_heads, head_dim]
  std::vector<torch::Tensor> values_;  // per layer: [capacity, kv_heads, head_dim]
  int64_t length_ = 0;
  std::unique_ptr<slot_lease> lease_;
};

// Mixed precision for the scope's lifetime (LibTorch's autocast, thread-local): on `device`'s
// type, matrix products and attention run in `dtype` (bfloat16 or half) on casts of the weights,
// which stay as they are, as do their gradients. nullopt: autocast off in the scope. Scopes nest;
// the outermost one's end drops the cached weight casts.
class autocast_scope {
 public:
  autocast_scope(torch::Device device, std::optional<torch::ScalarType> dtype);
  ~autocast_scope();
  autocast_scope(const autocast_scope&) = delete;
  autocast_scope& operator=(const autocast_scope&) = delete;

  // The dtype autocast runs `device`'s type in on this thread now; nullopt: off.
  static std::optional<torch::ScalarType> current(torch::Device device);

 private:
  c10::DeviceType type_;
  bool was_enabled_;
  torch::ScalarType was_dtype_;
};

// Whether SDPA tries cuDNN's fused attention first on CUDA (prefill and training; the batched
// decode calls flash attention itself), instead of ATen's own order, which puts flash first
// (learner.attention = "cudnn"). ATen keeps one order per process, so this is process-wide.
// With cuDNN first, grouped key and value heads are repeated to every query head, so that
// cuDNN, which takes equal head counts, can run; where it cannot, SDPA falls back in order.
void prefer_cudnn_attention(bool on);
bool cudnn_attention_preferred();

class transformer {
 public:
  // Reads config.json and the weights (model.safetensors, or the shards that
  // model.safetensors.index.json names), memory-mapped and converted straight to `device` and
  // `dtype`. Throws model_error naming the file and the problem: a missing or unexpected tensor,
  // a wrong shape, an unsupported architecture or rope type, a truncated file.
  static std::shared_ptr<transformer> load(const std::filesystem::path& dir, torch::Device device,
                                           torch::ScalarType dtype);

  // A copy for training: the same config and device, every weight cast to `dtype` as a leaf that
  // requires grad, and RMSNorm as ATen's fused rms_norm in that dtype (one rounding, as float32
  // models run it) instead of transformers' two. The learner's bfloat16 working weights
  // (learner.bf16_working_weights) are such a copy, refreshed with load_weights; inference parity
  // with transformers holds for load()ed models only.
  std::shared_ptr<transformer> training_copy(torch::ScalarType dtype) const;

  const model_config& config() const { return config_; }
  torch::Device device() const { return device_; }
  torch::ScalarType dtype() const { return dtype_; }

  // Logits [B, T, vocab] (float32) for a right-padded batch; attention_mask [B, T] is 1 on real
  // tokens (undefined: every token is real). No cache; differentiable, for training and parity.
  // The weights require grad, as an nn.Module's do: wrap inference in torch::NoGradGuard.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  // What forward() computes before the output head: the final-norm hidden states [B, T, hidden]
  // in the model's dtype (the critic puts its value head on them). Differentiable. With
  // recompute_layers (activation checkpointing), the graph keeps each layer's input only and
  // the backward runs the layer again: about a third more compute for the activations of one
  // layer instead of all of them. Gradients are the same up to float rounding.
  torch::Tensor hidden_states(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                              bool recompute_layers = false);
  // The float32 logits of hidden states [..., hidden]: forward() is logits(hidden_states()).
  torch::Tensor logits(const torch::Tensor& hidden) const;
  // The output head's weight [vocab, hidden] that logits() applies (the embedding when tied),
  // for callers that apply it in pieces (learner::logprobs_of_hidden).
  const torch::Tensor& output_weight() const;

  // Inference: appends tokens[b] (at least one) to *caches[b] and returns the float32 logits of
  // each sequence's last new token, [B, vocab]. Sequences may be of different lengths, cached
  // and new: a prefill of one and the decode step of others run in one call (projections and
  // the MLP run batched over the new tokens right-padded to the longest; attention runs per
  // sequence on its own cache, which grows by doubling). A decode step (one token per sequence)
  // on CUDA in bfloat16 or half can run attention for all sequences in one flash-attention call
  // instead (set_batched_decode), and capture the rest of the step in CUDA graphs
  // (set_cuda_graphs). Runs under NoGradGuard.
  torch::Tensor step(const std::vector<std::vector<int64_t>>& tokens,
                     const std::vector<kv_cache*>& caches);

  kv_cache new_cache() const;

  // Whether a decode step on CUDA runs batched (above); off by default (policy.batched_decode),
  // so that every step takes the per-sequence path.
  void set_batched_decode(bool on) { batched_decode_ = on; }
  // Whether such a batched decode step replays CUDA graphs of everything but attention (one set
  // per batch size, captured on first use); implies the batched step. Off by default
  // (policy.cuda_graphs). Throws model_error where this build cannot capture graphs.
  void set_cuda_graphs(bool on);
  // A decode pool of `slots` caches of up to `tokens` tokens each, allocated now, layer by layer
  // in one tensor (policy.decode_pool_slots, policy.decode_pool_tokens; 0 slots: none, the
  // default). A cache takes a free slot when it grows and fits, and leaves it for memory of its
  // own when it outgrows it. A decode step whose caches all hold slots of the pool runs, with
  // CUDA graphs on, as one graph: the new keys and values are written into the pool and one
  // variable-length flash-attention call per layer reads every sequence's slot in place, so the
  // step costs the host a copy of its inputs and one launch whatever the batch. Throws
  // model_error for a bad size or where the memory cannot be had.
  void set_decode_pool(int64_t slots, int64_t tokens);
  // Decode steps that ran as one graph on the pool's slots, since the model was loaded.
  int64_t pooled_steps() const { return pooled_steps_; }
  // The pool's free slots and the tokens of each (0 and 0 without a pool).
  int64_t free_pool_slots() const;
  int64_t pool_slot_tokens() const;
  // Moves a cache out of its pool slot into memory of its own, tokens kept, and frees the slot
  // (the generation engine hands an idle episode's slot to a running one this way). A cache
  // without a slot is left as it is.
  void release_slot(kv_cache& cache);

  // The weights under their Hugging Face names ("model.layers.0.self_attn.q_proj.weight").
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  // Replaces the weights in place (same names and shapes; throws model_error otherwise) and
  // sets the version. Callers hold no step() or forward() meanwhile.
  void load_weights(const std::vector<std::pair<std::string, torch::Tensor>>& weights,
                    int64_t version);
  // Writes config.json and model.safetensors (split into shards above `shard_bytes`) that
  // transformers' from_pretrained loads unchanged.
  void save_pretrained(const std::filesystem::path& dir, int64_t shard_bytes = int64_t{5} << 30) const;

  // The version of the weights now held: 0 as loaded, then what load_weights set.
  int64_t weight_version() const { return version_; }

  transformer(const transformer&) = delete;
  transformer& operator=(const transformer&) = delete;
  ~transformer();

 private:
  transformer(model_config config, torch::Device device, torch::ScalarType dtype);
  struct layers;         // the modules, defined in transformer.cpp
  struct decode_batch;   // a captured decode step, defined in transformer.cpp
  struct pooled_step;    // a decode step on pooled caches captured whole, defined there
  decode_batch& graphed_batch(int64_t batch_size);
  pooled_step& graphed_pooled_step(int64_t batch_size);
  void place_in_pool(kv_cache& cache, int64_t need);
  // The cache's tokens moved into storage of `capacity` positions of its own; a pool slot it
  // held is given back (step()'s growth, release_slot).
  void own_storage(kv_cache& cache, int64_t capacity);
  model_config config_;
  torch::Device device_;
  torch::ScalarType dtype_;
  std::unique_ptr<layers> layers_;
  int64_t version_ = 0;
  bool batched_decode_ = false;
  bool cuda_graphs_ = false;
  std::map<int64_t, std::unique_ptr<decode_batch>> graphs_;  // by batch size
  std::shared_ptr<decode_pool> pool_;
  int64_t pooled_steps_ = 0;
  std::map<int64_t, std::unique_ptr<pooled_step>> pooled_graphs_;  // by batch size, on pool_
};

}  // namespace cuda_agent::model
