// `cuda-agent generate`: the quickest check of a checkpoint. Loads a Hugging Face checkpoint with
// the LibTorch model (actors/model), generates from one prompt and prints the text, or with
// --json one object: {"token_ids": [...], "logprobs": [...], "text": "..."} for the generated
// tokens only. The prompt is raw text encoded as the tokenizer encodes it (its post-processor's
// BOS included); --chat renders it as the one user message of a conversation in the checkpoint's
// chat format, with the generation prompt, and stops at the format's end of turn.
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "actors/model/chat_format.hpp"
#include "actors/model/generation_engine.hpp"
#include "actors/model/tokenizer.hpp"
#include "actors/policy/torch_backend.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {

void add_generate_command(CLI::App& app, invocation& inv) {
  struct options {
    std::filesystem::path model;
    std::string prompt;
    std::filesystem::path prompt_file;
    bool chat = false;
    int32_t max_tokens = 256;
    double temperature = 1.0;
    double top_p = 1.0;
    int64_t top_k = 0;
    uint64_t seed = 0;
    std::string device = "cpu";
    std::string dtype = "auto";
    bool json = false;
  };
  auto opts = std::make_shared<options>();
  auto* cmd = app.add_subcommand("generate", "Generate from one prompt with a Hugging Face checkpoint");
  cmd->add_option("--model", opts->model, "Checkpoint directory (config.json, *.safetensors, tokenizer.json)")
      ->required();
  auto* prompt = cmd->add_option("--prompt", opts->prompt, "The prompt text");
  auto* file = cmd->add_option("--prompt-file", opts->prompt_file, "A file holding the prompt text");
  prompt->excludes(file);
  cmd->add_flag("--chat", opts->chat, "Render the prompt as a user message in the chat format");
  cmd->add_option("--max-tokens", opts->max_tokens, "Most tokens to generate")
      ->capture_default_str()->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--temperature", opts->temperature, "Sampling temperature; 0 is greedy")
      ->capture_default_str()->check(CLI::Range(0.0, 2.0));
  cmd->add_option("--top-p", opts->top_p, "Nucleus sampling mass")
      ->capture_default_str()->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--top-k", opts->top_k, "Top-k sampling; 0 keeps every token")->capture_default_str();
  cmd->add_option("--seed", opts->seed, "Seed of the sampler")->capture_default_str();
  cmd->add_option("--device", opts->device, "cpu, cuda or cuda:N")->capture_default_str();
  cmd->add_option("--dtype", opts->dtype, "auto, fp32, bf16 or fp16 (auto: bf16 on cuda)")
      ->capture_default_str();
  cmd->add_flag("--json", opts->json, "Print one JSON object with token ids and log-probabilities");
  cmd->callback([&inv, opts] {
    inv.action = [opts] {
      std::string text = opts->prompt;
      if (!opts->prompt_file.empty()) {
        std::ifstream in{opts->prompt_file, std::ios::binary};
        if (!in) throw usage_error{"cannot read --prompt-file " + opts->prompt_file.string()};
        std::ostringstream content;
        content << in.rdbuf();
        text = content.str();
      }
      if (text.empty()) throw usage_error{"give the prompt with --prompt TEXT or --prompt-file F"};
      const auto device = policy::torch_device(opts->device);
      const auto dtype = policy::torch_dtype(opts->dtype, device);
      const auto tokenizer = model::tokenizer::load(opts->model / "tokenizer.json");
      std::vector<int64_t> ids;
      model::sampling_params sampling;
      if (opts->chat) {
        const auto format = model::chat_format::detect(opts->model);
        const auto rendered =
            model::render(format, {{"user", text, "", {}}}, model::chat_tools{}, {}, true);
        ids = tokenizer.encode(rendered.text, /*add_special_tokens=*/false);
        for (const auto& stop : format.stop_strings())
          if (const auto id = tokenizer.token_to_id(stop)) sampling.stop_token_ids.push_back(*id);
      } else {
        ids = tokenizer.encode(text, /*add_special_tokens=*/true);
      }
      const auto model = model::transformer::load(opts->model, device, dtype);
      for (const auto id : model->config().eos_token_ids) sampling.stop_token_ids.push_back(id);
      sampling.temperature = opts->temperature;
      sampling.top_p = opts->top_p;
      sampling.top_k = opts->top_k;
      sampling.max_tokens = opts->max_tokens;
      sampling.seed = opts->seed;
      model::engine_options engine_options;
      engine_options.max_batch = 1;
      model::generation_engine engine{model, engine_options};
      const auto result = engine.submit({"", ids, sampling}).get();
      const auto generated = tokenizer.decode(result.token_ids, /*skip_special_tokens=*/false);
      if (opts->json) {
        const nlohmann::json out{{"token_ids", result.token_ids},
                                 {"logprobs", result.logprobs},
                                 {"text", generated},
                                 {"finish_reason", result.finish_reason},
                                 {"prompt_tokens", result.prompt_tokens}};
        // Generated bytes that are not UTF-8 (a multi-byte character cut at max_tokens) are
        // replaced, not fatal.
        std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
      } else {
        std::cout << generated << "\n";
      }
      return 0;
    };
  });
}

}  // namespace cuda_agent::cli
