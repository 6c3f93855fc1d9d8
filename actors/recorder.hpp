// The recorder: the actor that owns the message log's writer. Actors send it every message that
// crosses an actor boundary and matters for a result; it appends them in arrival order.
//
// It runs detached (a thread of its own) because appends are blocking file I/O that must not
// stall the scheduler's worker threads.
#pragma once

#include <memory>
#include <string>

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include "actors/message_log/writer.hpp"
#include "config/settings.hpp"
#include "messages/atoms.hpp"
#include "messages/codec.hpp"

namespace cuda_agent {


// One message as the log stores it: who sent what to whom, the payload already msgpack-encoded.
struct recorded_message {
  std::string sender;
  std::string receiver;
  std::string type;
  std::string episode;  // empty when the message belongs to no episode
  std::string payload;
};

CUDA_AGENT_FIELDS(recorded_message, sender, receiver, type, episode, payload);

template <class T>
recorded_message make_record(std::string sender, std::string receiver, std::string episode,
                             const T& message) {
  return {std::move(sender), std::move(receiver), std::string{type_name_of<T>()},
          std::move(episode), encode(message)};
}

// Writer options from the log.* settings; `dir` overrides log.dir when not empty.
message_log::writer_options log_writer_options(const settings& config,
                                               const std::filesystem::path& dir = {});

// Registers the recorder's own message type; call beside register_message_types on every node.
void add_recorder_types(caf::actor_system_config& cfg);

// Spawns the recorder around an opened writer (opening first makes a bad log directory an error
// of the caller, not a dead actor). Understands:
//   (record_atom, recorded_message) -> void       appends it (send it; no need to wait)
//   (flush_atom) -> void                          forces the log to stable storage
caf::actor spawn_recorder(caf::actor_system& system, message_log::writer writer);

}  // namespace cuda_agent
