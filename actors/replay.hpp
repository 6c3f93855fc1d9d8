// Replaying an episode from the message log.
//
// Hermetic replay runs a fresh episode actor whose policy, tools, compiler and GPU pool are all
// one replay source actor answering from the recorded answers, in the order they were recorded;
// when the original ran out of wall clock, the source feeds the deadline where the recorded
// answers stop. The replayed episode must send exactly the recorded messages; the first place
// where it does not is reported. That is what makes a log a debugging tool: a change to the
// episode's logic shows up as a divergence at a precise message.
//
// Live replay answers only the policy from the log and lets real tools, builds and GPU jobs run
// again in a fresh workdir. Messages are compared without what is incidental to the outcome
// (clock readings, cache hits, cache paths, measured times, decimal numbers in text:
// messages/incidental.hpp), so an honest re-run reproduces every episode and the first
// difference reported is a real one: another build result, verdict, reward or tool output.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include "actors/episode.hpp"
#include "actors/message_log/format.hpp"

namespace cuda_agent {

struct replay_report {
  std::string episode_id;
  bool identical = false;
  // The log holds no episode_ended for it: the run stopped while it was in flight. Only the
  // recorded messages are compared, and `identical` says whether they all replayed.
  bool incomplete = false;
  std::size_t recorded = 0;  // messages of the episode in the log
  std::size_t replayed = 0;  // messages the replayed episode sent
  std::size_t differing = 0;
  std::size_t first_divergence = 0;  // index into the episode's messages, when not identical
  std::string expected;              // the recorded message there ("<end>" past the end)
  std::string actual;                // what the replay sent there
  std::string error;                 // the episode could not be replayed at all
};

// Episode ids that have an episode_started record, in log order.
std::vector<std::string> recorded_episodes(const std::vector<message_log::record>& log);

// The records of one episode, in log order. Where its jobs ran is not what it did: the cluster's
// records about its jobs (a job requeued from a lost node, a late answer dropped; role::node)
// are left out, so a distributed run replays like a one-process run.
std::vector<message_log::record> episode_records(const std::vector<message_log::record>& log,
                                                 const std::string& episode_id);

// Rebuilds the episode's configuration from its records (task, budgets, paths, prompt and
// sampling). Throws std::runtime_error when the records lack an episode_started or task_spec.
episode_config recorded_config(const std::vector<message_log::record>& records);

replay_report replay_hermetic(caf::actor_system& system,
                              const std::vector<message_log::record>& records);

// Live: `make_peers` gets the configuration (with a fresh workdir already prepared by the caller
// in config.workdir) and returns the real tools, compiler and gpu actors; the policy answers
// from the log.
using live_peers_factory = std::function<episode_peers(const episode_config&)>;
replay_report replay_live(caf::actor_system& system, const std::vector<message_log::record>& records,
                          const episode_config& fresh, const live_peers_factory& make_peers);

}  // namespace cuda_agent
