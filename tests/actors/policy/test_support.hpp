// Shared by the policy tests: settings pointed at a test server, and a small conversation.
#pragma once

#include <string>

#include "actors/policy/policy_backend.hpp"
#include "tests/support/openai_test_server.hpp"

namespace cuda_agent::policy::testing {

using cuda_agent::testing::completion;
using cuda_agent::testing::openai_test_server;
using cuda_agent::testing::reply_with;
using cuda_agent::testing::scripted_reply;

inline policy_settings settings_for(const openai_test_server& server) {
  policy_settings s;
  s.base_url = server.base_url();
  s.model = "test-model";
  s.api_key_env = "";
  s.tools_dir = CUDA_AGENT_SOURCE_DIR "/skills/tools";
  s.timeout_ms = 10000;
  s.retry_backoff_ms = 10;  // retries in tests should not sleep for long
  return s;
}

inline policy_request first_turn(std::string episode = "ep-1") {
  policy_request request;
  request.episode_id = std::move(episode);
  request.task_id = "relu";
  request.turn = 1;
  request.messages = {{"system", "You write CUDA kernels.", "", {}},
                      {"user", "Make relu faster than torch.compile.", "", {}}};
  request.tools = {"Bash", "Read", "Write", "Edit"};
  return request;
}

}  // namespace cuda_agent::policy::testing
