// config.json of a Hugging Face checkpoint of the Llama, Qwen2 or Qwen3 families, as the model
// reads it. Unknown keys are ignored; a key the architecture needs and the file lacks takes
// transformers' default for that architecture.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace cuda_agent::model {

// A checkpoint that cannot be used: the message names the file and what is wrong with it.
struct model_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// `rope_scaling` (or `rope_parameters`): default, linear, llama3 or yarn.
struct rope_scaling {
  std::string type = "default";
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0: derived from factor as transformers does
  bool truncate = true;           // yarn: round the correction range to whole dimensions
};

struct model_config {
  std::string architecture;  // LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM
  std::string model_type;    // llama, qwen2, qwen3
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless the config says otherwise
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  rope_scaling rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and for llama o) projections carry a bias: Qwen2
  bool qk_norm = false;         // RMSNorm on q and k per head: Qwen3
  bool mlp_bias = false;        // gate/up/down projections carry a bias (llama's mlp_bias)
  std::string torch_dtype;      // as written ("bfloat16"); informational
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  static model_config parse(const nlohmann::json& json, const std::string& source);
  static model_config read(const std::filesystem::path& dir);  // dir/config.json
  nlohmann::json to_json() const;  // what save_pretrained writes
};

}  // namespace cuda_agent::model
