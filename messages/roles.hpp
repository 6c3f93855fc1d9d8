// The roles that name a message log record's sender and receiver (actors/message_log/FORMAT.md).
// A role is the part a message plays in an episode, not an actor's address: replay matches
// records by role, so these strings are part of the log format and never change spelling.
#pragma once

namespace cuda_agent::role {

inline constexpr const char* episode = "episode";    // the episode actor
inline constexpr const char* policy = "policy";      // the policy actor (or its replay source)
inline constexpr const char* tools = "tools";        // the episode's tool actors (episode_tools)
// The episode routing a compile, verify or profile tool call to the pools itself, instead of to
// the tool actors: the request and the result it builds from the pool's answer are logged under it.
inline constexpr const char* router = "router";
inline constexpr const char* compiler = "compiler";  // the compiler pool
inline constexpr const char* gpu = "gpu";            // the GPU pool (harness workers)
inline constexpr const char* rollout = "rollout";    // the rollout manager
inline constexpr const char* learner = "learner";    // the learner
inline constexpr const char* coordinator = "coordinator";  // a rollout's membership (actors/cluster)
inline constexpr const char* node = "node";                // a node that joined it

}  // namespace cuda_agent::role
