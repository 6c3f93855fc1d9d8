// `cuda-agent bench generate`: prefill and decode speed of the policy's LibTorch generation
// engine, beside transformers' `generate` on the same checkpoint, per batch size and context.
//
// Each cell (batch B x context T) runs --repeats times. One repeat submits B random prompts of T
// tokens at once twice: with max_tokens 1 (the prefill: B prompts prefilled, one token sampled
// from each) and with max_tokens N (prefill plus N-1 decode steps). Prefill tok/s = B*T / t1;
// decode tok/s = B*(N-1) / (tN - t1). tools/bench/hf_generate.py times transformers the same way
// (one forward of the prompt; generate with min_new_tokens = max_new_tokens = N minus that
// forward) and this command turns both sides' times into the same numbers. Batch-1 decode is
// also given as a fraction of the memory-bandwidth roofline: every decoded token reads all the
// weights and the KV cache at that context.
//
// A last row times a conversation's second turn: a prompt of the largest context with a
// sequence id, then that prompt, its completion and 100 new tokens, which the engine's prefix
// cache should prefill alone.
//
// --shape writes a random checkpoint of a named shape (config.json by model_config::to_json,
// weights by write_safetensors_checkpoint) into a temporary directory, removed at the end.
#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "actors/model/generation_engine.hpp"
#include "actors/model/safetensors.hpp"
#include "actors/process/subprocess.hpp"
#include "tools/cli/commands.hpp"
#include "tools/cli/random_checkpoint.hpp"

namespace cuda_agent::cli {
namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

std::string format(const char* pattern, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* pattern, ...) {
  va_list args;
  va_start(args, pattern);
  char buffer[1024];
  std::vsnprintf(buffer, sizeof buffer, pattern, args);
  va_end(args);
  return buffer;
}

std::string join(const std::vector<int64_t>& xs) {
  std::string out;
  for (const int64_t x : xs) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

struct bench_generate_options {
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string model;     // checkpoint directory
  std::string shape;     // or a random model of this shape; default by device
  std::string batches;   // comma lists; defaults by device
  std::string contexts;
  int decode_tokens = 0;  // 0: by device
  int repeats = 3;
  int threads = 0;        // 0: LibTorch's default
  double bandwidth_gbs = 0;  // 0: 4800 on cuda (H200), none on cpu
  bool no_hf = false;
  bool batched_decode = false;
  bool cuda_graphs = false;
  bool decode_pool = false;
  int64_t prefill_batch_tokens = model::engine_options{}.prefill_batch_tokens;
  bool json = false;
};

struct spread {
  double median = 0, min = 0, max = 0;
};

// None without samples: a rate that no repeat could measure is missing, never 0.
std::optional<spread> spread_of(std::vector<double> xs) {
  if (xs.empty()) return std::nullopt;
  spread s;
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  s.median = n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
  s.min = xs.front();
  s.max = xs.back();
  return s;
}

nlohmann::json to_json(const std::optional<spread>& s) {
  if (!s) return nullptr;
  return {{"median", s->median}, {"min", s->min}, {"max", s->max}};
}

// a's median over b's, or none where either is missing.
std::optional<double> ratio_of(const std::optional<spread>& a, const std::optional<spread>& b) {
  if (!a || !b || !(b->median > 0)) return std::nullopt;
  return a->median / b->median;
}

nlohmann::json to_json(const std::optional<double>& x) { return x ? nlohmann::json(*x) : nlohmann::json(nullptr); }

// One side's times of one cell, seconds per repeat.
struct cell_times {
  std::vector<double> prefill_s, generate_s;
};

struct cell_rates {
  std::optional<spread> prefill, decode;  // tokens per second
};

cell_rates rates_of(const cell_times& t, int64_t batch, int64_t context, int64_t decode_tokens) {
  std::vector<double> prefill, decode;
  for (size_t r = 0; r < t.prefill_s.size() && r < t.generate_s.size(); ++r) {
    prefill.push_back(double(batch * context) / t.prefill_s[r]);
    const double decode_s = t.generate_s[r] - t.prefill_s[r];
    // A decode shorter than its timing noise gives no rate rather than a negative one.
    if (decode_s > 0) decode.push_back(double(batch * (decode_tokens - 1)) / decode_s);
  }
  return {spread_of(prefill), spread_of(decode)};
}

std::vector<int64_t> random_prompt(std::mt19937_64& rng, int64_t vocab, int64_t length) {
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(length));
  for (auto& id : ids) id = token(rng);
  return ids;
}

// Submits every prompt at once and waits for all: seconds from the first submit to the last result.
double time_engine(model::generation_engine& engine, const std::vector<std::vector<int64_t>>& prompts,
                   int32_t max_tokens, std::vector<model::generation_result>* results = nullptr,
                   const std::string& sequence_id = {}) {
  std::vector<model::generation_request> requests;
  for (const auto& prompt : prompts) {
    model::generation_request request;
    request.sequence_id = sequence_id;
    request.prompt = prompt;
    request.sampling.temperature = 0;
    request.sampling.max_tokens = max_tokens;
    requests.push_back(std::move(request));
  }
  const auto start = clock_type::now();
  auto futures = engine.submit_all(std::move(requests));
  for (auto& f : futures) {
    auto result = f.get();
    if (results) results->push_back(std::move(result));
  }
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

std::string python_of(const settings& config) {
  const char* env = std::getenv("CUDA_AGENT_PYTHON");
  return env && *env ? std::string{env} : config.get_string("harness.python");
}

// Runs tools/bench/hf_generate.py; returns its JSON.
nlohmann::json run_transformers(const settings& config, const fs::path& model_dir, const bench_generate_options& opt,
                                const std::string& dtype, const std::vector<int64_t>& batches,
                                const std::vector<int64_t>& contexts, int threads) {
  const fs::path script = fs::path{CUDA_AGENT_SOURCE_DIR} / "tools" / "bench" / "hf_generate.py";
  const std::vector<std::string> argv{python_of(config), script.string(), "--model", fs::absolute(model_dir).string(),
                                      "--device", opt.device, "--dtype", dtype, "--batches", join(batches),
                                      "--contexts", join(contexts), "--decode-tokens",
                                      std::to_string(opt.decode_tokens), "--repeats", std::to_string(opt.repeats),
                                      "--threads", std::to_string(threads)};
  subprocess_options options;
  options.timeout = std::chrono::hours{6};
  options.max_output_bytes = std::size_t{16} << 20;
  options.extra_env["OMP_NUM_THREADS"] = std::to_string(threads);
  subprocess_result result;
  try {
    result = run_subprocess(argv, options);
  } catch (const std::system_error& e) {
    throw usage_error{"the harness python '" + argv[0] + "' cannot be started (" + e.what() +
                      "); set harness.python or CUDA_AGENT_PYTHON to a Python with transformers, or pass --no-hf"};
  }
  if (!result.ok()) {
    std::string err = result.err;
    while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
    const size_t nl = err.rfind('\n');
    throw std::runtime_error{"transformers side (" + script.string() + ") failed, " + result.describe() + ": " +
                             (nl == std::string::npos ? err : err.substr(nl + 1)) + " (pass --no-hf to skip it)"};
  }
  try {
    return nlohmann::json::parse(result.out);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error{"transformers side printed no JSON: " + std::string{e.what()}};
  }
}

std::string fmt_spread(const std::optional<spread>& s) {
  if (!s) return "-";
  return format("%.0f [%.0f-%.0f]", s->median, s->min, s->max);
}

int run_bench_generate(bench_generate_options opt, const settings& config) {
  const bool cuda = opt.device == "cuda";
  if (cuda && !torch::cuda::is_available())
    throw usage_error{"--device cuda: LibTorch sees no CUDA device here (use --device cpu)"};
  if (!opt.model.empty() && !opt.shape.empty()) throw usage_error{"give --model or --shape, not both"};
  if (opt.model.empty() && opt.shape.empty()) opt.shape = cuda ? "qwen2-0.5b" : "tiny";
  if (opt.batches.empty()) opt.batches = cuda ? "1,8,32" : "1,8";
  if (opt.contexts.empty()) opt.contexts = cuda ? "1024,8192,32768" : "256,1024";
  if (opt.decode_tokens == 0) opt.decode_tokens = cuda ? 128 : 32;
  if (opt.decode_tokens < 2)
    throw usage_error{"--decode-tokens must be at least 2 (the first token comes from the prefill)"};
  if (opt.repeats < 1) throw usage_error{"--repeats must be at least 1"};
  if (opt.threads < 0) throw usage_error{"--threads must be 0 (LibTorch's default) or more"};
  if (opt.bandwidth_gbs < 0) throw usage_error{"--bandwidth-gbs must be positive"};
  const std::vector<int64_t> batches = parse_positive_list("--batches", opt.batches);
  const std::vector<int64_t> contexts = parse_positive_list("--contexts", opt.contexts);
  std::string dtype_name = opt.dtype == "auto" ? (cuda ? "bf16" : "fp32") : opt.dtype;
  const torch::ScalarType dtype = dtype_name == "bf16"   ? torch::kBFloat16
                                  : dtype_name == "fp16" ? torch::kFloat16
                                                         : torch::kFloat32;
  if ((opt.batched_decode || opt.cuda_graphs) && (!cuda || dtype == torch::kFloat32))
    throw usage_error{std::string{opt.cuda_graphs ? "--cuda-graphs" : "--batched-decode"} +
                      " runs only on --device cuda in bf16 or fp16; drop it or change those"};
  const torch::Device device = cuda ? torch::Device{torch::kCUDA} : torch::Device{torch::kCPU};
  const double bandwidth = opt.bandwidth_gbs > 0 ? opt.bandwidth_gbs : (cuda ? 4800.0 : 0.0);

  if (opt.threads > 0) torch::set_num_threads(opt.threads);
  const int threads = torch::get_num_threads();

  // The checkpoint.
  temp_dir temp;
  fs::path model_dir;
  std::string model_source;
  model::model_config config_of_model;
  if (!opt.model.empty()) {
    model_dir = opt.model;
    if (!fs::is_regular_file(model_dir / "config.json"))
      throw usage_error{"--model: no config.json in '" + opt.model + "' (give a Hugging Face checkpoint directory)"};
    try {
      config_of_model = model::model_config::read(model_dir);
    } catch (const model::model_error& e) {
      throw usage_error{e.what()};
    }
    try {
      model::safetensors_checkpoint weights{model_dir};  // headers only: a bad checkpoint fails before any run
    } catch (const model::model_error& e) {
      throw usage_error{e.what()};
    }
    model_source = "checkpoint " + fs::absolute(model_dir).string();
  } else {
    config_of_model = named_shape(opt.shape);
    config_of_model.torch_dtype = dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kFloat16 ? "float16" : "float32";
    temp.path = fs::temp_directory_path() / ("cuda-agent-bench-generate-" + std::to_string(::getpid()));
    model_dir = temp.path;
    model_source = "random weights of shape " + opt.shape +
                   " (N(0, 0.02) drawn on the " + (cuda ? std::string{"GPU"} : std::string{"host"}) +
                   ", written in C++ with write_safetensors_checkpoint to a temp dir)";
  }
  const int64_t largest_context = *std::max_element(contexts.begin(), contexts.end());
  const int64_t max_pos = config_of_model.max_position_embeddings;
  if (largest_context + opt.decode_tokens > max_pos)
    throw usage_error{format("--contexts: %lld plus %d decode tokens exceeds the model's max_position_embeddings "
                             "%lld (give smaller contexts)",
                             (long long)largest_context, opt.decode_tokens, (long long)max_pos)};
  const int64_t second_turn_length = largest_context + opt.decode_tokens + 100;
  const bool second_turn_fits = second_turn_length <= max_pos;
  if (!temp.path.empty()) write_random_checkpoint(temp.path, config_of_model, dtype, device);

  // transformers first: the engine's caching allocator would otherwise still hold its memory.
  nlohmann::json hf;
  if (!opt.no_hf) hf = run_transformers(config, model_dir, opt, dtype_name, batches, contexts, threads);

  std::shared_ptr<model::transformer> net;
  try {
    net = model::transformer::load(model_dir, device, dtype);
  } catch (const model::model_error& e) {
    throw usage_error{e.what()};
  }
  net->set_batched_decode(opt.batched_decode);
  try {
    net->set_cuda_graphs(opt.cuda_graphs);
  } catch (const model::model_error& e) {
    throw usage_error{e.what()};
  }
  model::engine_options engine_opts;
  engine_opts.max_batch = *std::max_element(batches.begin(), batches.end());
  // A slot per sequence of the largest batch, as long as the second turn's conversation.
  const int64_t pool_tokens = second_turn_length + opt.decode_tokens;
  if (opt.decode_pool) {
    try {
      net->set_decode_pool(engine_opts.max_batch, pool_tokens);
    } catch (const model::model_error& e) {
      throw usage_error{e.what()};
    }
  }
  const auto& c = net->config();
  int64_t parameters = 0;
  for (const auto& [name, tensor] : net->named_parameters()) parameters += tensor.numel();
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t weight_bytes = parameters * elem;
  auto kv_bytes = [&](int64_t context) { return 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * context * elem; };

  engine_opts.cache_budget_bytes = int64_t{1} << 60;  // the device's memory is the limit here, not the budget
  engine_opts.prefill_batch_tokens = opt.prefill_batch_tokens;
  model::generation_engine engine{net, engine_opts};
  std::mt19937_64 rng{42};
  time_engine(engine, {random_prompt(rng, c.vocab_size, 16)}, 4);  // warm-up

  struct cell {
    int64_t batch, context;
    cell_rates engine;
    std::optional<cell_rates> hf;
  };
  std::vector<cell> cells;
  for (const int64_t context : contexts) {
    for (const int64_t batch : batches) {
      cell_times t;
      auto prompts_of_cell = [&] {
        std::vector<std::vector<int64_t>> prompts;
        for (int64_t b = 0; b < batch; ++b) prompts.push_back(random_prompt(rng, c.vocab_size, context));
        return prompts;
      };
      // Untimed first: the prefill's kernels at this shape and the decode step's graphs at this
      // batch come up here. A cold prefill timed as a repeat's would be subtracted from its
      // generate time, and the decode rate would come out too high.
      time_engine(engine, prompts_of_cell(), 3);
      for (int r = 0; r < opt.repeats; ++r) {
        const std::vector<std::vector<int64_t>> prompts = prompts_of_cell();
        t.prefill_s.push_back(time_engine(engine, prompts, 1));
        t.generate_s.push_back(time_engine(engine, prompts, opt.decode_tokens));
      }
      cell out{batch, context, rates_of(t, batch, context, opt.decode_tokens), std::nullopt};
      if (!hf.is_null()) {
        for (const auto& hc : hf.at("cells")) {
          if (hc.at("batch") != batch || hc.at("context") != context) continue;
          cell_times ht{hc.at("prefill_s").get<std::vector<double>>(), hc.at("generate_s").get<std::vector<double>>()};
          out.hf = rates_of(ht, batch, context, opt.decode_tokens);
        }
        if (!out.hf) throw std::runtime_error{format("transformers side gave no cell %lldx%lld", (long long)batch, (long long)context)};
      }
      cells.push_back(out);
    }
  }

  // The second turn of a conversation at the largest context.
  nlohmann::json second = nullptr;
  if (second_turn_fits) {
    std::vector<int64_t> prompt = random_prompt(rng, c.vocab_size, largest_context);
    std::vector<model::generation_result> first, next;
    // What each turn's steps were: with the decode pool, whether they ran as its graph.
    struct turn_steps {
      int64_t pooled = 0, decode = 0, prefill = 0, evictions = 0, handovers = 0;
    };
    auto steps_now = [&] {
      const model::engine_stats s = engine.stats();
      return turn_steps{net->pooled_steps(), s.decode_steps, s.prefill_steps, s.evictions, s.slot_handovers};
    };
    auto steps_json = [](const turn_steps& a, const turn_steps& b) {
      return nlohmann::json{{"decode_steps", b.decode - a.decode}, {"pooled_decode_steps", b.pooled - a.pooled},
                            {"prefill_steps", b.prefill - a.prefill}, {"evictions", b.evictions - a.evictions},
                            {"slot_handovers", b.handovers - a.handovers}};
    };
    const turn_steps before_first = steps_now();
    const double first_s = time_engine(engine, {prompt}, opt.decode_tokens, &first, "bench-conversation");
    const turn_steps before_second = steps_now();
    std::vector<int64_t> prompt2 = prompt;
    prompt2.insert(prompt2.end(), first[0].token_ids.begin(), first[0].token_ids.end());
    const auto added = random_prompt(rng, c.vocab_size, 100);
    prompt2.insert(prompt2.end(), added.begin(), added.end());
    const double second_s = time_engine(engine, {prompt2}, opt.decode_tokens, &next, "bench-conversation");
    const turn_steps after_second = steps_now();
    engine.release("bench-conversation");
    second = {{"first_prompt_tokens", first[0].prompt_tokens}, {"first_cached_tokens", first[0].cached_tokens},
              {"first_turn_s", first_s}, {"second_prompt_tokens", next[0].prompt_tokens},
              {"second_cached_tokens", next[0].cached_tokens}, {"second_turn_s", second_s},
              {"decode_tokens_per_turn", opt.decode_tokens},
              {"first_turn_steps", steps_json(before_first, before_second)},
              {"second_turn_steps", steps_json(before_second, after_second)}};
  }

  auto roofline = [&](const cell& x) -> nlohmann::json {
    if (x.batch != 1) return nullptr;
    const int64_t bytes = weight_bytes + kv_bytes(x.context);
    nlohmann::json j{{"bytes_per_token", bytes}};
    if (bandwidth > 0) {
      const double roof_tok_s = bandwidth * 1e9 / double(bytes);
      j["roofline_tok_s"] = roof_tok_s;
      j["fraction"] = x.engine.decode ? nlohmann::json(x.engine.decode->median / roof_tok_s) : nlohmann::json(nullptr);
    } else {
      j["roofline_tok_s"] = nullptr;
      j["fraction"] = nullptr;
    }
    return j;
  };
  const std::string threads_note =
      format("%d (torch::set_num_threads here; torch.set_num_threads and OMP_NUM_THREADS=%d in the transformers child)",
             threads, threads);

  if (opt.json) {
    nlohmann::json out;
    out["model"] = {{"source", model_source}, {"shape", opt.shape.empty() ? nullptr : nlohmann::json(opt.shape)},
                    {"architecture", c.architecture}, {"parameters", parameters}, {"weight_bytes", weight_bytes},
                    {"layers", c.num_hidden_layers}, {"hidden", c.hidden_size}, {"kv_heads", c.num_key_value_heads},
                    {"head_dim", c.head_dim}, {"max_position_embeddings", c.max_position_embeddings}};
    out["device"] = opt.device;
    out["dtype"] = dtype_name;
    out["threads"] = threads;
    out["decode_tokens"] = opt.decode_tokens;
    out["decode_attention"] = opt.batched_decode || opt.cuda_graphs ? "batched" : "per_sequence";
    out["cuda_graphs"] = opt.cuda_graphs;
    out["decode_pool"] = opt.decode_pool ? nlohmann::json{{"slots", engine_opts.max_batch}, {"tokens", pool_tokens}}
                                         : nlohmann::json();
    out["pooled_decode_steps"] = net->pooled_steps();  // decode steps that ran as one graph on the pool
    out["prefill_batch_tokens"] = opt.prefill_batch_tokens;
    out["repeats"] = opt.repeats;
    out["bandwidth_gbs"] = bandwidth > 0 ? nlohmann::json(bandwidth) : nlohmann::json();
    if (hf.is_null()) {
      out["transformers"] = {{"ran", false}, {"reason", "--no-hf"}};
    } else {
      out["transformers"] = {{"ran", true}, {"version", hf.value("transformers", "")},
                             {"attn_implementation", hf.value("attn_implementation", "")}};
    }
    out["cells"] = nlohmann::json::array();
    for (const auto& x : cells) {
      nlohmann::json j{{"batch", x.batch}, {"context", x.context},
                       {"engine", {{"prefill_tok_s", to_json(x.engine.prefill)}, {"decode_tok_s", to_json(x.engine.decode)}}}};
      if (x.hf) {
        j["transformers"] = {{"prefill_tok_s", to_json(x.hf->prefill)}, {"decode_tok_s", to_json(x.hf->decode)}};
        j["ratio"] = {{"prefill", to_json(ratio_of(x.engine.prefill, x.hf->prefill))},
                      {"decode", to_json(ratio_of(x.engine.decode, x.hf->decode))}};
      } else {
        j["transformers"] = nullptr;
        j["ratio"] = nullptr;
      }
      j["roofline"] = roofline(x);
      out["cells"].push_back(j);
    }
    out["second_turn"] = second;
    std::cout << out.dump(2) << "\n";
    return 0;
  }

  std::cout << "model: " << model_source << "\n";
  std::cout << format("  %s, %lld layers, hidden %lld, %lld kv heads x %lld, %.1f M parameters (%.1f MB in %s)\n",
                      c.architecture.c_str(), (long long)c.num_hidden_layers, (long long)c.hidden_size,
                      (long long)c.num_key_value_heads, (long long)c.head_dim, double(parameters) / 1e6,
                      double(weight_bytes) / 1e6, dtype_name.c_str());
  std::cout << "device " << opt.device << ", threads " << threads_note << ", decode " << opt.decode_tokens
            << " tokens, " << opt.repeats << " repeats per cell (median [min-max]), prefill steps of up to "
            << opt.prefill_batch_tokens << " tokens\n";
  std::cout << "decode step: "
            << (opt.cuda_graphs && opt.decode_pool ? "one CUDA graph on the decode pool's slots"
                : opt.cuda_graphs    ? "batched attention, the rest replayed from CUDA graphs"
                : opt.batched_decode ? "batched attention"
                                     : "attention one sequence at a time")
            << (opt.decode_pool ? " (" + std::to_string(net->pooled_steps()) + " steps as one graph on the pool)" : "")
            << "\n";
  if (hf.is_null())
    std::cout << "transformers: skipped (--no-hf)\n";
  else
    std::cout << "transformers " << hf.value("transformers", "?") << " (" << hf.value("attn_implementation", "?")
              << " attention), same checkpoint, dtype and device\n";
  const char* row = "%5s %7s %22s %20s %22s %20s %7s %7s %9s\n";
  std::cout << format(row, "batch", "context", "prefill tok/s", "decode tok/s", "hf prefill tok/s", "hf decode tok/s",
                      "pre x", "dec x", "roofline");
  for (const auto& x : cells) {
    std::string pre_x = "-", dec_x = "-", roof = "";
    if (x.hf) {
      const auto pre = ratio_of(x.engine.prefill, x.hf->prefill), dec = ratio_of(x.engine.decode, x.hf->decode);
      if (pre) pre_x = format("%.2f", *pre);
      if (dec) dec_x = format("%.2f", *dec);
    }
    const auto r = roofline(x);
    if (!r.is_null()) roof = r["fraction"].is_null() ? "n/a" : format("%.1f%%", 100 * r["fraction"].get<double>());
    std::cout << format(row, std::to_string(x.batch).c_str(), std::to_string(x.context).c_str(),
                        fmt_spread(x.engine.prefill).c_str(), fmt_spread(x.engine.decode).c_str(),
                        (x.hf ? fmt_spread(x.hf->prefill) : std::string{"-"}).c_str(),
                        (x.hf ? fmt_spread(x.hf->decode) : std::string{"-"}).c_str(), pre_x.c_str(), dec_x.c_str(),
                        roof.c_str());
  }
  std::cout << "roofline: batch-1 decode tok/s over bandwidth / (weights + KV cache at the context); bandwidth "
            << (bandwidth > 0 ? format("%.0f GB/s%s", bandwidth, opt.bandwidth_gbs > 0 ? "" : " (H200 default)")
                              : std::string{"n/a (give --bandwidth-gbs)"})
            << "\n";
  if (second.is_null()) {
    std::cout << format("second turn: skipped (%lld tokens exceed max_position_embeddings %lld)\n",
                        (long long)second_turn_length, (long long)max_pos);
  } else {
    const auto n = [&](const char* key) { return (long long)second[key].get<int64_t>(); };
    std::cout << format("second turn at %lld tokens: turn 1 %.3f s (%lld prompt tokens, %lld cached); turn 2 %.3f s "
                        "(%lld prompt tokens, %lld cached, %lld prefilled); %d tokens decoded per turn\n",
                        (long long)largest_context, second["first_turn_s"].get<double>(), n("first_prompt_tokens"),
                        n("first_cached_tokens"), second["second_turn_s"].get<double>(), n("second_prompt_tokens"),
                        n("second_cached_tokens"), n("second_prompt_tokens") - n("second_cached_tokens"),
                        opt.decode_tokens);
    for (const char* turn : {"first_turn_steps", "second_turn_steps"}) {
      const auto& t = second[turn];
      std::cout << format("  %s: %lld decode steps (%lld as the pool's graph), %lld prefill steps, %lld evictions, "
                          "%lld slot handovers\n",
                          turn, (long long)t["decode_steps"].get<int64_t>(), (long long)t["pooled_decode_steps"].get<int64_t>(),
                          (long long)t["prefill_steps"].get<int64_t>(), (long long)t["evictions"].get<int64_t>(),
                          (long long)t["slot_handovers"].get<int64_t>());
    }
  }
  return 0;
}

}  // namespace

void add_bench_generate_command(CLI::App& bench, invocation& inv) {
  auto opt = std::make_shared<bench_generate_options>();
  CLI::App* cmd = bench.add_subcommand(
      "generate", "Prefill and decode tok/s of the LibTorch generation engine beside transformers' generate");
  cmd->add_option("--device", opt->device, "Where the model runs")->check(CLI::IsMember({"cpu", "cuda"}));
  cmd->add_option("--dtype", opt->dtype, "Weights and activations (auto: bf16 on cuda, fp32 on cpu)")
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "fp16"}));
  cmd->add_option("--model", opt->model, "Hugging Face checkpoint directory");
  cmd->add_option("--shape", opt->shape,
                  "A random model of this shape instead of --model: qwen2-0.5b, qwen2.5-7b, tiny "
                  "(default: qwen2-0.5b on cuda, tiny on cpu)");
  cmd->add_option("--batches", opt->batches, "Batch sizes, a comma list (default: 1,8,32 on cuda, 1,8 on cpu)");
  cmd->add_option("--contexts", opt->contexts,
                  "Prompt lengths, a comma list (default: 1024,8192,32768 on cuda, 256,1024 on cpu)");
  cmd->add_option("--decode-tokens", opt->decode_tokens, "Tokens generated per sequence (default: 128 on cuda, 32 on cpu)");
  cmd->add_option("--repeats", opt->repeats, "Measurements per cell");
  cmd->add_option("--threads", opt->threads, "CPU threads of both sides (default: LibTorch's own default)");
  cmd->add_option("--bandwidth-gbs", opt->bandwidth_gbs,
                  "Memory bandwidth for the roofline, GB/s (default: 4800 on cuda, the H200's; none on cpu)");
  cmd->add_flag("--no-hf", opt->no_hf, "Skip the transformers side");
  cmd->add_flag("--batched-decode", opt->batched_decode,
                "Decode attention for all sequences in one call (policy.batched_decode) instead of one at a time");
  cmd->add_flag("--decode-pool", opt->decode_pool,
                "Keep the caches in a decode pool of one slot per sequence of the largest batch (policy.decode_pool_slots); "
                "with --cuda-graphs each decode step is one graph");
  cmd->add_flag("--cuda-graphs", opt->cuda_graphs,
                "The batched decode step with everything but attention replayed from CUDA graphs (policy.cuda_graphs)");
  cmd->add_option("--prefill-batch-tokens", opt->prefill_batch_tokens,
                  "Tokens of one prefill step, padding included (policy.prefill_batch_tokens; 1: each prompt alone)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  cmd->add_flag("--json", opt->json, "Print one JSON object instead of the table");
  cmd->callback([opt, &inv] { inv.action = [opt, &inv] { return run_bench_generate(*opt, inv.config); }; });
}

}  // namespace cuda_agent::cli
