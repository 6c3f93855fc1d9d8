// The message log's envelope: one message as the recorder (actors/recorder.hpp) receives and
// stores it, who sent what to whom, the payload already msgpack-encoded. Not a protocol type of
// its own: its payload is one.
#pragma once

#include <string>

#include "messages/codec.hpp"

namespace cuda_agent {

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

}  // namespace cuda_agent
