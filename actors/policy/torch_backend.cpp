#include "actors/policy/torch_backend.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

namespace cuda_agent::policy {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed that depends only on the setting, the episode and the turn (FNV-1a, not std::hash,
// which may differ between builds).
uint64_t turn_seed(int64_t seed, const std::string& episode, int32_t turn) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : episode) h = (h ^ c) * 0x100000001b3ULL;
  return splitmix64(splitmix64(static_cast<uint64_t>(seed) ^ h) + static_cast<uint64_t>(turn));
}

std::vector<int32_t> narrow(const std::vector<int64_t>& ids, std::size_t from = 0) {
  return std::vector<int32_t>(ids.begin() + static_cast<std::ptrdiff_t>(from), ids.end());
}

}  // namespace

torch::Device torch_device(const std::string& name) {
  try {
    torch::Device device{name};
    if (!device.is_cpu() && !device.is_cuda())
      throw config_error{"setting 'policy.device' must be cpu, cuda or cuda:N, got '" + name + "'"};
    if (device.is_cuda() && !torch::cuda::is_available())
      throw config_error{"setting 'policy.device' is '" + name +
                         "', but LibTorch sees no GPU here; use policy.device = \"cpu\""};
    return device;
  } catch (const c10::Error&) {
    throw config_error{"setting 'policy.device' must be cpu, cuda or cuda:N, got '" + name + "'"};
  }
}

torch::ScalarType torch_dtype(const std::string& name, const torch::Device& device) {
  if (name == "fp32") return torch::kFloat32;
  if (name == "bf16") return torch::kBFloat16;
  if (name == "fp16") return torch::kFloat16;
  if (name == "auto") return device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
  throw config_error{"setting 'policy.dtype' must be one of auto, fp32, bf16, fp16, got '" + name +
                     "'"};
}

namespace {

const std::filesystem::path& checked_model_dir(const policy_settings& settings) {
  if (settings.model_dir.empty())
    throw config_error{"the torch policy backend needs setting 'policy.model_dir': a Hugging Face "
                       "checkpoint directory (config.json, *.safetensors, tokenizer.json)"};
  if (!std::filesystem::is_directory(settings.model_dir))
    throw config_error{"setting 'policy.model_dir' names '" + settings.model_dir.string() +
                       "', which is not a directory"};
  return settings.model_dir;
}

}  // namespace

torch_backend::torch_backend(const policy_settings& settings)
    : settings_(settings),
      ledger_(episode_token_ledger::load(checked_model_dir(settings), settings.chat_format,
                                         settings.tools_dir)) {
  const auto& dir = settings_.model_dir;
  const auto device = torch_device(settings_.device);
  const auto dtype = torch_dtype(settings_.dtype, device);
  model_ = model::transformer::load(dir, device, dtype);
  model_->set_batched_decode(settings_.batched_decode);
  try {
    model_->set_cuda_graphs(settings_.cuda_graphs);
    model_->set_decode_pool(settings_.decode_pool_slots, settings_.decode_pool_tokens);
  } catch (const model::model_error& e) {
    throw config_error{e.what()};
  }
  const auto& format = ledger_->format();
  for (const auto& stop : format.stop_strings()) {
    const auto id = ledger_->tokenizer().token_to_id(stop);
    if (!id)
      throw config_error{"the " + format.name() + " chat format ends turns with '" + stop +
                         "', which " + (dir / "tokenizer.json").string() +
                         " has no token for; set policy.chat_format to the checkpoint's family"};
    stop_ids_.push_back(*id);
  }
  for (const auto id : model_->config().eos_token_ids)
    if (std::find(stop_ids_.begin(), stop_ids_.end(), id) == stop_ids_.end()) stop_ids_.push_back(id);
  model::engine_options options;
  options.max_batch = settings_.max_batch;
  options.prefill_batch_tokens = settings_.prefill_batch_tokens;
  options.cache_budget_bytes = settings_.cache_budget_mb << 20;
  engine_ = std::make_unique<model::generation_engine>(model_, options);
  spdlog::info("policy: torch backend on {} ({}), {} layers, vocab {}, chat format {}",
               device.str(), c10::toString(dtype), model_->config().num_hidden_layers,
               model_->config().vocab_size, format.name());
}

torch_backend::~torch_backend() {
  const model::engine_stats s = engine_->stats();
  spdlog::info("policy: torch backend done: {} prefill steps ({} tokens prefilled, {} from the cache), {} decode steps "
               "({} tokens, largest batch {}), {} evictions, {} decode pool slot handovers",
               s.prefill_steps, s.prefilled_tokens, s.cached_tokens, s.decode_steps, s.decoded_tokens,
               s.largest_batch, s.evictions, s.slot_handovers);
}

policy_response torch_backend::complete(const policy_request& request) {
  policy_response response;
  response.episode_id = request.episode_id;
  response.turn = request.turn;
  episode_token_ledger::prompt next;
  try {
    next = ledger_->prompt_for(request);
  } catch (const model::model_error& e) {
    throw policy_error{std::string{"the torch policy cannot render the conversation: "} + e.what()};
  }
  auto& prompt = next.tokens;
  response.context_action = next.rerendered ? "rerendered" : "none";
  response.prompt_tokens = static_cast<int32_t>(prompt.size());
  const int64_t context = std::min<int64_t>(settings_.context_tokens,
                                            model_->config().max_position_embeddings);
  if (static_cast<int64_t>(prompt.size()) >= context) {
    // The agent's budget is spent: an answer, as the OpenAI backend gives for a refused prompt.
    response.finish_reason = "context_overflow";
    response.context_action += ",over_budget";
    return response;
  }
  model::sampling_params sampling;
  sampling.temperature = std::isnan(request.temperature) ? settings_.temperature : request.temperature;
  sampling.top_p = std::isnan(request.top_p) ? settings_.top_p : request.top_p;
  sampling.top_k = settings_.top_k;
  sampling.max_tokens = static_cast<int32_t>(std::min<int64_t>(
      request.max_tokens > 0 ? request.max_tokens : settings_.max_tokens,
      context - static_cast<int64_t>(prompt.size())));
  sampling.stop_token_ids = stop_ids_;
  sampling.seed = turn_seed(settings_.seed, request.episode_id, request.turn);
  model::generation_result result;
  try {
    result = engine_->submit({request.episode_id, prompt, sampling}).get();
  } catch (const model::model_error& e) {
    throw policy_error{std::string{"the torch policy could not generate: "} + e.what()};
  }
  const auto text = ledger_->tokenizer().decode(result.token_ids, /*skip_special_tokens=*/false);
  auto parsed = model::parse_completion(ledger_->format(), text, ledger_->tools(), request.tools,
                                        model::call_id_prefix(request.episode_id, request.turn));
  response.content = std::move(parsed.content);
  response.tool_calls = std::move(parsed.tool_calls);
  response.token_ids = narrow(result.token_ids);
  response.logprobs = result.logprobs;
  response.prompt_token_ids = narrow(prompt, next.new_from);
  response.finish_reason = result.finish_reason == "stop"
                               ? (response.tool_calls.empty() ? "stop" : "tool_calls")
                               : result.finish_reason;
  response.weight_version = result.weight_version;
  response.completion_tokens = static_cast<int32_t>(result.token_ids.size());

  if (const auto forgotten = ledger_->remember(request, std::move(prompt), result.token_ids))
    engine_->release(*forgotten);
  return response;
}

void torch_backend::update_weights(std::vector<std::pair<std::string, torch::Tensor>> weights,
                                   int64_t version) {
  engine_->update_weights(std::move(weights), version);
}

}  // namespace cuda_agent::policy
