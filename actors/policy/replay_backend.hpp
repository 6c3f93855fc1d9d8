// The policy read back from a message log: each turn is answered with the policy_response the
// log recorded for that episode and turn, so an episode can be re-run hermetically (and a
// recorded demonstration run can be played again). A turn the log does not hold is a
// policy_error naming the log, the episode and the turns it does hold.
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <string>

#include "actors/policy/policy_backend.hpp"

namespace cuda_agent::policy {

class replay_backend final : public policy_backend {
 public:
  // `episode` empty: each request is answered from the log's records of the request's own
  // episode id. Throws config_error when `log_dir` is not a message log directory.
  replay_backend(std::filesystem::path log_dir, std::string episode);

  policy_response complete(const policy_request& request) override;
  std::string name() const override { return "replay"; }

 private:
  using turns = std::map<int32_t, policy_response>;
  const turns& episode_turns(const std::string& episode);  // call with mutex_ held

  std::filesystem::path log_dir_;
  std::string episode_;
  std::mutex mutex_;
  std::map<std::string, turns> episodes_;  // read once per episode
};

}  // namespace cuda_agent::policy
