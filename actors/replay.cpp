#include "actors/replay.hpp"

#include <deque>
#include <memory>
#include <mutex>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "actors/recorder.hpp"
#include "messages/codec.hpp"
#include "messages/incidental.hpp"
#include "messages/roles.hpp"

namespace cuda_agent {
namespace {

using namespace std::chrono_literals;

// The answers an episode received, per kind, in the order it received them.
struct recorded_answers {
  std::deque<policy_response> policy;
  std::deque<tool_result> tools;
  std::deque<compile_result> compiles;
  std::deque<verify_result> verdicts;
  std::deque<profile_result> timings;
  std::deque<reward_record> rewards;
  bool ended_by_timeout = false;
};

recorded_answers collect_answers(const std::vector<message_log::record>& records) {
  recorded_answers a;
  for (const auto& r : records) {
    if (r.receiver != role::episode && r.type != "episode_ended") continue;
    if (r.type == "policy_response") a.policy.push_back(decode<policy_response>(r.payload));
    else if (r.type == "tool_result" && r.sender == role::tools) a.tools.push_back(decode<tool_result>(r.payload));
    else if (r.type == "compile_result") a.compiles.push_back(decode<compile_result>(r.payload));
    else if (r.type == "verify_result") a.verdicts.push_back(decode<verify_result>(r.payload));
    else if (r.type == "profile_result") a.timings.push_back(decode<profile_result>(r.payload));
    else if (r.type == "reward_record" && r.sender == role::gpu) a.rewards.push_back(decode<reward_record>(r.payload));
    else if (r.type == "episode_ended")
      a.ended_by_timeout = decode<episode_ended>(r.payload).reason == termination::timeout;
  }
  return a;
}

struct replay_source_state {
  recorded_answers answers;
  static inline const char* name = "replay_source";
};
// It stands in for every peer of the episode at once: the policy, the tools and both pools.
using replay_source_actor = caf::typed_actor<
    caf::replies_to<policy_request>::with<policy_response>,
    caf::replies_to<policy_stats_atom>::with<policy_stats>,
    caf::replies_to<tool_request>::with<tool_result>,
    caf::replies_to<compile_job>::with<compile_result>,
    caf::replies_to<verify_job>::with<verify_result>,
    caf::replies_to<profile_job>::with<profile_result>,
    caf::replies_to<evaluate_job>::with<reward_record>,
    caf::replies_to<pool_stats_atom>::with<pool_stats>, caf::reacts_to<expire_atom, uint64_t>>;
using replay_source_self = replay_source_actor::stateful_pointer<replay_source_state>;

// Hands out the next recorded answer of a kind. Where the recording stops and the original ran
// out of time, the deadline is what happened next: it is fed to the episode before the error.
template <class T>
caf::result<T> next_answer(replay_source_self self, std::deque<T>& queue, const char* kind) {
  if (!queue.empty()) {
    T answer = std::move(queue.front());
    queue.pop_front();
    return answer;
  }
  if (self->state.answers.ended_by_timeout)
    self->send(caf::actor_cast<episode_actor>(self->current_sender()), deadline_atom::value);
  return caf::make_error(caf::sec::runtime_error,
                         fmt::format("the log holds no further {} for this episode", kind));
}

replay_source_actor::behavior_type replay_source(replay_source_self self, recorded_answers answers) {
  self->state.answers = std::move(answers);
  auto& a = self->state.answers;
  return {
      [=, &a](const policy_request&) { return next_answer(self, a.policy, "policy_response"); },
      [=, &a](const tool_request&) { return next_answer(self, a.tools, "tool_result"); },
      [=, &a](const compile_job&) { return next_answer(self, a.compiles, "compile_result"); },
      [=, &a](const verify_job&) { return next_answer(self, a.verdicts, "verify_result"); },
      [=, &a](const profile_job&) { return next_answer(self, a.timings, "profile_result"); },
      [=, &a](const evaluate_job&) { return next_answer(self, a.rewards, "reward_record"); },
      // A replay has no credit to report or expire.
      [](policy_stats_atom) { return policy_stats{}; },
      [](pool_stats_atom) { return pool_stats{}; },
      [](expire_atom, uint64_t) {},
  };
}

// Collects what the replayed episode records, in place of the recorder.
struct captured {
  std::mutex mutex;
  std::vector<recorded_message> messages;
};

recorder_actor::behavior_type capture(recorder_actor::pointer, std::shared_ptr<captured> sink) {
  return {
      [sink](record_atom, const recorded_message& m) {
        std::lock_guard<std::mutex> lock{sink->mutex};
        sink->messages.push_back(m);
      },
      [](flush_atom) {},
  };
}

// A message as compared (messages/incidental.hpp): the fields that are readings of a clock are
// dropped; in live replay, so are the measured ones, decimal numbers in text are masked and the
// old workdir reads as the new one. What is left decides the episode's outcome.
struct normaliser {
  bool live = false;
  std::string old_workdir, new_workdir;

  std::string operator()(const std::string& sender, const std::string& receiver,
                         const std::string& type, const std::string& payload) const {
    auto json = msgpack_to_json(payload);
    const auto& incidental = incidental_fields_of(type);
    for (const auto& name : incidental.clock) json.erase(name);
    if (live) {
      for (const auto& name : incidental.measured) json.erase(name);
      normalise_text(json);
    }
    return fmt::format("{}>{} {} {}", sender, receiver, type, json.dump());
  }

  void normalise_text(nlohmann::json& json) const {
    if (json.is_structured()) {
      for (auto& element : json) normalise_text(element);
      return;
    }
    if (!json.is_string()) return;
    auto text = json.get<std::string>();
    for (auto at = text.find(old_workdir); !old_workdir.empty() && at != std::string::npos;
         at = text.find(old_workdir, at + new_workdir.size()))
      text.replace(at, old_workdir.size(), new_workdir);
    json = mask_measured_numbers(text);
  }
};

std::string shorten(const std::string& text) {
  constexpr std::size_t limit = 400;
  return text.size() <= limit ? text : text.substr(0, limit) + "...";
}

replay_report run_replay(caf::actor_system& system, const std::vector<message_log::record>& records,
                         episode_config config, episode_peers peers, const normaliser& normalise) {
  replay_report report;
  report.episode_id = config.episode_id;
  report.recorded = records.size();
  auto sink = std::make_shared<captured>();
  peers.recorder = system.spawn(capture, sink);
  // Generous: hermetic replay never waits on real work; live replay waits on real jobs.
  const auto limit = config.wall_clock + config.job_timeout * 2 + 60s;
  auto episode = spawn_episode(system, config, peers);
  {
    caf::scoped_actor self{system};
    self->request(episode, limit, start_atom::value)
        .receive([](episode_ended&, reward_record&, trajectory&) {},
                 [&](caf::error& e) { report.error = "the replayed episode failed: " + system.render(e); });
    self->request(peers.recorder, 10s, flush_atom::value).receive([] {}, [](caf::error&) {});
    self->send_exit(peers.recorder, caf::exit_reason::user_shutdown);
  }
  std::lock_guard<std::mutex> lock{sink->mutex};
  const auto& replayed = sink->messages;
  report.replayed = replayed.size();
  report.incomplete = std::none_of(records.begin(), records.end(), [](const message_log::record& r) {
    return r.type == "episode_ended";
  });
  // Past the end of an incomplete episode's records the replay runs out of recorded answers;
  // what it sends there has nothing to be compared with.
  const std::size_t n = report.incomplete ? records.size() : std::max(records.size(), replayed.size());
  for (std::size_t i = 0; i < n; ++i) {
    const auto expected = i < records.size()
                              ? normalise(records[i].sender, records[i].receiver, records[i].type,
                                          records[i].payload)
                              : std::string{"<end>"};
    const auto actual = i < replayed.size()
                            ? normalise(replayed[i].sender, replayed[i].receiver, replayed[i].type,
                                        replayed[i].payload)
                            : std::string{"<end>"};
    if (expected == actual) continue;
    if (report.differing++ == 0) {
      report.first_divergence = i;
      report.expected = shorten(expected);
      report.actual = shorten(actual);
    }
  }
  report.identical = report.differing == 0 && (report.error.empty() || report.incomplete);
  return report;
}

template <class T>
T first_of(const std::vector<message_log::record>& records, const char* type) {
  for (const auto& r : records)
    if (r.type == type) return decode<T>(r.payload);
  throw std::runtime_error{fmt::format("the episode's records hold no {}", type)};
}

}  // namespace

std::vector<std::string> recorded_episodes(const std::vector<message_log::record>& log) {
  std::vector<std::string> ids;
  for (const auto& r : log)
    if (r.type == "episode_started" && std::find(ids.begin(), ids.end(), r.episode) == ids.end())
      ids.push_back(r.episode);
  return ids;
}

std::vector<message_log::record> episode_records(const std::vector<message_log::record>& log,
                                                 const std::string& episode_id) {
  std::vector<message_log::record> mine;
  for (const auto& r : log)
    if (r.episode == episode_id && r.receiver != role::node && r.sender != role::node) mine.push_back(r);
  return mine;
}

episode_config recorded_config(const std::vector<message_log::record>& records) {
  const auto started = first_of<episode_started>(records, "episode_started");
  episode_config c;
  c.task = first_of<task_spec>(records, "task_spec");
  c.episode_id = started.episode_id;
  c.policy_name = started.policy;
  c.device = started.device;
  c.arch = started.arch;
  c.attempt = started.attempt;
  c.weight_version = started.weight_version;
  c.workdir = started.workdir;
  c.task_path = started.task_path;
  c.max_turns = started.max_turns;
  c.context_tokens = started.context_tokens;
  c.wall_clock = std::chrono::milliseconds{started.wall_clock_ms};
  c.judging = started.judging;
  for (const auto& r : records) {
    if (r.type != "policy_request") continue;
    const auto first = decode<policy_request>(r.payload);
    if (!first.messages.empty()) c.system_prompt = first.messages.front().content;
    c.max_tokens_per_turn = first.max_tokens;
    c.temperature = first.temperature;
    c.top_p = first.top_p;
    break;
  }
  return c;
}

replay_report replay_hermetic(caf::actor_system& system,
                              const std::vector<message_log::record>& records) {
  replay_report report;
  episode_config config;
  recorded_answers answers;
  try {
    config = recorded_config(records);
    answers = collect_answers(records);
  } catch (const std::exception& e) {
    report.error = e.what();
    report.recorded = records.size();
    if (!records.empty()) report.episode_id = records.front().episode;
    return report;
  }
  config.enforce_wall_clock = false;  // the recorded deadline is fed by the source instead
  config.policy_timeout = config.job_timeout = 60s;
  auto source = system.spawn(replay_source, std::move(answers));
  report = run_replay(system, records, config, {source, source, source, source, {}}, normaliser{});
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
  return report;
}

replay_report replay_live(caf::actor_system& system, const std::vector<message_log::record>& records,
                          const episode_config& fresh, const live_peers_factory& make_peers) {
  auto answers = collect_answers(records);
  recorded_answers policy_only;
  policy_only.policy = std::move(answers.policy);
  policy_only.ended_by_timeout = answers.ended_by_timeout;
  auto source = system.spawn(replay_source, std::move(policy_only));
  auto peers = make_peers(fresh);
  peers.policy = source;
  // Everything of an episode lives under its directory, the workdir's parent.
  normaliser normalise{true, recorded_config(records).workdir.parent_path().string(),
                       fresh.workdir.parent_path().string()};
  auto report = run_replay(system, records, fresh, peers, normalise);
  caf::anon_send_exit(source, caf::exit_reason::user_shutdown);
  return report;
}

}  // namespace cuda_agent
