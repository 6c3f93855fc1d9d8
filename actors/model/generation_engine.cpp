// The generation engine's model thread: admission, prefix caching, batched decode, sampling.
//
// One loop iteration is one step boundary. It takes what other threads handed in (weight
// updates, releases, new requests), admits waiting requests while the batch has room and the
// cache budget allows, prefills the newly admitted requests, and then runs one step() call that
// decodes every running sequence together. Prefills of similar lengths share a step() call
// (prefill_groups): up to prefill_batch_tokens padded tokens, padding at most a quarter of the
// real ones, since a row padded to the longest one costs that one's time. Requests one at a time ran the
// 0.5B model's 32 x 1024-token prefill 6.7x slower than transformers (docs/benchmarks.md).
//
// A sequence with an id that finishes leaves its last sampled token outside the cache; it stays
// in the batch for one more decode step that writes that token into the cache (its logits are
// not used), and its result goes out after that step. So the cache holds the whole last turn,
// prompt and completion, and the next turn's prompt, which starts with it, prefills only what
// is new. A prompt that leaves the cached tokens somewhere truncates the cache there.
//
// Choices the header leaves open:
// - Two requests of one sequence id never run together: the later waits for the earlier.
// - Cache budget: a running request counts at what its cache may grow to (prompt + max_tokens,
//   capped at the context), an idle cache at what it holds (capacity included). Idle caches
//   are evicted least recently used first to admit a request; a request that would need more
//   than the whole budget fails at once; one that fits only after running requests end waits.
// - logprobs are log_softmax of the raw logits (temperature 1, no top-k or top-p): the policy's
//   own distribution, which a learner's importance ratios compare with, not the warped one the
//   token was drawn from.
// - Sampling draws one uniform number per token from the request's generator (a CPU
//   torch::Generator seeded with sampling.seed) and inverts the warped distribution's CDF on
//   the model's device, so that a request's tokens depend on its seed and logits only.
// - A weight update lands between two steps. Every cache is dropped, and each running request
//   prefills its prompt and its tokens so far again under the new weights before its next
//   token. Its result's weight_version is the version that sampled its last token; its
//   logprobs are each token's under the weights that sampled it, so a result that spans an
//   update mixes two versions (the version changes where the logprobs stop matching the old
//   weights). update_weights() returns once the weights are in, so every request submitted
//   after it samples with them alone.
#include "actors/model/generation_engine.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include <ATen/CPUGeneratorImpl.h>

namespace cuda_agent::model {
namespace {

struct cache_entry {
  kv_cache cache;
  std::vector<int64_t> tokens;  // the tokens whose keys and values the cache holds
  uint64_t last_used = 0;
  bool busy = false;           // a running request extends it: never evicted
  bool release_after = false;  // released while running: dropped when the request ends
};

struct pending_request {
  generation_request request;
  std::promise<generation_result> promise;
};

struct weight_update {
  std::vector<std::pair<std::string, torch::Tensor>> weights;
  int64_t version = 0;
  std::promise<void> done;
};

// A request in the batch.
struct running_request {
  generation_request request;
  std::promise<generation_result> promise;
  generation_result result;
  at::Generator generator;
  std::unique_ptr<cache_entry> own;  // no sequence id: a cache of its own, dropped at the end
  cache_entry* entry = nullptr;      // the map's entry or `own`
  std::vector<int64_t> to_prefill;   // tokens to write into the cache before the next sample
  int64_t reserved_bytes = 0;        // the cache it may grow to (prompt + max_tokens)
  bool finished = false;             // last token sampled; waits for the cache to take it
  bool done = false;                 // answered: leaves the batch
};

bool is_stop(const sampling_params& s, int64_t token) {
  return std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), token) !=
         s.stop_token_ids.end();
}

// A uniform double in [0, 1) from the request's own generator: 53 random bits.
double uniform(at::Generator& generator) {
  auto* cpu = at::check_generator<at::CPUGeneratorImpl>(generator);
  return static_cast<double>(cpu->random64() >> 11) * (1.0 / 9007199254740992.0);
}

// Rows to prefill, shortest first, cut into step() calls: a call takes the next row while its
// rows padded to the longest stay within `budget` tokens, padding at most a quarter of the rest.
std::vector<std::vector<running_request*>> prefill_groups(std::vector<running_request*> rows,
                                                          int64_t budget) {
  auto length = [](const running_request* r) { return static_cast<int64_t>(r->to_prefill.size()); };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const running_request* a, const running_request* b) { return length(a) < length(b); });
  std::vector<std::vector<running_request*>> groups;
  int64_t real = 0;
  for (auto* r : rows) {
    if (!groups.empty()) {
      const int64_t padded = length(r) * static_cast<int64_t>(groups.back().size() + 1);
      if (padded <= budget && 4 * padded <= 5 * (real + length(r))) {
        groups.back().push_back(r);
        real += length(r);
        continue;
      }
    }
    groups.push_back({r});
    real = length(r);
  }
  return groups;
}

}  // namespace

struct generation_engine::impl {
  std::shared_ptr<transformer> model;
  engine_options options;
  int64_t bytes_per_token = 0;  // keys and values of one token over all layers

  // Shared with other threads, under `mutex`.
  mutable std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::deque<pending_request> incoming;
  std::deque<std::string> releases;
  std::deque<weight_update> updates;
  engine_stats stats;

  // The model thread's own.
  std::deque<pending_request> waiting;
  std::vector<std::unique_ptr<running_request>> batch;
  std::unordered_map<std::string, std::unique_ptr<cache_entry>> caches;
  uint64_t tick = 0;
  struct outcome {
    std::promise<generation_result> promise;
    generation_result result;
    std::exception_ptr error;
  };
  std::vector<outcome> outcomes;  // answered in this step boundary, not yet delivered

  std::thread thread;

  impl(std::shared_ptr<transformer> m, engine_options o) : model(std::move(m)), options(o) {
    if (!model) throw model_error("generation_engine: no model given");
    if (options.prefill_batch_tokens < 1)
      throw model_error("generation_engine: prefill_batch_tokens must be at least 1 (got " +
                        std::to_string(options.prefill_batch_tokens) + ")");
    if (options.max_batch < 1)
      throw model_error("generation_engine: max_batch must be at least 1 (got " +
                        std::to_string(options.max_batch) + ")");
    const auto& c = model->config();
    bytes_per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim *
                      static_cast<int64_t>(c10::elementSize(model->dtype()));
  }

  // --- requests checked before they reach the model thread ---------------------------------

  // Empty when the request can run, else why not.
  std::string invalid(const generation_request& r) const {
    const auto& c = model->config();
    const auto& s = r.sampling;
    if (r.prompt.empty()) return "the prompt is empty (a request needs at least one token)";
    if (static_cast<int64_t>(r.prompt.size()) > c.max_position_embeddings)
      return "the prompt has " + std::to_string(r.prompt.size()) +
             " tokens, more than the model's context of " +
             std::to_string(c.max_position_embeddings) + " (max_position_embeddings); shorten it";
    for (int64_t t : r.prompt)
      if (t < 0 || t >= c.vocab_size)
        return "prompt token " + std::to_string(t) + " is outside the vocabulary [0, " +
               std::to_string(c.vocab_size) + ")";
    if (!(s.temperature >= 0)) return "temperature must be >= 0";
    if (!(s.top_p > 0 && s.top_p <= 1)) return "top_p must be in (0, 1]";
    if (s.top_k < 0) return "top_k must be >= 0 (0: no limit)";
    if (s.max_tokens < 0) return "max_tokens must be >= 0";
    return {};
  }

  // --- the cache budget --------------------------------------------------------------------

  int64_t cache_bytes() const {
    int64_t total = 0;
    for (const auto& [id, e] : caches) total += e->cache.bytes();
    for (const auto& r : batch)
      if (r->own) total += r->own->cache.bytes();
    return total;
  }

  // What the caches may need: an idle cache what it holds, a running one what it may grow to.
  int64_t committed_bytes() const {
    int64_t total = 0;
    for (const auto& [id, e] : caches)
      if (!e->busy) total += e->cache.bytes();
    for (const auto& r : batch) total += std::max(r->entry->cache.bytes(), r->reserved_bytes);
    return total;
  }

  // Evicts idle caches, least recently used first, other than `keep`, until `extra` more bytes
  // fit. False when they do not fit even with every idle cache gone.
  bool make_room(int64_t extra, const cache_entry* keep) {
    while (committed_bytes() + extra > options.cache_budget_bytes) {
      auto victim = caches.end();
      for (auto it = caches.begin(); it != caches.end(); ++it) {
        if (it->second->busy || it->second.get() == keep) continue;
        if (victim == caches.end() || it->second->last_used < victim->second->last_used)
          victim = it;
      }
      if (victim == caches.end()) return false;
      caches.erase(victim);
      std::lock_guard lock{mutex};
      ++stats.evictions;
    }
    return true;
  }

  // --- the loop ----------------------------------------------------------------------------

  void run() {
    for (;;) {
      std::deque<weight_update> new_updates;
      std::deque<std::string> new_releases;
      {
        std::unique_lock lock{mutex};
        wake.wait(lock, [&] {
          return stopping || !incoming.empty() || !releases.empty() || !updates.empty() ||
                 !batch.empty() || (!waiting.empty() && batch.empty());
        });
        if (stopping) break;
        std::swap(new_updates, updates);
        std::swap(new_releases, releases);
        while (!incoming.empty()) {
          waiting.push_back(std::move(incoming.front()));
          incoming.pop_front();
        }
      }
      for (auto& u : new_updates) apply_update(u);
      for (auto& id : new_releases) apply_release(id);
      try {
        admit();
        prefill();
        decode();
      } catch (const std::exception& e) {
        // Not a step() failure (those fail their rows): sampling or bookkeeping failed, for
        // instance out of device memory. The batch fails rather than the process.
        for (auto& r : batch) {
          if (r->done) continue;
          r->entry->cache = model->new_cache();
          r->entry->tokens.clear();
          fail(*r, std::string("generation_engine: ") + e.what());
        }
      }
      finish_answered();
      publish_cache_bytes();
      deliver();
    }
    fail_everything("generation_engine: stopped before the request finished");
  }

  void apply_update(weight_update& u) {
    try {
      model->load_weights(u.weights, u.version);
      u.done.set_value();
    } catch (const std::exception& e) {
      u.done.set_exception(std::make_exception_ptr(model_error(e.what())));
    }
    // Keys and values written by the old weights would mix two policies in one sequence: every
    // cache goes, and each running request prefills its prompt and completion so far again
    // under the new weights before its next token. (Also after a failed load, which may have
    // replaced some weights.)
    for (auto it = caches.begin(); it != caches.end();) {
      if (it->second->busy) {
        ++it;
      } else {
        it = caches.erase(it);
      }
    }
    for (auto& r : batch) {
      r->entry->cache = model->new_cache();
      r->entry->tokens.clear();
      if (r->finished) {
        answer(*r);  // the completion is whole; nothing is left worth caching
        continue;
      }
      r->to_prefill = r->request.prompt;
      r->to_prefill.insert(r->to_prefill.end(), r->result.token_ids.begin(),
                           r->result.token_ids.end());
    }
  }

  void apply_release(const std::string& id) {
    auto it = caches.find(id);
    if (it == caches.end()) return;
    if (it->second->busy) {
      it->second->release_after = true;
    } else {
      caches.erase(it);
    }
  }

  bool id_running(const std::string& id) const {
    if (id.empty()) return false;
    auto it = caches.find(id);
    return it != caches.end() && it->second->busy;
  }

  void admit() {
    const auto& c = model->config();
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (static_cast<int64_t>(batch.size()) >= options.max_batch) break;
      auto& req = it->request;
      // Two requests of one sequence share its cache: the later one waits for the earlier.
      if (id_running(req.sequence_id)) {
        ++it;
        continue;
      }
      const int64_t prompt_len = static_cast<int64_t>(req.prompt.size());
      if (req.sampling.max_tokens == 0 || prompt_len >= c.max_position_embeddings) {
        // Nothing to sample: no room for another token.
        generation_result result;
        result.finish_reason = "length";
        result.weight_version = model->weight_version();
        result.prompt_tokens = prompt_len;
        it->promise.set_value(std::move(result));
        it = waiting.erase(it);
        continue;
      }
      const int64_t reserve =
          bytes_per_token *
          std::min<int64_t>(prompt_len + req.sampling.max_tokens, c.max_position_embeddings);
      if (reserve > options.cache_budget_bytes) {
        it->promise.set_exception(std::make_exception_ptr(model_error(
            "generation_engine: the request needs " + std::to_string(reserve) +
            " bytes of KV cache (prompt " + std::to_string(prompt_len) + " + max_tokens " +
            std::to_string(req.sampling.max_tokens) + " tokens), more than cache_budget_bytes " +
            std::to_string(options.cache_budget_bytes) +
            "; raise the budget or lower max_tokens")));
        it = waiting.erase(it);
        continue;
      }
      cache_entry* entry = nullptr;
      if (!req.sequence_id.empty()) {
        auto found = caches.find(req.sequence_id);
        if (found != caches.end()) entry = found->second.get();
      }
      // Its own cache counts at what it may grow to, not at what it holds now.
      const int64_t extra = reserve - (entry ? std::min(entry->cache.bytes(), reserve) : 0);
      if (!make_room(extra, entry)) {
        if (!batch.empty()) break;  // the running requests' caches first have to shrink
        // Alone, and its own old cache is what does not fit (capacity beyond the reservation).
        if (entry) {
          entry->cache = model->new_cache();
          entry->tokens.clear();
        }
        make_room(reserve, entry);
      }

      auto r = std::make_unique<running_request>();
      r->request = std::move(it->request);
      r->promise = std::move(it->promise);
      it = waiting.erase(it);
      r->generator = at::detail::createCPUGenerator(r->request.sampling.seed);
      r->reserved_bytes = reserve;
      if (r->request.sequence_id.empty()) {
        r->own = std::make_unique<cache_entry>();
        r->own->cache = model->new_cache();
        r->entry = r->own.get();
      } else if (entry) {
        r->entry = entry;
      } else {
        auto e = std::make_unique<cache_entry>();
        e->cache = model->new_cache();
        r->entry = e.get();
        caches.emplace(r->request.sequence_id, std::move(e));
      }
      cache_entry& e = *r->entry;
      e.busy = true;
      e.release_after = false;
      if (e.cache.length() != static_cast<int64_t>(e.tokens.size())) {  // never expected
        e.cache = model->new_cache();
        e.tokens.clear();
      }
      // The common prefix is read from the cache; at least the prompt's last token is fed
      // again, since its logits pick the first new token.
      const auto& prompt = r->request.prompt;
      size_t common = 0;
      while (common < e.tokens.size() && common < prompt.size() &&
             e.tokens[common] == prompt[common])
        ++common;
      common = std::min(common, prompt.size() - 1);
      if (common < e.tokens.size()) {
        e.cache.truncate(static_cast<int64_t>(common));
        e.tokens.resize(common);
      }
      r->to_prefill.assign(prompt.begin() + static_cast<std::ptrdiff_t>(common), prompt.end());
      r->result.prompt_tokens = prompt_len;
      r->result.cached_tokens = static_cast<int64_t>(common);
      {
        std::lock_guard lock{mutex};
        stats.cached_tokens += static_cast<int64_t>(common);
      }
      batch.push_back(std::move(r));
    }
  }

  // Idle caches kept between turns give up their decode pool slots (least recently used
  // first) to the rows' caches that fit a slot and hold none, so that the step can run as one
  // graph on the pool (transformer::set_decode_pool).
  void hand_over_slots(const std::vector<running_request*>& rows, const std::vector<std::vector<int64_t>>& fed) {
    const int64_t slot_tokens = model->pool_slot_tokens();
    if (slot_tokens == 0) return;
    int64_t wanted = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const kv_cache& cache = rows[i]->entry->cache;
      if (!cache.pooled() && cache.length() + int64_t(fed[i].size()) <= slot_tokens) ++wanted;
    }
    int64_t short_by = wanted - model->free_pool_slots();
    if (short_by <= 0) return;
    std::vector<cache_entry*> idle;
    for (auto& [id, e] : caches)
      if (!e->busy && e->cache.pooled()) idle.push_back(e.get());
    std::sort(idle.begin(), idle.end(), [](const cache_entry* a, const cache_entry* b) { return a->last_used < b->last_used; });
    for (size_t i = 0; i < idle.size() && short_by > 0; ++i, --short_by) {
      model->release_slot(idle[i]->cache);
      std::lock_guard lock{mutex};
      ++stats.slot_handovers;
    }
  }

  // step() for `rows`, each fed `fed[i]`; on failure every row fails and leaves the batch.
  std::optional<torch::Tensor> step(const std::vector<running_request*>& rows,
                                    const std::vector<std::vector<int64_t>>& fed) {
    std::vector<kv_cache*> caches_of;
    caches_of.reserve(rows.size());
    for (auto* r : rows) caches_of.push_back(&r->entry->cache);
    try {
      hand_over_slots(rows, fed);
      torch::Tensor logits = model->step(fed, caches_of);
      for (size_t i = 0; i < rows.size(); ++i)
        rows[i]->entry->tokens.insert(rows[i]->entry->tokens.end(), fed[i].begin(), fed[i].end());
      return logits;
    } catch (const std::exception& e) {
      for (auto* r : rows) {
        r->entry->cache = model->new_cache();  // may hold part of the failed step
        r->entry->tokens.clear();
        fail(*r, std::string("generation_engine: the model failed: ") + e.what());
      }
      return std::nullopt;
    }
  }

  void prefill() {
    std::vector<running_request*> todo;
    for (auto& r : batch)
      if (!r->done && !r->to_prefill.empty()) todo.push_back(r.get());
    for (const auto& rows : prefill_groups(std::move(todo), options.prefill_batch_tokens)) {
      std::vector<std::vector<int64_t>> fed;
      int64_t tokens = 0;
      for (auto* r : rows) {
        tokens += static_cast<int64_t>(r->to_prefill.size());
        fed.push_back(std::move(r->to_prefill));
        r->to_prefill.clear();
      }
      auto logits = step(rows, fed);
      if (!logits) continue;
      {
        std::lock_guard lock{mutex};
        stats.prefilled_tokens += tokens;
        ++stats.prefill_steps;
      }
      sample(rows, *logits);
    }
  }

  void decode() {
    std::vector<running_request*> rows;
    std::vector<std::vector<int64_t>> fed;
    std::vector<running_request*> sampling_rows;
    for (auto& r : batch) {
      if (r->done || !r->to_prefill.empty() || r->result.token_ids.empty()) continue;
      rows.push_back(r.get());
      fed.push_back({r->result.token_ids.back()});
    }
    if (rows.empty()) return;
    auto logits = step(rows, fed);
    if (!logits) return;
    std::vector<int64_t> sampled_index;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i]->finished) {
        answer(*rows[i]);  // its last token is cached now
      } else {
        sampling_rows.push_back(rows[i]);
        sampled_index.push_back(static_cast<int64_t>(i));
      }
    }
    {
      std::lock_guard lock{mutex};
      ++stats.decode_steps;
      stats.largest_batch =
          std::max(stats.largest_batch, static_cast<int64_t>(sampling_rows.size()));
    }
    if (sampling_rows.empty()) return;
    torch::Tensor rows_logits = *logits;
    if (sampling_rows.size() != rows.size())
      rows_logits = rows_logits.index_select(
          0, torch::tensor(sampled_index, torch::kLong).to(rows_logits.device()));
    sample(sampling_rows, rows_logits);
  }

  // Picks each row's next token from its logits [rows, vocab] (float32, the model's device)
  // and ends the rows that are done. One host copy for all rows: the ids and their logprobs.
  void sample(const std::vector<running_request*>& rows, const torch::Tensor& logits) {
    const auto n = static_cast<int64_t>(rows.size());
    const int64_t vocab = logits.size(1);
    const auto device = logits.device();
    torch::Tensor chosen = logits.argmax(-1);  // greedy rows
    std::vector<uint8_t> random_rows(rows.size());
    bool any_random = false;
    for (int64_t i = 0; i < n; ++i) {
      random_rows[i] = rows[i]->request.sampling.temperature > 0;
      any_random |= random_rows[i] != 0;
    }
    if (any_random) {
      std::vector<float> temperature(rows.size()), top_p(rows.size());
      std::vector<int64_t> top_k(rows.size());
      std::vector<double> u(rows.size());
      for (int64_t i = 0; i < n; ++i) {
        const auto& s = rows[i]->request.sampling;
        const bool random = random_rows[i] != 0;
        temperature[i] = random ? static_cast<float>(s.temperature) : 1.0f;
        top_p[i] = random ? static_cast<float>(s.top_p) : 1.0f;
        top_k[i] = random && s.top_k > 0 ? std::min(s.top_k, vocab) : vocab;
        // A greedy row draws nothing, so that its generator's stream stays its own.
        u[i] = random ? uniform(rows[i]->generator) : 0.0;
      }
      auto to_device = [&](torch::Tensor t) { return t.to(device, /*non_blocking=*/true); };
      auto temp_t = to_device(torch::tensor(temperature, torch::kFloat32)).unsqueeze(1);
      auto top_p_t = to_device(torch::tensor(top_p, torch::kFloat32)).unsqueeze(1);
      auto top_k_t = to_device(torch::tensor(top_k, torch::kLong)).unsqueeze(1);
      auto u_t = to_device(torch::tensor(u, torch::kFloat64)).unsqueeze(1);
      auto random_t = to_device(torch::tensor(std::vector<int64_t>(random_rows.begin(),
                                                                   random_rows.end()),
                                              torch::kLong)).to(torch::kBool);

      // Temperature, then top-k, then top-p on what top-k left, as transformers' warpers do.
      auto [sorted, order] = (logits / temp_t).sort(/*stable=*/true, /*dim=*/-1,
                                                    /*descending=*/true);
      // top-k keeps every token at least as likely as the k-th (ties included).
      auto kth = sorted.gather(1, top_k_t - 1);
      sorted = sorted.masked_fill(sorted < kth, -std::numeric_limits<float>::infinity());
      auto probs = sorted.softmax(-1);
      // top-p keeps the smallest most-likely set whose mass reaches top_p: a token goes when
      // the tokens ranked above it already reach it. The most likely one always stays.
      auto above = probs.cumsum(-1) - probs;
      auto drop = above >= top_p_t;
      drop.select(1, 0).fill_(false);
      probs = probs.masked_fill(drop, 0.0f);
      // Inverse CDF with the row's one uniform draw.
      auto cdf = probs.to(torch::kFloat64).cumsum(-1);
      auto target = u_t * cdf.select(1, vocab - 1).unsqueeze(1);
      auto pick = (cdf <= target).sum(-1, /*keepdim=*/true);
      auto last_kept = (probs > 0).sum(-1, /*keepdim=*/true) - 1;
      pick = torch::minimum(pick, last_kept).clamp_min(0);  // NaN logits: no kept token
      auto sampled = order.gather(1, pick).squeeze(1);
      chosen = torch::where(random_t, sampled, chosen);
    }
    // The policy's own distribution (temperature 1, no top-k/top-p): what a learner's
    // importance ratios compare against, whatever the sampling settings were.
    auto logprob = torch::log_softmax(logits, -1).gather(1, chosen.unsqueeze(1)).squeeze(1);
    auto host = torch::stack({chosen.to(torch::kFloat64), logprob.to(torch::kFloat64)}, 1)
                    .to(torch::kCPU)
                    .contiguous();
    const double* values = host.data_ptr<double>();
    const auto& c = model->config();
    int64_t sampled_total = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto& r = *rows[i];
      const auto token = static_cast<int64_t>(values[2 * i]);
      r.result.token_ids.push_back(token);
      r.result.logprobs.push_back(static_cast<float>(values[2 * i + 1]));
      r.result.weight_version = model->weight_version();
      ++sampled_total;
      const auto generated = static_cast<int64_t>(r.result.token_ids.size());
      if (is_stop(r.request.sampling, token)) {
        r.result.finish_reason = "stop";
      } else if (generated >= r.request.sampling.max_tokens ||
                 static_cast<int64_t>(r.request.prompt.size()) + generated >=
                     c.max_position_embeddings) {
        r.result.finish_reason = "length";
      } else {
        continue;
      }
      // Done. A cache that is kept takes the last token in the next decode step first.
      if (r.own || r.entry->release_after) {
        answer(r);
      } else {
        r.finished = true;
      }
    }
    std::lock_guard lock{mutex};
    stats.decoded_tokens += sampled_total;
  }

  // Results go out at the end of the step boundary, after the caches and the stats have taken
  // the request's end: a caller that reads stats() after its result sees its request counted.
  void answer(running_request& r) {
    r.done = true;
    outcomes.push_back({std::move(r.promise), std::move(r.result), nullptr});
  }

  void fail(running_request& r, const std::string& message) {
    r.done = true;
    outcomes.push_back(
        {std::move(r.promise), {}, std::make_exception_ptr(model_error(message))});
  }

  void deliver() {
    for (auto& o : outcomes) {
      if (o.error) {
        o.promise.set_exception(o.error);
      } else {
        o.promise.set_value(std::move(o.result));
      }
    }
    outcomes.clear();
  }

  // Answered requests leave the batch; their caches become idle (or go).
  void finish_answered() {
    bool freed = false;
    for (auto& r : batch) {
      if (!r->done) continue;
      freed = true;
      if (r->own) continue;
      cache_entry* e = r->entry;
      e->busy = false;
      e->last_used = ++tick;
      if (e->release_after) {
        e->release_after = false;
        caches.erase(r->request.sequence_id);
      }
    }
    batch.erase(std::remove_if(batch.begin(), batch.end(), [](const auto& r) { return r->done; }),
                batch.end());
    if (freed) make_room(0, nullptr);
  }

  void publish_cache_bytes() {
    const int64_t bytes = cache_bytes();
    std::lock_guard lock{mutex};
    stats.cache_bytes = bytes;
  }

  void fail_everything(const std::string& message) {
    for (auto& r : batch) {
      if (r->done) continue;
      if (r->finished) {
        answer(*r);  // whole already; only its cache would have taken the last token
      } else {
        fail(*r, message);
      }
    }
    batch.clear();
    deliver();
    auto fail_pending = [&](std::deque<pending_request>& queue) {
      for (auto& p : queue) p.promise.set_exception(std::make_exception_ptr(model_error(message)));
      queue.clear();
    };
    fail_pending(waiting);
    std::lock_guard lock{mutex};
    fail_pending(incoming);
    for (auto& u : updates) u.done.set_exception(std::make_exception_ptr(model_error(message)));
    updates.clear();
  }
};

generation_engine::generation_engine(std::shared_ptr<transformer> model, engine_options options)
    : impl_(std::make_unique<impl>(std::move(model), options)) {
  impl_->thread = std::thread([this] { impl_->run(); });
}

generation_engine::~generation_engine() {
  {
    std::lock_guard lock{impl_->mutex};
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->thread.join();
}

std::future<generation_result> generation_engine::submit(generation_request request) {
  std::vector<generation_request> one;
  one.push_back(std::move(request));
  return std::move(submit_all(std::move(one)).front());
}

std::vector<std::future<generation_result>> generation_engine::submit_all(
    std::vector<generation_request> requests) {
  std::vector<std::future<generation_result>> futures;
  std::vector<pending_request> valid;
  for (auto& request : requests) {
    std::promise<generation_result> promise;
    futures.push_back(promise.get_future());
    if (auto why = impl_->invalid(request); !why.empty()) {
      promise.set_exception(std::make_exception_ptr(model_error("generation_engine: " + why)));
      continue;
    }
    valid.push_back({std::move(request), std::move(promise)});
  }
  {
    std::lock_guard lock{impl_->mutex};
    for (auto& p : valid) {
      if (impl_->stopping) {
        p.promise.set_exception(
            std::make_exception_ptr(model_error("generation_engine: the engine is stopping")));
      } else {
        impl_->incoming.push_back(std::move(p));
      }
    }
  }
  impl_->wake.notify_one();
  return futures;
}

void generation_engine::release(const std::string& sequence_id) {
  {
    std::lock_guard lock{impl_->mutex};
    impl_->releases.push_back(sequence_id);
  }
  impl_->wake.notify_one();
}

void generation_engine::update_weights(std::vector<std::pair<std::string, torch::Tensor>> weights,
                                       int64_t version) {
  std::future<void> applied;
  {
    std::lock_guard lock{impl_->mutex};
    if (impl_->stopping) throw model_error("generation_engine: the engine is stopping");
    weight_update u;
    u.weights = std::move(weights);
    u.version = version;
    applied = u.done.get_future();
    impl_->updates.push_back(std::move(u));
  }
  impl_->wake.notify_one();
  applied.get();  // taken at the next step boundary; a bad name or shape throws here
}

engine_stats generation_engine::stats() const {
  std::lock_guard lock{impl_->mutex};
  return impl_->stats;
}

}  // namespace cuda_agent::model
