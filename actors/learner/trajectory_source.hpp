// Where the learner's samples come from: trajectory messages, handed over live by a rollout or
// read back from the message logs of earlier runs (the episode actor records each finished
// episode's trajectory with sender "episode" and receiver "learner").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "actors/learner/episode_sample.hpp"
#include "messages/messages.hpp"

namespace cuda_agent::learner {

// The episode as one token sequence: each turn's token_ids in turn order (its new prompt tokens
// with loss mask 0, then its sampled tokens with mask 1), their rollout log-probabilities (0
// where the mask is 0), one weight version per turn, and the episode's reward, reason and turn
// count. Throws learner_error naming the episode when it holds no tokens, when its first turn
// starts without a prompt (the policy returned only the sampled tokens), or when a turn's
// token_ids, logprobs and loss_mask differ in length.
episode_sample sample_of(const trajectory& t);

struct log_trajectories {
  std::vector<trajectory> trajectories;
  // One line per trajectory record left out, and per log that ended inside a record, saying why.
  std::vector<std::string> skipped;
};

// Every trajectory recorded in the logs (sender "episode", receiver "learner"), logs in the
// order given, records in log order. Trajectories that ended in infrastructure_failure are
// skipped (they say nothing about the agent); of an episode recorded more than once (a resumed
// or retried run) the last remaining record is kept, at its own place in the order. A log that
// ends inside a record is read up to it, as the reader allows while a writer is appending.
// Throws learner_error naming the log when a directory is missing or unreadable, the log is
// corrupt, or a trajectory record does not decode.
log_trajectories read_trajectories(const std::vector<std::filesystem::path>& log_dirs);

}  // namespace cuda_agent::learner
