// The pool building block behind the compiler pool and the GPU pool: worker actors (compiler
// workers, GPU profiler slots), each running one job at a time. A worker's turn is the credit
// (actors/credit_queue.hpp): a job waits in a bounded queue until a worker is free, so nothing
// reaches a worker's mailbox without a grant, however many episodes ask at once.
//
// The pool owns every deadline: a job that waits longer than max_wait, or finds the queue full,
// is rejected with an error that says so; a job that runs longer than job_timeout gives its
// worker back with an error. Requesters are monitored: a requester that dies while its job waits
// loses its place, so a crashed episode never holds credit. The pool's own workers belong to a
// supervisor and are looked up by name before each job, so a restarted worker is used without
// the pool knowing.
//
// Nodes (actors/cluster/) add workers while the pool runs: (add_workers, node, handle, n) adds n
// credits that send their jobs to `handle`. When the node is dropped, or the handle dies (the
// connection to the node was lost), its credits are retired and the jobs they held go back to the
// front of the queue to run elsewhere, at most max_requeues times each; both are logged. Every
// run of a job is an attempt with its own number, and only the current attempt may answer: an
// answer that comes back from a node after its job was requeued is logged and dropped, so a job
// is never answered twice.
//
// Failures of the pool itself (rejection, timeout, a local worker that died mid-job) reach the
// requester as a caf::error: they are infrastructure failures, never a verdict on the candidate.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/credit_queue.hpp"
#include "actors/supervisor.hpp"
#include "messages/interfaces.hpp"
#include "messages/roles.hpp"

namespace cuda_agent {

struct job_pool_options {
  std::string name = "pool";
  supervisor_actor supervisor;       // owns the workers
  std::vector<std::string> workers;  // their names under the supervisor; one job each at a time
  std::size_t max_waiting = 256;
  std::chrono::milliseconds max_wait{std::chrono::minutes{30}};
  std::chrono::milliseconds job_timeout{std::chrono::minutes{10}};
  // With no worker of its own, a pool open to nodes lets jobs wait (max_wait) for a node's
  // workers instead of refusing them.
  bool open_to_nodes = false;
  int32_t max_requeues = 3;  // times one job may be taken back from lost nodes
  recorder_actor recorder;   // where requeues and late answers are logged (none when empty)
  std::string role;          // the pool in the log: role::compiler or role::gpu
};

// The node name of a pool's own workers in pool_stats.
inline constexpr const char* local_node = "local";

namespace detail {

template <class Worker>
struct waiting_job {
  std::function<void(const Worker& worker, std::size_t slot, uint64_t attempt)> run;
  std::function<void(const std::string& why)> reject;
  std::string job_id;
  std::string episode_id;
  caf::actor_addr requester;
  int32_t requeues = 0;
};

// A credit's worker: one of the pool's own (looked up by name under the supervisor) or a node's.
template <class Worker>
struct pool_slot {
  std::string worker;       // the supervisor's child name; empty for a node's
  Worker remote;            // a node's worker handle; empty for the pool's own
  std::string node = local_node;
  uint64_t attempt = 0;     // the attempt running on it; 0 while idle or retired
  std::optional<waiting_job<Worker>> running;  // kept to requeue it if the node goes
};

struct node_counts {
  int64_t done = 0;
  int64_t requeued = 0;
};

template <class Worker>
struct job_pool_state {
  job_pool_options options;
  credit_queue<waiting_job<Worker>> queue;  // a credit is a worker slot
  std::vector<pool_slot<Worker>> slots;     // by credit number
  std::map<std::string, node_counts> counts;
  uint64_t last_attempt = 0;
  int32_t rejected = 0;
  static inline const char* name = "job_pool";
};

template <class... Jobs>
using job_pool_self = typename elastic_pool_actor<Jobs...>::template stateful_pointer<
    job_pool_state<job_worker_actor<Jobs...>>>;

template <class Self, class Message>
void record_event(Self self, const std::string& episode, const Message& message) {
  const auto& o = self->state.options;
  if (o.recorder) self->send(o.recorder, record_atom::value, make_record(o.role, role::node, episode, message));
}

template <class Worker, class Self>
void dispatch(Self self);

// Queues a job; false when the queue is full (the job was rejected, saying so).
template <class Worker, class Self>
bool enqueue(Self self, waiting_job<Worker> job, bool front) {
  auto& st = self->state;
  const auto requester = job.requester;
  auto reject = job.reject;
  const auto id = st.queue.push(std::move(job), requester, front);
  if (id == 0) {
    ++st.rejected;
    reject(fmt::format("{}: queue full ({} jobs waiting); retry later or raise the pool's max_waiting",
                       st.options.name, st.queue.waiting()));
    return false;
  }
  watch_waiter(self, id, requester, st.options.max_wait);
  return true;
}

// Attempt `attempt` on `slot` has answered, with a result (is_answer) or an error. True when it
// is still the current attempt: the slot is then given back and the caller delivers the answer.
// False for an abandoned attempt (its job was requeued when the node was given up), whose answer
// is logged as late and dropped; its error (the lost node's worker is gone) is only dropped.
template <class Worker, class Self>
bool settle(Self self, std::size_t slot, uint64_t attempt, const std::string& job_id,
            const std::string& episode_id, bool is_answer) {
  auto& st = self->state;
  auto& s = st.slots.at(slot);
  if (s.attempt != attempt) {
    if (!is_answer) {
      spdlog::debug("{}: the abandoned attempt of job {} on node {} failed", st.options.name, job_id, s.node);
      return false;
    }
    spdlog::warn("{}: late answer to job {} from node {} dropped (the job was requeued)", st.options.name,
                 job_id, s.node);
    record_event(self, episode_id, late_answer{job_id, episode_id, s.node});
    return false;
  }
  s.attempt = 0;
  s.running.reset();
  ++st.counts[s.node].done;
  st.queue.release(slot);
  dispatch<Worker>(self);
  return true;
}

// Hands free workers to waiting jobs, oldest first.
template <class Worker, class Self>
void dispatch(Self self) {
  auto& st = self->state;
  while (auto granted = st.queue.next()) {
    const auto slot = granted->credit;
    const auto attempt = ++st.last_attempt;
    auto& s = st.slots.at(slot);
    s.attempt = attempt;
    s.running = granted->item;
    auto job = std::move(granted->item);
    if (s.remote) {
      job.run(s.remote, slot, attempt);
      continue;
    }
    // Ask the supervisor each time: after a restart the worker is a different actor.
    const auto worker_name = s.worker;
    request_child<Worker>(
        self, st.options.supervisor, std::chrono::seconds{30}, worker_name,
        [job, slot, attempt](const Worker& worker) mutable { job.run(worker, slot, attempt); },
        [self, job, slot, attempt, worker_name](caf::error& error) mutable {
          if (!settle<Worker>(self, slot, attempt, job.job_id, job.episode_id, false)) return;
          job.reject(fmt::format("{}: worker {} is not available: {}", self->state.options.name,
                                 worker_name, self->system().render(error)));
        });
  }
}

// Retires the workers of `node` and puts the jobs they held back at the front of the queue.
template <class Worker, class Self>
void drop_node(Self self, const std::string& node, const std::string& reason) {
  auto& st = self->state;
  bool any = false;
  for (std::size_t slot = 0; slot < st.slots.size(); ++slot) {
    auto& s = st.slots[slot];
    if (s.node != node || st.queue.retired(slot)) continue;
    any = true;
    st.queue.retire(slot);
    s.attempt = 0;  // whatever it answers now is late
    if (!s.running) continue;
    auto job = std::move(*s.running);
    s.running.reset();
    ++st.counts[node].requeued;
    if (job.requeues >= st.options.max_requeues) {
      job.reject(fmt::format("{}: job {} was lost with {} nodes in a row (last {}: {}); giving up "
                             "(cluster.max_requeues)",
                             st.options.name, job.job_id, job.requeues + 1, node, reason));
      continue;
    }
    ++job.requeues;
    spdlog::warn("{}: job {} requeued from node {} ({})", st.options.name, job.job_id, node, reason);
    record_event(self, job.episode_id, job_requeued{job.job_id, job.episode_id, node, reason, job.requeues});
    enqueue<Worker>(self, std::move(job), true);
  }
  if (any) spdlog::info("{}: workers of node {} removed ({})", st.options.name, node, reason);
  dispatch<Worker>(self);
}

// Queues a job of type Job; its promise is answered by the worker's reply or a pool error.
template <class Job, class Worker, class Self>
auto job_handler(Self self) {
  using result_type = typename job_result_of<Job>::type;
  return [self](Job& job) -> caf::result<result_type> {
    auto& st = self->state;
    const auto requester = caf::actor_cast<caf::actor_addr>(self->current_sender());  // before the promise takes it
    auto promise = self->template make_response_promise<result_type>();
    if (st.queue.credits() == 0 && !st.options.open_to_nodes) {
      ++st.rejected;
      promise.deliver(caf::make_error(caf::sec::runtime_error, st.options.name + ": has no workers"));
      return promise;
    }
    waiting_job<Worker> entry;
    entry.job_id = job.job_id;
    entry.episode_id = job.episode_id;
    entry.requester = requester;
    entry.run = [self, job, promise](const Worker& worker, std::size_t slot, uint64_t attempt) mutable {
      self->request(worker, self->state.options.job_timeout, job)
          .then(
              [self, promise, slot, attempt, job](result_type& result) mutable {
                if (settle<Worker>(self, slot, attempt, job.job_id, job.episode_id, true))
                  promise.deliver(std::move(result));
              },
              [self, promise, slot, attempt, job](caf::error& error) mutable {
                const auto node = self->state.slots.at(slot).node;
                if (!settle<Worker>(self, slot, attempt, job.job_id, job.episode_id, false)) return;
                promise.deliver(caf::make_error(
                    caf::sec::runtime_error,
                    fmt::format("{}: worker {} failed: {}", self->state.options.name,
                                node == local_node ? self->state.slots.at(slot).worker : "of node " + node,
                                self->system().render(error))));
              });
    };
    entry.reject = [promise](const std::string& why) mutable {
      promise.deliver(caf::make_error(caf::sec::runtime_error, why));
    };
    if (enqueue<Worker>(self, std::move(entry), false)) dispatch<Worker>(self);
    return promise;
  };
}

// The pool's numbers, with its workers by node.
template <class Worker>
pool_stats stats_of(const job_pool_state<Worker>& st) {
  const auto& q = st.queue;
  pool_stats stats{static_cast<int32_t>(q.credits()), static_cast<int32_t>(q.in_use()),
                   static_cast<int32_t>(q.waiting()), st.rejected, static_cast<int32_t>(q.peak_waiting())};
  std::map<std::string, node_load> by_node;
  for (std::size_t slot = 0; slot < st.slots.size(); ++slot) {
    if (q.retired(slot)) continue;
    auto& load = by_node[st.slots[slot].node];
    ++load.workers;
    if (st.slots[slot].attempt != 0) ++load.busy;
  }
  for (auto& [node, load] : by_node) {
    load.node_id = node;
    if (const auto it = st.counts.find(node); it != st.counts.end()) {
      load.done = it->second.done;
      load.requeued = it->second.requeued;
    }
    stats.nodes.push_back(load);
  }
  return stats;
}

}  // namespace detail

// Spawns a pool that runs the job types Jobs... (e.g. compile_job, or verify_job, profile_job
// and evaluate_job) on its workers, which answer job_worker_actor<Jobs...>.
template <class... Jobs>
elastic_pool_actor<Jobs...> spawn_job_pool(caf::actor_system& system, job_pool_options options) {
  using worker_type = job_worker_actor<Jobs...>;
  return system.spawn([options](detail::job_pool_self<Jobs...> self) mutable
                      -> typename elastic_pool_actor<Jobs...>::behavior_type {
    auto& st = self->state;
    st.options = std::move(options);
    st.queue = credit_queue<detail::waiting_job<worker_type>>{st.options.workers.size(),
                                                             st.options.max_waiting};
    for (const auto& name : st.options.workers) {
      detail::pool_slot<worker_type> slot;
      slot.worker = name;
      st.slots.push_back(std::move(slot));
    }
    // A requester that dies while its job waits gives up its place; a node's worker handle that
    // dies (its connection was lost) takes the node's workers with it.
    self->set_down_handler([self](caf::down_msg& down) {
      auto& st = self->state;
      st.queue.drop_waiter(down.source);
      for (std::size_t slot = 0; slot < st.slots.size(); ++slot) {
        const auto& s = st.slots[slot];
        if (s.remote && s.remote.address() == down.source && !st.queue.retired(slot)) {
          detail::drop_node<worker_type>(self, s.node, "lost: " + self->system().render(down.reason));
          return;
        }
      }
    });
    return {
        detail::job_handler<Jobs, worker_type>(self)...,
        [self](pool_stats_atom) { return detail::stats_of(self->state); },
        [self](expire_atom, uint64_t id) {
          auto& st = self->state;
          auto job = st.queue.expire(id);
          if (!job) return;  // already running or done
          ++st.rejected;
          job->reject(fmt::format("{}: waited {} ms for a free worker; all {} were busy",
                                  st.options.name, st.options.max_wait.count(), st.queue.credits()));
        },
        [self](add_workers_atom, const std::string& node, const worker_type& worker, int32_t count) {
          auto& st = self->state;
          if (!worker || count <= 0) return;
          self->monitor(worker);
          for (int32_t i = 0; i < count; ++i) {
            detail::pool_slot<worker_type> slot;
            slot.remote = worker;
            slot.node = node;
            st.queue.add_credit();
            st.slots.push_back(std::move(slot));
          }
          spdlog::info("{}: node {} adds {} worker(s)", st.options.name, node, count);
          detail::dispatch<worker_type>(self);
        },
        [self](drop_node_atom, const std::string& node, const std::string& reason) {
          detail::drop_node<worker_type>(self, node, reason);
        }};
  });
}

}  // namespace cuda_agent
