// Batched generation for many concurrent episodes on one transformer.
//
// One thread of its own runs the model. Requests from any thread join the running batch as soon
// as a decode step ends (continuous batching) and leave it when they finish. Each sequence id
// (an episode) keeps its KV cache between requests: a request whose prompt starts with the
// tokens that id's cache holds prefills only the rest, so turn n of a long conversation does
// not prefill turns 1..n-1 again. Caches are evicted, least recently used first, when they
// would exceed the memory budget; an evicted sequence is prefilled again in full.
//
//   model::generation_engine engine{model, {}};
//   auto result = engine.submit({"episode-1", prompt_ids, {.temperature = 0}}).get();
//   engine.release("episode-1");  // the episode ended
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "actors/model/transformer.hpp"

namespace cuda_agent::model {

struct sampling_params {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;         // 0: no limit
  int32_t max_tokens = 256;
  std::vector<int64_t> stop_token_ids;  // the first one sampled ends the completion (it is kept)
  uint64_t seed = 0;  // one generator per request: the same request gives the same tokens,
                      // whatever else shares its batch
};

struct generation_request {
  std::string sequence_id;      // the cache's key; empty: no cache kept after the request
  std::vector<int64_t> prompt;  // the whole conversation so far, in tokens
  sampling_params sampling;
};

struct generation_result {
  std::vector<int64_t> token_ids;  // the sampled tokens, the stop token included
  std::vector<float> logprobs;     // log-probability of each sampled token under the weights
                                   // that sampled it, from the temperature-1 distribution
  std::string finish_reason;       // "stop" (a stop token), "length" (max_tokens or context)
  int64_t weight_version = 0;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;       // prompt tokens read from the cache, not prefilled
};

struct engine_options {
  int64_t max_batch = 32;                        // sequences decoded together
  int64_t cache_budget_bytes = int64_t{8} << 30;  // KV cache of all sequences together
  // Tokens of one prefill step, padding included: newly admitted requests are prefilled
  // together up to it (one longer than it goes alone). 1: each alone.
  int64_t prefill_batch_tokens = 16384;
};

struct engine_stats {
  int64_t prefilled_tokens = 0;
  int64_t cached_tokens = 0;
  int64_t decoded_tokens = 0;
  int64_t decode_steps = 0;
  int64_t prefill_steps = 0;  // step() calls that prefilled
  int64_t evictions = 0;
  int64_t largest_batch = 0;
  int64_t cache_bytes = 0;
  int64_t slot_handovers = 0;  // decode pool slots an idle cache gave up to a running one
};

class generation_engine {
 public:
  generation_engine(std::shared_ptr<transformer> model, engine_options options);
  // Stops the model thread; requests not yet finished fail with model_error.
  ~generation_engine();

  // Thread-safe. The future throws model_error for a prompt longer than the model's context
  // or an empty one.
  std::future<generation_result> submit(generation_request request);
  // Thread-safe. submit() of each, all taken at the same step boundary, so that their prefills
  // can share step() calls (engine_options::prefill_batch_tokens).
  std::vector<std::future<generation_result>> submit_all(std::vector<generation_request> requests);
  // Drops a sequence's cache (its episode ended).
  void release(const std::string& sequence_id);
  // New weights, taken between decode steps without stopping running requests: later tokens
  // are sampled by them and carry `version`. Every cache is dropped, since its keys and values
  // came from the old weights.
  void update_weights(std::vector<std::pair<std::string, torch::Tensor>> weights, int64_t version);

  engine_stats stats() const;

  generation_engine(const generation_engine&) = delete;
  generation_engine& operator=(const generation_engine&) = delete;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace cuda_agent::model
