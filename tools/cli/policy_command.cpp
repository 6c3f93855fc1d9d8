// `cuda-agent policy ask`: one turn from the configured policy, printed as JSON. The quickest
// way to check that cuda-agent reaches a vLLM or SGLang server, that the model calls tools and
// that token ids come back, before any episode runs.
#include <iostream>

#include "actors/policy/policy_backend.hpp"
#include "messages/codec.hpp"
#include "tools/cli/commands.hpp"

namespace cuda_agent::cli {

void add_policy_command(CLI::App& app, invocation& inv) {
  auto* policy = app.add_subcommand("policy", "Talk to the configured policy ([policy] settings)");
  policy->require_subcommand(1);
  struct options {
    std::string system = "You are a CUDA kernel engineer working in a workdir through tools.";
    std::string prompt = "List the files of the workdir.";
    std::string task_id = "check";
    std::string episode = "policy-ask";
  };
  auto opts = std::make_shared<options>();
  auto* ask = policy->add_subcommand(
      "ask", "Send one conversation to the policy and print its policy_response as one JSON line");
  ask->add_option("--prompt", opts->prompt, "The user message")->capture_default_str();
  ask->add_option("--system", opts->system, "The system message")->capture_default_str();
  ask->add_option("--task-id", opts->task_id, "Task id of the request (the demo policy plays it)")
      ->capture_default_str();
  ask->add_option("--episode", opts->episode, "Episode id of the request (replay reads it)")
      ->capture_default_str();
  ask->callback([&inv, opts] {
    inv.action = [&inv, opts] {
      const auto backend = policy::make_policy_backend(policy::policy_settings::from(inv.config));
      policy_request request;
      request.episode_id = opts->episode;
      request.task_id = opts->task_id;
      request.turn = 1;
      request.messages = {{"system", opts->system, "", {}}, {"user", opts->prompt, "", {}}};
      const auto response = backend->complete(request);
      std::cout << msgpack_to_json(encode(response)).dump() << "\n";
      return 0;
    };
  });
}

}  // namespace cuda_agent::cli
