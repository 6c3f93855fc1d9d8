// The recorder: the actor that owns the message log's writer. Actors send it every message that
// crosses an actor boundary and matters for a result; it appends them in arrival order.
//
// It runs detached (a thread of its own) because appends are blocking file I/O that must not
// stall the scheduler's worker threads.
#pragma once

#include <memory>
#include <string>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include "actors/message_log/writer.hpp"
#include "config/settings.hpp"
#include "messages/atoms.hpp"
#include "messages/interfaces.hpp"
#include "messages/recorded_message.hpp"

namespace cuda_agent {


// Writer options from the log.* settings; `dir` overrides log.dir when not empty.
message_log::writer_options log_writer_options(const settings& config,
                                               const std::filesystem::path& dir = {});

// Registers the recorder's own message type; call beside register_message_types on every node.
void add_recorder_types(caf::actor_system_config& cfg);

// Spawns the recorder around an opened writer (opening first makes a bad log directory an error
// of the caller, not a dead actor). Send it records without waiting; request (flush) to wait
// until they are on stable storage (recorder_actor, messages/interfaces.hpp).
recorder_actor spawn_recorder(caf::actor_system& system, message_log::writer writer);

}  // namespace cuda_agent
