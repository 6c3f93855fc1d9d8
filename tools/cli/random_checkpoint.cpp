#include "tools/cli/random_checkpoint.hpp"

#include <fstream>
#include <utility>
#include <vector>

#include "actors/model/safetensors.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {

namespace fs = std::filesystem;

// The named shapes. max_position_embeddings is raised to 131072 (Qwen2.5's YaRN-extended length)
// so that a 32k prompt, its decode and its second turn fit; it bounds positions and nothing else.
model::model_config named_shape(const std::string& name) {
  model::model_config c;
  c.architecture = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.attention_bias = true;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 1000000.0;
  c.max_position_embeddings = 131072;
  c.eos_token_ids = {};
  if (name == "qwen2-0.5b") {
    c.hidden_size = 896, c.num_hidden_layers = 24, c.num_attention_heads = 14, c.num_key_value_heads = 2;
    c.intermediate_size = 4864, c.vocab_size = 151936, c.tie_word_embeddings = true;
  } else if (name == "qwen2.5-7b") {
    c.hidden_size = 3584, c.num_hidden_layers = 28, c.num_attention_heads = 28, c.num_key_value_heads = 4;
    c.intermediate_size = 18944, c.vocab_size = 152064, c.tie_word_embeddings = false;
  } else if (name == "tiny") {
    c.hidden_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4, c.num_key_value_heads = 2;
    c.intermediate_size = 128, c.vocab_size = 4096, c.tie_word_embeddings = true;
  } else {
    throw usage_error{"--shape: unknown shape '" + name + "' (give qwen2-0.5b, qwen2.5-7b or tiny)"};
  }
  c.head_dim = c.hidden_size / c.num_attention_heads;
  return c;
}

void write_random_checkpoint(const fs::path& dir, const model::model_config& c, torch::ScalarType dtype,
                             torch::Device draw_on) {
  fs::create_directories(dir);
  std::ofstream{dir / "config.json"} << c.to_json().dump(2) << "\n";
  torch::manual_seed(1234);
  const auto opts = torch::TensorOptions().dtype(dtype);
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  auto normal = [&](const std::string& name, std::vector<int64_t> shape) {
    tensors.emplace_back(name, torch::randn(shape, opts.device(draw_on)).mul_(0.02).cpu());
  };
  auto ones = [&](const std::string& name, int64_t n) { tensors.emplace_back(name, torch::ones({n}, opts)); };
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  const int64_t q_out = c.num_attention_heads * c.head_dim, kv_out = c.num_key_value_heads * c.head_dim;
  normal("model.embed_tokens.weight", {c.vocab_size, H});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    ones(p + "input_layernorm.weight", H);
    normal(p + "self_attn.q_proj.weight", {q_out, H});
    normal(p + "self_attn.q_proj.bias", {q_out});
    normal(p + "self_attn.k_proj.weight", {kv_out, H});
    normal(p + "self_attn.k_proj.bias", {kv_out});
    normal(p + "self_attn.v_proj.weight", {kv_out, H});
    normal(p + "self_attn.v_proj.bias", {kv_out});
    normal(p + "self_attn.o_proj.weight", {H, q_out});
    ones(p + "post_attention_layernorm.weight", H);
    normal(p + "mlp.gate_proj.weight", {I, H});
    normal(p + "mlp.up_proj.weight", {I, H});
    normal(p + "mlp.down_proj.weight", {H, I});
  }
  ones("model.norm.weight", H);
  if (!c.tie_word_embeddings) normal("lm_head.weight", {c.vocab_size, H});
  model::write_safetensors_checkpoint(dir, tensors, int64_t{5} << 30);
}

}  // namespace cuda_agent::cli
