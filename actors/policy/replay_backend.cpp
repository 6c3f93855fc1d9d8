#include "actors/policy/replay_backend.hpp"

#include "actors/message_log/reader.hpp"
#include "messages/codec.hpp"

namespace cuda_agent::policy {

replay_backend::replay_backend(std::filesystem::path log_dir, std::string episode)
    : log_dir_{std::move(log_dir)}, episode_{std::move(episode)} {
  std::error_code ec;
  if (log_dir_.empty() || !std::filesystem::is_directory(log_dir_, ec))
    throw config_error{"policy.replay_log '" + log_dir_.string() +
                       "' is not a message log directory; set it to the log.dir of the run to "
                       "replay"};
}

const replay_backend::turns& replay_backend::episode_turns(const std::string& episode) {
  if (const auto it = episodes_.find(episode); it != episodes_.end()) return it->second;
  message_log::record_filter filter;
  filter.episode = episode;
  filter.type = std::string{type_name_of<policy_response>()};
  const auto log = message_log::read_all(log_dir_, filter);
  if (log.status == message_log::read_status::corrupt)
    throw policy_error{"replay: the log " + log_dir_.string() + " is corrupt (" +
                       log.problem.message() + "); it cannot be replayed past that point"};
  turns found;
  for (const auto& rec : log.records) {
    policy_response response;
    try {
      response = decode<policy_response>(rec.payload);
    } catch (const decode_error& e) {
      throw policy_error{"replay: record " + std::to_string(rec.seq) + " of " + log_dir_.string() +
                         " is not a policy_response: " + e.what()};
    }
    found[response.turn] = std::move(response);  // a retried turn: the last answer counts
  }
  return episodes_.emplace(episode, std::move(found)).first->second;
}

policy_response replay_backend::complete(const policy_request& request) {
  const std::string& episode = episode_.empty() ? request.episode_id : episode_;
  std::lock_guard<std::mutex> lock{mutex_};
  const auto& recorded = episode_turns(episode);
  const auto it = recorded.find(request.turn);
  if (it == recorded.end()) {
    std::string held = recorded.empty() ? "none"
                                        : std::to_string(recorded.begin()->first) + ".." +
                                              std::to_string(recorded.rbegin()->first);
    throw policy_error{"replay: the log " + log_dir_.string() + " has no policy_response for " +
                       "episode '" + episode + "' turn " + std::to_string(request.turn) +
                       " (turns it holds: " + held + "); replay the episode that was recorded, "
                       "or set policy.replay_episode"};
  }
  policy_response response = it->second;
  response.episode_id = request.episode_id;  // the replaying episode may have a new id
  return response;
}

}  // namespace cuda_agent::policy
