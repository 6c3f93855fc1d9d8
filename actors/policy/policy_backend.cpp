#include "actors/policy/policy_backend.hpp"

#include "actors/policy/demo_backend.hpp"
#include "actors/policy/openai_backend.hpp"
#include "actors/policy/replay_backend.hpp"
#ifdef CUDA_AGENT_HAVE_TORCH
#include "actors/policy/torch_backend.hpp"
#endif

namespace cuda_agent::policy {

policy_settings policy_settings::from(const settings& config) {
  policy_settings s;
  s.backend = config.get_string("policy.backend");
  s.base_url = config.get_string("policy.base_url");
  s.model = config.get_string("policy.model");
  s.api_key_env = config.get_string("policy.api_key_env");
  s.temperature = config.get_real("policy.temperature");
  s.top_p = config.get_real("policy.top_p");
  s.max_tokens = static_cast<int32_t>(config.get_int("policy.max_tokens"));
  s.timeout_ms = config.get_int("policy.timeout_s") * 1000;
  s.retries = static_cast<int32_t>(config.get_int("policy.retries"));
  s.retry_backoff_ms = config.get_int("policy.retry_backoff_ms");
  s.context_tokens = config.get_int("policy.context_tokens");
  s.token_ids = config.get_bool("policy.token_ids");
  s.tools_dir = config.get_string("policy.tools_dir");
  s.max_concurrency = static_cast<int32_t>(config.get_int("policy.max_concurrency"));
  s.max_queue = static_cast<int32_t>(config.get_int("policy.max_queue"));
  s.max_wait_s = config.get_int("policy.max_wait_s");
  s.replay_log = config.get_string("policy.replay_log");
  s.replay_episode = config.get_string("policy.replay_episode");
  s.demo_dir = config.get_string("policy.demo_dir");
  s.model_dir = config.get_string("policy.model_dir");
  s.device = config.get_string("policy.device");
  s.dtype = config.get_string("policy.dtype");
  s.chat_format = config.get_string("policy.chat_format");
  s.top_k = config.get_int("policy.top_k");
  s.seed = config.get_int("policy.seed");
  s.max_batch = config.get_int("policy.max_batch");
  s.prefill_batch_tokens = config.get_int("policy.prefill_batch_tokens");
  s.batched_decode = config.get_bool("policy.batched_decode");
  s.cuda_graphs = config.get_bool("policy.cuda_graphs");
  s.cache_budget_mb = config.get_int("policy.cache_budget_mb");
  s.decode_pool_slots = config.get_int("policy.decode_pool_slots");
  s.decode_pool_tokens = config.get_int("policy.decode_pool_tokens");
  if (s.temperature < 0 || s.temperature > 2)
    throw config_error{"setting 'policy.temperature' must be between 0 and 2"};
  if (s.top_p <= 0 || s.top_p > 1)
    throw config_error{"setting 'policy.top_p' must be above 0 and at most 1"};
  if (s.cuda_graphs && !s.batched_decode)
    throw config_error{"setting 'policy.cuda_graphs' captures the batched decode step; set policy.batched_decode = true "
                       "as well, or policy.cuda_graphs = false"};
  if (s.decode_pool_slots > 0 && s.decode_pool_tokens == 0)
    throw config_error{"setting 'policy.decode_pool_slots' needs policy.decode_pool_tokens, the tokens of each slot "
                       "(for example policy.context_tokens)"};
  if (s.max_tokens >= s.context_tokens)
    throw config_error{"setting 'policy.max_tokens' must be below policy.context_tokens"};
  return s;
}

std::shared_ptr<policy_backend> make_policy_backend(const policy_settings& settings) {
  if (settings.backend == "openai") return std::make_shared<openai_backend>(settings);
  if (settings.backend == "replay")
    return std::make_shared<replay_backend>(settings.replay_log, settings.replay_episode);
  if (settings.backend == "demo") return std::make_shared<demo_backend>(settings);
  if (settings.backend == "torch") {
#ifdef CUDA_AGENT_HAVE_TORCH
    return std::make_shared<torch_backend>(settings);
#else
    throw config_error{"policy.backend = \"torch\" needs a cuda-agent built with LibTorch; run "
                       "tools/setup.sh, or configure with -DCUDA_AGENT_WITH_TORCH=ON"};
#endif
  }
  throw config_error{"setting 'policy.backend' must be one of openai, torch, replay, demo, got '" +
                     settings.backend + "'"};
}

}  // namespace cuda_agent::policy
