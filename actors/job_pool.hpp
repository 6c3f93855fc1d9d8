// The pool building block behind the compiler pool and the GPU pool: a fixed set of worker actors
// (compiler workers, GPU profiler slots), each running one job at a time. A worker's turn is the
// credit (actors/credit_queue.hpp): a job waits in a bounded queue until a worker is free, so
// nothing reaches a worker's mailbox without a grant, however many episodes ask at once.
//
// The pool owns every deadline: a job that waits longer than max_wait, or finds the queue full,
// is rejected with an error that says so; a job that runs longer than job_timeout gives its
// worker back with an error. Requesters are monitored: a requester that dies while its job waits
// loses its place, so a crashed episode never holds credit. Workers belong to a supervisor and
// are looked up by name before each job, so a restarted worker is used without the pool knowing.
//
// Failures of the pool itself (rejection, timeout, a worker that died mid-job) reach the requester
// as a caf::error: they are infrastructure failures, never a verdict on the candidate.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <caf/all.hpp>
#include <fmt/format.h>

#include "actors/credit_queue.hpp"
#include "actors/supervisor.hpp"
#include "messages/interfaces.hpp"

namespace cuda_agent {

struct job_pool_options {
  std::string name = "pool";
  supervisor_actor supervisor;       // owns the workers
  std::vector<std::string> workers;  // their names under the supervisor; one job each at a time
  std::size_t max_waiting = 256;
  std::chrono::milliseconds max_wait{std::chrono::minutes{30}};
  std::chrono::milliseconds job_timeout{std::chrono::minutes{10}};
};

namespace detail {

template <class Worker>
struct waiting_job {
  std::function<void(const Worker& worker, std::size_t slot)> run;
  std::function<void(const std::string& why)> reject;
};

template <class Worker>
struct job_pool_state {
  job_pool_options options;
  credit_queue<waiting_job<Worker>> queue;  // a credit is a worker slot
  int32_t rejected = 0;
  static inline const char* name = "job_pool";
};

template <class... Jobs>
using job_pool_self =
    typename job_pool_actor<Jobs...>::template stateful_pointer<job_pool_state<job_worker_actor<Jobs...>>>;

template <class Worker, class Self>
void release(Self self, std::size_t slot);

// Hands free workers to waiting jobs, oldest first.
template <class Worker, class Self>
void dispatch(Self self) {
  auto& st = self->state;
  while (auto granted = st.queue.next()) {
    const auto slot = granted->credit;
    auto job = std::move(granted->item);
    const auto worker_name = st.options.workers[slot];
    // Ask the supervisor each time: after a restart the worker is a different actor.
    request_child<Worker>(
        self, st.options.supervisor, std::chrono::seconds{30}, worker_name,
        [job, slot](const Worker& worker) mutable { job.run(worker, slot); },
        [self, job, slot, worker_name](caf::error& error) mutable {
          job.reject(fmt::format("{}: worker {} is not available: {}", self->state.options.name,
                                 worker_name, self->system().render(error)));
          release<Worker>(self, slot);
        });
  }
}

// Gives worker `slot` back and hands it to the next waiting job.
template <class Worker, class Self>
void release(Self self, std::size_t slot) {
  self->state.queue.release(slot);
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
    if (st.options.workers.empty()) {
      ++st.rejected;
      promise.deliver(caf::make_error(caf::sec::runtime_error, st.options.name + ": has no workers"));
      return promise;
    }
    waiting_job<Worker> entry;
    entry.run = [self, job, promise](const Worker& worker, std::size_t slot) mutable {
      self->request(worker, self->state.options.job_timeout, job)
          .then(
              [self, promise, slot](result_type& result) mutable {
                promise.deliver(std::move(result));
                release<Worker>(self, slot);
              },
              [self, promise, slot](caf::error& error) mutable {
                promise.deliver(caf::make_error(
                    caf::sec::runtime_error,
                    self->state.options.name + ": worker " + self->state.options.workers[slot] +
                        " failed: " + self->system().render(error)));
                release<Worker>(self, slot);
              });
    };
    entry.reject = [promise](const std::string& why) mutable {
      promise.deliver(caf::make_error(caf::sec::runtime_error, why));
    };
    const auto id = st.queue.push(std::move(entry), requester);
    if (id == 0) {
      ++st.rejected;
      promise.deliver(caf::make_error(
          caf::sec::runtime_error,
          fmt::format("{}: queue full ({} jobs waiting); retry later or raise the pool's max_waiting",
                      st.options.name, st.queue.waiting())));
      return promise;
    }
    watch_waiter(self, id, requester, st.options.max_wait);
    dispatch<Worker>(self);
    return promise;
  };
}

}  // namespace detail

// Spawns a pool that runs the job types Jobs... (e.g. compile_job, or verify_job, profile_job
// and evaluate_job) on its workers, which answer job_worker_actor<Jobs...>.
template <class... Jobs>
job_pool_actor<Jobs...> spawn_job_pool(caf::actor_system& system, job_pool_options options) {
  using worker_type = job_worker_actor<Jobs...>;
  return system.spawn([options](detail::job_pool_self<Jobs...> self) mutable
                      -> typename job_pool_actor<Jobs...>::behavior_type {
    auto& st = self->state;
    st.options = std::move(options);
    st.queue = credit_queue<detail::waiting_job<worker_type>>{st.options.workers.size(),
                                                             st.options.max_waiting};
    // A requester that dies while its job waits gives up its place.
    self->set_down_handler([self](caf::down_msg& down) { self->state.queue.drop_waiter(down.source); });
    return {
        detail::job_handler<Jobs, worker_type>(self)...,
        [self](pool_stats_atom) {
          const auto& q = self->state.queue;
          return pool_stats{static_cast<int32_t>(q.credits()), static_cast<int32_t>(q.in_use()),
                            static_cast<int32_t>(q.waiting()), self->state.rejected,
                            static_cast<int32_t>(q.peak_waiting())};
        },
        [self](expire_atom, uint64_t id) {
          auto& st = self->state;
          auto job = st.queue.expire(id);
          if (!job) return;  // already running or done
          ++st.rejected;
          job->reject(fmt::format("{}: waited {} ms for a free worker; all {} were busy",
                                  st.options.name, st.options.max_wait.count(), st.queue.credits()));
        }};
  });
}

}  // namespace cuda_agent
