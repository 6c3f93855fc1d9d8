#include "actors/rollout_manager.hpp"

#include <map>
#include <utility>
#include <tuple>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/credit_queue.hpp"
#include "actors/recorder.hpp"
#include "actors/supervisor.hpp"
#include "messages/episode_id.hpp"

namespace cuda_agent {
namespace {

struct pending_episode {
  int32_t index = 0;
  int32_t attempt = 0;
  std::size_t credit = 0;  // the running episode's credit, once admitted
};

struct rollout_state {
  rollout_plan plan;
  rollout_services services;
  std::shared_ptr<rollout_results> results;
  credit_queue<pending_episode> admission;  // a credit is a running episode
  int32_t done = 0;
  int32_t retried = 0;
  int32_t histogram[4] = {0, 0, 0, 0};  // rewards -1, 1, 2, 3
  int32_t admitted = 0;          // first attempts started (the staleness bound counts these)
  int64_t batches_trained = 0;   // the learner's last learner_update.step
  std::map<std::string, std::pair<episode_actor, tools_actor>> live;  // episode id -> (episode, tools)
  caf::typed_response_promise<int32_t> finished;
  bool finishing = false;  // the last episode has settled; the log is being flushed
  static inline const char* name = "rollout_manager";
};
using rollout_self = rollout_actor::stateful_pointer<rollout_state>;

void admit(rollout_self self);
void finish(rollout_self self);

std::string episode_id_of(const rollout_plan& plan, const pending_episode& p) {
  return format_episode_id({plan.run_id, p.index, plan.resume, p.attempt});
}

void count(rollout_state& st, const episode_summary& summary) {
  const int32_t r = summary.verdict.reward;
  ++st.histogram[r <= 0 ? 0 : std::min(r, 3)];
  ++st.done;
}

// The trajectory of an episode that never produced one (it failed before or outside its actor).
trajectory failed_trajectory(const episode_summary& s) {
  trajectory t;
  t.episode_id = s.episode_id;
  t.task_id = s.task.id;
  t.reason = termination::infrastructure_failure;
  return t;
}

void settle(rollout_self self, const pending_episode& p, episode_summary summary,
            trajectory record) {
  auto& st = self->state;
  const bool infrastructure = summary.ended.reason == termination::infrastructure_failure;
  if (infrastructure && p.attempt < st.plan.retries) {
    spdlog::warn("{}: infrastructure failure ({}); retrying", summary.episode_id,
                 summary.ended.error);
    ++st.retried;
    st.admission.push({p.index, p.attempt + 1}, {}, /*front=*/true);
    return;
  }
  count(st, summary);
  if (st.services.learner) self->send(st.services.learner, std::move(record));
  summary.index = p.index;
  summary.attempts = p.attempt + 1;
  std::lock_guard<std::mutex> lock{st.results->mutex};
  st.results->episodes.push_back(std::move(summary));
}

episode_summary infrastructure_failure(const std::string& id, const task_spec& task,
                                       std::string why) {
  episode_summary s;
  s.episode_id = id;
  s.task = task;
  s.ended.episode_id = id;
  s.ended.reason = termination::infrastructure_failure;
  s.ended.error = why;
  s.verdict.episode_id = id;
  s.verdict.error = std::move(why);
  return s;
}

// A started episode that failed outside the agent: its tools stop, and it is retried or reported.
void abandon(rollout_self self, const pending_episode& p, const tools_actor& tools,
             const std::string& id, const task_spec& task, std::string why) {
  self->send_exit(tools, caf::exit_reason::user_shutdown);
  self->state.admission.release(p.credit);
  auto summary = infrastructure_failure(id, task, std::move(why));
  auto record = failed_trajectory(summary);
  settle(self, p, std::move(summary), std::move(record));
  admit(self);
}

void launch_episode(rollout_self self, const pending_episode& p, const episode_config& config,
                    const tools_actor& tools, const policy_actor& policy) {
  auto& st = self->state;
  if (!st.finished.pending()) {  // the run stopped while this episode was being set up
    self->send_exit(tools, caf::exit_reason::user_shutdown);
    return;
  }
  const auto id = config.episode_id;
  const auto task = config.task;
  auto episode = spawn_episode(self->system(), config,
                               {policy, tools, st.services.compiler, st.services.gpu, st.services.recorder});
  st.live[id] = {episode, tools};
  // Past every budget of the episode, something is wrong with it, not with the agent.
  const auto limit = config.wall_clock + config.job_timeout * 2 + config.policy_timeout;
  self->request(episode, limit, start_atom::value)
      .then(
          [=](episode_ended& ended, reward_record& verdict, trajectory& record) {
            self->state.live.erase(id);
            self->send_exit(tools, caf::exit_reason::user_shutdown);
            if (!self->state.finished.pending()) return;  // the run was stopped
            self->state.admission.release(p.credit);
            settle(self, p, {id, p.index, task, 1, ended, verdict}, std::move(record));
            admit(self);
          },
          [=](caf::error& error) {
            self->state.live.erase(id);
            if (!self->state.finished.pending()) return;  // the run was stopped
            self->send_exit(episode, caf::exit_reason::user_shutdown);
            abandon(self, p, tools, id, task, "the episode actor failed: " + self->system().render(error));
          });
}

void start_episode(rollout_self self, pending_episode p) {
  auto& st = self->state;
  const auto& task = st.plan.tasks[static_cast<std::size_t>(p.index) % st.plan.tasks.size()];
  const auto id = episode_id_of(st.plan, p);
  episode_config config = st.plan.base;
  config.episode_id = id;
  config.task = task;
  config.attempt = p.attempt;
  tools_actor tools;
  try {
    const auto paths = prepare_episode_dir(st.plan.episodes_dir, id, task, st.plan.sources);
    config.workdir = paths.workdir;
    config.task_path = paths.task_path;
    tools = st.services.make_tools(config);
  } catch (const std::exception& e) {
    st.admission.release(p.credit);
    auto summary = infrastructure_failure(id, task, e.what());
    auto record = failed_trajectory(summary);
    settle(self, p, std::move(summary), std::move(record));
    return;
  }
  if (!st.services.policy_supervisor) {
    launch_episode(self, p, config, tools, st.services.policy);
    return;
  }
  request_child<policy_actor>(
      self, st.services.policy_supervisor, std::chrono::seconds{30}, "policy",
      [=](const policy_actor& policy) { launch_episode(self, p, config, tools, policy); },
      [=](caf::error& error) {
        abandon(self, p, tools, id, task, "no policy actor: " + self->system().render(error));
      });
}

// Whether `next` may start now under the learner's staleness bound (rollout_manager.hpp).
bool within_staleness(const rollout_state& st, const pending_episode& next) {
  if (!st.services.learner || next.attempt > 0) return true;
  const int64_t batch = st.admitted / std::max<int32_t>(1, st.plan.batch_episodes);
  return batch <= st.batches_trained + st.plan.staleness;
}

void admit(rollout_self self) {
  auto& st = self->state;
  const auto may_start = [&st](const pending_episode& next) { return within_staleness(st, next); };
  while (auto granted = st.admission.next(may_start)) {
    auto next = granted->item;
    next.credit = granted->credit;
    if (next.attempt == 0) ++st.admitted;
    start_episode(self, next);
  }
  if (st.admission.in_use() == 0 && st.admission.waiting() == 0 && st.finished.pending())
    finish(self);
}

caf::error recorder_stopped(rollout_self self, const caf::error& reason) {
  const auto why = "the recorder stopped (" + self->system().render(reason) +
                   "), so the message log is incomplete; the rollout stops";
  spdlog::error("{}", why);
  return caf::make_error(caf::sec::runtime_error, why);
}

// A run is done only once its log is on stable storage: a recorder that died while the last
// episodes settled (its down message still on the way) fails the flush, and so the run.
void finish(rollout_self self) {
  auto& st = self->state;
  if (st.finishing) return;
  st.finishing = true;
  if (!st.services.recorder) {
    st.finished.deliver(st.done);
    return;
  }
  self->request(st.services.recorder, std::chrono::seconds{60}, flush_atom::value)
      .then(
          [=] {
            if (self->state.finished.pending()) self->state.finished.deliver(self->state.done);
          },
          [=](caf::error& error) {
            if (self->state.finished.pending())
              self->state.finished.deliver(recorder_stopped(self, error));
          });
}

rollout_actor::behavior_type rollout_manager(rollout_self self, rollout_plan plan,
                                             rollout_services services,
                                             std::shared_ptr<rollout_results> results) {
  auto& st = self->state;
  st.plan = std::move(plan);
  st.services = std::move(services);
  st.results = std::move(results);
  st.admission = credit_queue<pending_episode>{
      static_cast<std::size_t>(std::max<int32_t>(1, st.plan.concurrency))};
  // Without its log a run can be neither inspected nor replayed: when the recorder dies (a full
  // disk ends it, recorder.hpp), the run stops with an error that says so, and so do its episodes.
  // Without its learner, a training run's admission would wait for ever: it stops too.
  if (st.services.recorder) self->monitor(st.services.recorder);
  if (st.services.learner) self->monitor(st.services.learner);
  if (st.services.recorder || st.services.learner) {
    self->set_down_handler([=](caf::down_msg& down) {
      auto& st = self->state;
      if (!st.finished.pending()) return;
      caf::error error;
      if (st.services.recorder && down.source == st.services.recorder.address()) {
        error = recorder_stopped(self, down.reason);
      } else if (st.services.learner && down.source == st.services.learner.address()) {
        const auto why = "the learner stopped (" + self->system().render(down.reason) + "); the rollout stops";
        spdlog::error("{}", why);
        error = caf::make_error(caf::sec::runtime_error, why);
      } else {
        return;
      }
      for (const auto& [id, actors] : st.live) {
        self->send_exit(actors.first, caf::exit_reason::user_shutdown);
        self->send_exit(actors.second, caf::exit_reason::user_shutdown);
      }
      st.live.clear();
      st.admission.clear_waiting();
      st.finished.deliver(std::move(error));
    });
  }
  return {
      [=](run_atom) -> caf::result<int32_t> {
        auto& st = self->state;
        if (st.plan.tasks.empty())
          return caf::make_error(caf::sec::runtime_error, "the rollout has no tasks");
        st.finished = self->make_response_promise<int32_t>();
        std::vector<bool> settled(static_cast<std::size_t>(st.plan.episodes), false);
        {
          std::lock_guard<std::mutex> lock{st.results->mutex};
          for (const auto& s : st.plan.settled) {
            if (s.index >= 0 && s.index < st.plan.episodes) settled[static_cast<std::size_t>(s.index)] = true;
            count(st, s);
            st.results->episodes.push_back(s);
          }
        }
        for (int32_t i = 0; i < st.plan.episodes; ++i)
          if (!settled[static_cast<std::size_t>(i)]) st.admission.push({i, 0});
        admit(self);
        return st.finished;
      },
      [=](learner_update& update) {
        self->state.batches_trained = update.step;
        admit(self);
      },
      [=](status_atom) {
        const auto& st = self->state;
        return rollout_status{st.done, static_cast<int32_t>(st.admission.in_use()),
                              static_cast<int32_t>(st.admission.waiting()), st.retried,
                              {std::begin(st.histogram), std::end(st.histogram)}};
      },
  };
}

}  // namespace

rollout_actor spawn_rollout_manager(caf::actor_system& system, rollout_plan plan,
                                 rollout_services services,
                                 std::shared_ptr<rollout_results> results) {
  return system.spawn(rollout_manager, std::move(plan), std::move(services), std::move(results));
}

}  // namespace cuda_agent
