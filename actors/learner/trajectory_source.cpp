#include "actors/learner/trajectory_source.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <map>
#include <system_error>
#include <utility>

#include "actors/message_log/reader.hpp"
#include "messages/codec.hpp"
#include "messages/roles.hpp"

namespace cuda_agent::learner {
namespace {

namespace fs = std::filesystem;
namespace ml = cuda_agent::message_log;

constexpr const char* kNeedsTokens =
    "roll out with a policy that returns its prompt and sampled tokens: --policy torch, or a demo "
    "policy with policy.model_dir set";

void check_turn(const trajectory& t, const trajectory_turn& turn) {
  if (turn.token_ids.size() == turn.logprobs.size() &&
      turn.token_ids.size() == turn.loss_mask.size())
    return;
  throw learner_error{fmt::format(
      "episode {} turn {}: {} token ids, {} log-probabilities and {} loss-mask entries; a turn "
      "needs one of each per token (a policy that returned no log-probabilities?): {}",
      t.episode_id, turn.turn, turn.token_ids.size(), turn.logprobs.size(), turn.loss_mask.size(),
      kNeedsTokens)};
}

// What the records of one log contribute, before duplicates across all logs are resolved.
struct recorded_trajectory {
  trajectory message;
  std::string where;  // "<log> record <seq>", for the skipped lines
};

void read_log(const fs::path& dir, std::vector<recorded_trajectory>& out,
              std::vector<std::string>& skipped) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw learner_error{fmt::format(
        "message log {} is not a directory; pass the log.dir of the run whose trajectories to "
        "train on",
        dir.string())};
  ml::record_filter filter;
  filter.type = type_name_of<trajectory>();
  try {
    auto log = ml::reader::open(dir, filter);
    ml::record_view rec;
    ml::read_status status;
    while ((status = log.next(rec)) == ml::read_status::record) {
      if (rec.sender != role::episode || rec.receiver != role::learner) continue;
      const auto where = fmt::format("{} record {}", dir.string(), rec.seq);
      try {
        out.push_back({decode<trajectory>(rec.payload), where});
      } catch (const decode_error& e) {
        throw learner_error{fmt::format("message log {} (episode {}): the trajectory does not "
                                        "decode: {}",
                                        where, rec.episode, e.what())};
      }
    }
    if (status == ml::read_status::corrupt)
      throw learner_error{fmt::format(
          "message log {} is corrupt: {}; no trajectory after it can be trusted: train on the "
          "log's good records by removing the damaged segment, or leave the log out",
          dir.string(), log.problem().message())};
    if (status == ml::read_status::incomplete_tail)
      skipped.push_back(fmt::format("{}: ends inside a record ({}); the records before it were read",
                                    dir.string(), log.problem().message()));
  } catch (const ml::log_error& e) {
    throw learner_error{fmt::format("message log {} cannot be read: {}", dir.string(), e.what())};
  }
}

}  // namespace

episode_sample sample_of(const trajectory& t) {
  episode_sample s;
  s.episode_id = t.episode_id;
  s.task_id = t.task_id;
  s.reward = t.reward;
  s.reason = t.reason;
  s.turns = static_cast<int32_t>(t.turns.size());
  std::size_t size = 0;
  for (const auto& turn : t.turns) {
    check_turn(t, turn);
    size += turn.token_ids.size();
  }
  if (size == 0)
    throw learner_error{fmt::format(
        "episode {} holds no tokens: its policy returned none (an OpenAI-compatible server "
        "without token ids); {}",
        t.episode_id, kNeedsTokens)};
  const auto& first = t.turns.front();
  if (first.loss_mask.empty() || first.loss_mask.front() != 0)
    throw learner_error{fmt::format(
        "episode {} starts without its prompt: its policy returned only the sampled tokens (an "
        "OpenAI-compatible server), so the sequence the model saw is unknown; {}",
        t.episode_id, kNeedsTokens)};
  s.tokens.reserve(size);
  s.loss_mask.reserve(size);
  s.rollout_logprobs.reserve(size);
  s.turn_versions.reserve(t.turns.size());
  for (const auto& turn : t.turns) {
    for (std::size_t i = 0; i < turn.token_ids.size(); ++i) {
      const uint8_t mask = turn.loss_mask[i] != 0;
      s.tokens.push_back(turn.token_ids[i]);
      s.loss_mask.push_back(mask);
      s.rollout_logprobs.push_back(mask ? turn.logprobs[i] : 0.0f);
    }
    s.turn_versions.push_back(turn.weight_version);
  }
  return s;
}

log_trajectories read_trajectories(const std::vector<std::filesystem::path>& log_dirs) {
  std::vector<recorded_trajectory> recorded;
  log_trajectories result;
  for (const auto& dir : log_dirs) read_log(dir, recorded, result.skipped);

  // Infrastructure failures go first, so that a retry's failure never displaces a good record.
  std::vector<recorded_trajectory> usable;
  for (auto& r : recorded) {
    if (r.message.reason == termination::infrastructure_failure)
      result.skipped.push_back(fmt::format(
          "{}: episode {} ended in an infrastructure failure, which says nothing about the agent",
          r.where, r.message.episode_id));
    else
      usable.push_back(std::move(r));
  }
  std::map<std::string, std::size_t> last;  // episode id -> index of its last usable record
  for (std::size_t i = 0; i < usable.size(); ++i) last[usable[i].message.episode_id] = i;
  for (std::size_t i = 0; i < usable.size(); ++i) {
    const auto& id = usable[i].message.episode_id;
    const auto kept = last.at(id);
    if (kept == i)
      result.trajectories.push_back(std::move(usable[i].message));
    else
      result.skipped.push_back(fmt::format("{}: episode {} is recorded again at {}; the last is kept",
                                           usable[i].where, id, usable[kept].where));
  }
  return result;
}

}  // namespace cuda_agent::learner
