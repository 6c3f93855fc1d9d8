#include "actors/recorder.hpp"

#include <caf/all.hpp>

namespace cuda_agent {
namespace {

struct recorder_state {
  std::shared_ptr<message_log::writer> writer;
  static inline const char* name = "recorder";
};

recorder_actor::behavior_type recorder(recorder_actor::stateful_pointer<recorder_state> self,
                                      std::shared_ptr<message_log::writer> writer) {
  self->state.writer = std::move(writer);
  // An append that fails (a full disk) throws, which ends the recorder with an error: its
  // supervisor decides what happens next, and no record is half-written (writer.hpp).
  return {
      // Returns nothing: producers send records without waiting, and a value returned to a
      // plain send would come back to them as an unexpected message.
      [=](record_atom, const recorded_message& m) {
        self->state.writer->append(m.sender, m.receiver, m.type, m.episode, m.payload);
      },
      [=](flush_atom) { self->state.writer->flush(); },
  };
}

}  // namespace

message_log::writer_options log_writer_options(const settings& config,
                                               const std::filesystem::path& dir) {
  message_log::writer_options options;
  options.dir = dir.empty() ? std::filesystem::path{config.get_string("log.dir")} : dir;
  options.segment_bytes = static_cast<uint64_t>(config.get_int("log.segment_bytes"));
  // The schema admits only the three policy names, so parsing cannot fail here.
  options.fsync = *message_log::parse_fsync_policy(config.get_string("log.fsync"));
  options.fsync_interval = std::chrono::milliseconds{config.get_int("log.fsync_interval_ms")};
  return options;
}

void add_recorder_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<recorded_message>(type_name_of<recorded_message>());
}

recorder_actor spawn_recorder(caf::actor_system& system, message_log::writer writer) {
  auto shared = std::make_shared<message_log::writer>(std::move(writer));
  return system.spawn<caf::detached>(recorder, std::move(shared));
}

}  // namespace cuda_agent
