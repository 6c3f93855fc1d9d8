#include "actors/model/model_config.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

namespace cuda_agent::model {
namespace {

// transformers' defaults for the keys a config.json may leave out, per model type.
struct family_defaults {
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t intermediate_size;
  int64_t num_hidden_layers;
  int64_t num_attention_heads;
  int64_t num_key_value_heads;  // 0: num_attention_heads
  int64_t head_dim;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings;
  int64_t bos_token_id;         // -1: none
  int64_t eos_token_id;         // -1: none
};

constexpr family_defaults llama_defaults{32000, 4096, 11008, 32, 32, 0, 0, 2048, 1, 2};
constexpr family_defaults qwen2_defaults{151936, 4096, 22016, 32, 32, 32, 0, 32768, -1, -1};
constexpr family_defaults qwen3_defaults{151936, 4096, 22016, 32, 32, 32, 128, 32768, -1, -1};

[[noreturn]] void fail(const std::string& source, const std::string& problem) {
  throw model_error(source + ": " + problem);
}

const nlohmann::json* find(const nlohmann::json& json, const char* key) {
  auto it = json.find(key);
  if (it == json.end() || it->is_null()) return nullptr;
  return &*it;
}

int64_t get_int(const nlohmann::json& json, const char* key, int64_t fallback,
                const std::string& source) {
  const nlohmann::json* value = find(json, key);
  if (!value) return fallback;
  if (!value->is_number_integer()) fail(source, std::string("'") + key + "' is not an integer");
  return value->get<int64_t>();
}

double get_double(const nlohmann::json& json, const char* key, double fallback,
                  const std::string& source) {
  const nlohmann::json* value = find(json, key);
  if (!value) return fallback;
  if (!value->is_number()) fail(source, std::string("'") + key + "' is not a number");
  return value->get<double>();
}

bool get_bool(const nlohmann::json& json, const char* key, bool fallback,
              const std::string& source) {
  const nlohmann::json* value = find(json, key);
  if (!value) return fallback;
  if (!value->is_boolean()) fail(source, std::string("'") + key + "' is not true or false");
  return value->get<bool>();
}

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

// rope_scaling (older files) or rope_parameters (transformers 5): the former wins where both
// are set, as in transformers' RotaryEmbeddingConfigMixin.
void parse_rope(const nlohmann::json& json, model_config& config, const std::string& source) {
  const nlohmann::json* params = find(json, "rope_scaling");
  if (!params || (params->is_object() && params->empty())) params = find(json, "rope_parameters");
  static const nlohmann::json empty = nlohmann::json::object();
  if (!params) params = &empty;
  if (!params->is_object()) fail(source, "'rope_parameters' is not an object");

  config.rope_theta = get_double(*params, "rope_theta", get_double(json, "rope_theta", 10000.0, source), source);
  if (config.rope_theta <= 0) fail(source, "rope_theta must be positive");
  double partial = get_double(*params, "partial_rotary_factor",
                              get_double(json, "partial_rotary_factor", 1.0, source), source);
  if (partial != 1.0) fail(source, "partial_rotary_factor other than 1 is not supported");

  rope_scaling& rope = config.rope;
  std::string type = "default";
  if (const nlohmann::json* t = find(*params, "rope_type"); t && t->is_string()) {
    type = t->get<std::string>();
  } else if (const nlohmann::json* t2 = find(*params, "type"); t2 && t2->is_string()) {
    type = t2->get<std::string>();
  }
  rope.type = type;
  if (type == "default") return;
  if (type != "linear" && type != "llama3" && type != "yarn") {
    fail(source, "unsupported rope type '" + type + "' (supported: default, linear, llama3, yarn)");
  }
  auto required = [&](const char* key) {
    if (!find(*params, key)) fail(source, "rope type '" + type + "' needs '" + key + "' in rope_parameters");
    return get_double(*params, key, 0.0, source);
  };
  int64_t original = get_int(*params, "original_max_position_embeddings",
                             get_int(json, "original_max_position_embeddings",
                                     config.max_position_embeddings, source),
                             source);
  if (type == "linear") {
    rope.factor = required("factor");
  } else if (type == "llama3") {
    rope.factor = required("factor");
    rope.low_freq_factor = required("low_freq_factor");
    rope.high_freq_factor = required("high_freq_factor");
    rope.original_max_position_embeddings = original;
    if (rope.high_freq_factor == rope.low_freq_factor) fail(source, "llama3 rope: high_freq_factor equals low_freq_factor");
  } else {  // yarn
    rope.original_max_position_embeddings = original;
    rope.factor = find(*params, "factor") ? get_double(*params, "factor", 1.0, source)
                                          : double(config.max_position_embeddings) / double(original);
    double beta_fast = get_double(*params, "beta_fast", 0.0, source);
    double beta_slow = get_double(*params, "beta_slow", 0.0, source);
    rope.beta_fast = beta_fast != 0 ? beta_fast : 32.0;  // transformers: `or 32`
    rope.beta_slow = beta_slow != 0 ? beta_slow : 1.0;
    rope.truncate = get_bool(*params, "truncate", true, source);
    rope.attention_factor = get_double(*params, "attention_factor", 0.0, source);
    if (rope.attention_factor == 0) {
      double mscale = get_double(*params, "mscale", 0.0, source);
      double mscale_all_dim = get_double(*params, "mscale_all_dim", 0.0, source);
      rope.attention_factor = (mscale != 0 && mscale_all_dim != 0)
                                  ? yarn_mscale(rope.factor, mscale) / yarn_mscale(rope.factor, mscale_all_dim)
                                  : yarn_mscale(rope.factor, 1.0);
    }
  }
  if (rope.factor <= 0) fail(source, "rope factor must be positive");
  if ((type == "llama3" || type == "yarn") && rope.original_max_position_embeddings <= 0) {
    fail(source, "rope original_max_position_embeddings must be positive");
  }
}

}  // namespace

model_config model_config::parse(const nlohmann::json& json, const std::string& source) {
  if (!json.is_object()) fail(source, "not a JSON object");
  model_config config;
  if (const nlohmann::json* arch = find(json, "architectures")) {
    if (!arch->is_array() || arch->empty() || !(*arch)[0].is_string()) {
      fail(source, "'architectures' is not a list of names");
    }
    config.architecture = (*arch)[0].get<std::string>();
  }
  if (const nlohmann::json* type = find(json, "model_type"); type && type->is_string()) {
    config.model_type = type->get<std::string>();
  }
  static const std::pair<const char*, const char*> known[] = {
      {"LlamaForCausalLM", "llama"}, {"Qwen2ForCausalLM", "qwen2"}, {"Qwen3ForCausalLM", "qwen3"}};
  if (config.architecture.empty()) {
    for (const auto& [arch, type] : known) {
      if (config.model_type == type) config.architecture = arch;
    }
  }
  bool supported = false;
  for (const auto& [arch, type] : known) {
    if (config.architecture == arch) {
      supported = true;
      if (config.model_type.empty()) config.model_type = type;
      if (config.model_type != type) {
        fail(source, "architecture " + config.architecture + " with model_type '" + config.model_type + "'");
      }
    }
  }
  if (!supported) {
    fail(source, "unsupported architecture '" +
                     (config.architecture.empty() ? config.model_type : config.architecture) +
                     "' (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  }
  const family_defaults& d = config.model_type == "llama"   ? llama_defaults
                             : config.model_type == "qwen2" ? qwen2_defaults
                                                            : qwen3_defaults;

  config.vocab_size = get_int(json, "vocab_size", d.vocab_size, source);
  config.hidden_size = get_int(json, "hidden_size", d.hidden_size, source);
  config.intermediate_size = get_int(json, "intermediate_size", d.intermediate_size, source);
  config.num_hidden_layers = get_int(json, "num_hidden_layers", d.num_hidden_layers, source);
  config.num_attention_heads = get_int(json, "num_attention_heads", d.num_attention_heads, source);
  if (config.num_attention_heads <= 0) fail(source, "num_attention_heads must be positive");
  config.num_key_value_heads = get_int(json, "num_key_value_heads",
                                       d.num_key_value_heads ? d.num_key_value_heads
                                                             : config.num_attention_heads,
                                       source);
  config.head_dim = get_int(json, "head_dim",
                            d.head_dim ? d.head_dim : config.hidden_size / config.num_attention_heads,
                            source);
  config.max_position_embeddings =
      get_int(json, "max_position_embeddings", d.max_position_embeddings, source);
  config.rms_norm_eps = get_double(json, "rms_norm_eps", 1e-6, source);
  config.tie_word_embeddings = get_bool(json, "tie_word_embeddings", false, source);
  if (config.model_type == "qwen2") {
    config.attention_bias = true;  // Qwen2's q/k/v always carry one, its o_proj never
    if (get_bool(json, "use_sliding_window", false, source)) {
      fail(source, "use_sliding_window is not supported (set it to false)");
    }
  } else {
    config.attention_bias = get_bool(json, "attention_bias", false, source);
  }
  if (config.model_type == "llama") config.mlp_bias = get_bool(json, "mlp_bias", false, source);
  config.qk_norm = config.model_type == "qwen3";
  if (const nlohmann::json* act = find(json, "hidden_act")) {
    if (!act->is_string() || act->get<std::string>() != "silu") {
      fail(source, "unsupported hidden_act " + act->dump() + " (only silu)");
    }
  }
  if (const nlohmann::json* dtype = find(json, "dtype"); dtype && dtype->is_string()) {
    config.torch_dtype = dtype->get<std::string>();
  } else if (const nlohmann::json* old = find(json, "torch_dtype"); old && old->is_string()) {
    config.torch_dtype = old->get<std::string>();
  }
  config.bos_token_id = json.contains("bos_token_id") ? get_int(json, "bos_token_id", -1, source)
                                                       : d.bos_token_id;
  if (const nlohmann::json* eos = find(json, "eos_token_id")) {
    if (eos->is_number_integer()) {
      config.eos_token_ids.push_back(eos->get<int64_t>());
    } else if (eos->is_array()) {
      for (const auto& id : *eos) {
        if (!id.is_number_integer()) fail(source, "'eos_token_id' holds a non-integer");
        config.eos_token_ids.push_back(id.get<int64_t>());
      }
    } else {
      fail(source, "'eos_token_id' is neither an integer nor a list of integers");
    }
  } else if (!json.contains("eos_token_id") && d.eos_token_id >= 0) {
    config.eos_token_ids.push_back(d.eos_token_id);
  }

  for (auto [name, value] : {std::pair{"vocab_size", config.vocab_size},
                             {"hidden_size", config.hidden_size},
                             {"intermediate_size", config.intermediate_size},
                             {"num_hidden_layers", config.num_hidden_layers},
                             {"num_key_value_heads", config.num_key_value_heads},
                             {"head_dim", config.head_dim},
                             {"max_position_embeddings", config.max_position_embeddings}}) {
    if (value <= 0) fail(source, std::string("'") + name + "' must be positive");
  }
  if (config.num_attention_heads % config.num_key_value_heads != 0) {
    fail(source, "num_attention_heads is not a multiple of num_key_value_heads");
  }
  if (config.head_dim % 2 != 0) fail(source, "head_dim must be even for rotary embeddings");
  parse_rope(json, config, source);
  return config;
}

model_config model_config::read(const std::filesystem::path& dir) {
  std::filesystem::path path = dir / "config.json";
  std::ifstream in(path);
  if (!in) throw model_error(path.string() + ": cannot be read (is this a Hugging Face checkpoint directory?)");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded()) throw model_error(path.string() + ": not valid JSON");
  return parse(json, path.string());
}

nlohmann::json model_config::to_json() const {
  nlohmann::json json;
  json["architectures"] = {architecture};
  json["model_type"] = model_type;
  json["vocab_size"] = vocab_size;
  json["hidden_size"] = hidden_size;
  json["intermediate_size"] = intermediate_size;
  json["num_hidden_layers"] = num_hidden_layers;
  json["num_attention_heads"] = num_attention_heads;
  json["num_key_value_heads"] = num_key_value_heads;
  json["head_dim"] = head_dim;
  json["max_position_embeddings"] = max_position_embeddings;
  json["rms_norm_eps"] = rms_norm_eps;
  json["hidden_act"] = "silu";
  json["tie_word_embeddings"] = tie_word_embeddings;
  if (model_type != "qwen2") json["attention_bias"] = attention_bias;
  if (model_type == "llama") json["mlp_bias"] = mlp_bias;
  if (!torch_dtype.empty()) json["dtype"] = torch_dtype;
  json["bos_token_id"] = bos_token_id >= 0 ? nlohmann::json(bos_token_id) : nlohmann::json();
  if (eos_token_ids.empty()) {
    json["eos_token_id"] = nullptr;
  } else if (eos_token_ids.size() == 1) {
    json["eos_token_id"] = eos_token_ids[0];
  } else {
    json["eos_token_id"] = eos_token_ids;
  }
  nlohmann::json params{{"rope_type", rope.type}, {"rope_theta", rope_theta}};
  if (rope.type != "default") params["factor"] = rope.factor;
  if (rope.type == "llama3") {
    params["low_freq_factor"] = rope.low_freq_factor;
    params["high_freq_factor"] = rope.high_freq_factor;
  }
  if (rope.type == "llama3" || rope.type == "yarn") {
    params["original_max_position_embeddings"] = rope.original_max_position_embeddings;
  }
  if (rope.type == "yarn") {
    params["beta_fast"] = rope.beta_fast;
    params["beta_slow"] = rope.beta_slow;
    params["attention_factor"] = rope.attention_factor;
    params["truncate"] = rope.truncate;
  }
  json["rope_parameters"] = params;
  return json;
}

}  // namespace cuda_agent::model
