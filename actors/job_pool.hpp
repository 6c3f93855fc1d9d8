// The pool building block behind the compiler pool and the GPU pool: a fixed set of worker actors
// (compiler workers, GPU profiler slots), each running one job at a time. A worker's turn is the
// credit: a job waits in a bounded queue until a worker is free, so nothing reaches a worker's
// mailbox without a grant, however many episodes ask at once.
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
#include <tuple>
#include <vector>

#include <caf/all.hpp>

#include "actors/credit_queue.hpp"
#include "actors/supervisor.hpp"
#include "messages/atoms.hpp"
#include "messages/messages.hpp"

namespace cuda_agent {


struct job_pool_options {
  std::string name = "pool";
  caf::actor supervisor;             // owns the workers
  std::vector<std::string> workers;  // their names under the supervisor; one job each at a time
  std::size_t max_waiting = 256;
  std::chrono::milliseconds max_wait{std::chrono::minutes{30}};
  std::chrono::milliseconds job_timeout{std::chrono::minutes{10}};
};

// The reply type of each job type a pool can run.
template <class Job> struct job_result_of;
template <> struct job_result_of<compile_job> { using type = compile_result; };
template <> struct job_result_of<verify_job> { using type = verify_result; };
template <> struct job_result_of<profile_job> { using type = profile_result; };
template <> struct job_result_of<evaluate_job> { using type = reward_record; };

namespace detail {

struct waiting_job {
  std::function<void(const caf::actor& worker, std::size_t slot)> run;
  std::function<void(const std::string& why)> reject;
};

struct job_pool_state {
  job_pool_options options;
  credit_queue<waiting_job> queue;  // a credit is a worker slot
  int32_t rejected = 0;
  static inline const char* name = "job_pool";
};
using job_pool_actor = caf::stateful_actor<job_pool_state>;

void init(job_pool_actor* self, job_pool_options options);
void enqueue(job_pool_actor* self, waiting_job job, const caf::actor_addr& requester);
void release(job_pool_actor* self, std::size_t slot);
void expire(job_pool_actor* self, uint64_t id);  // the waiting deadline of job `id` has passed

// Queues a job of type Job; its promise is answered by the worker's reply or a pool error.
template <class Job>
auto job_handler(job_pool_actor* self) {
  using result_type = typename job_result_of<Job>::type;
  return [self](Job& job) -> caf::result<result_type> {
    const auto requester = self->current_sender();  // before the promise takes the sender
    auto promise = self->make_response_promise<result_type>();
    waiting_job entry;
    entry.run = [self, job, promise](const caf::actor& worker, std::size_t slot) mutable {
      self->request(worker, self->state.options.job_timeout, job)
          .then(
              [self, promise, slot](result_type& result) mutable {
                promise.deliver(std::move(result));
                release(self, slot);
              },
              [self, promise, slot](caf::error& error) mutable {
                promise.deliver(caf::make_error(
                    caf::sec::runtime_error,
                    self->state.options.name + ": worker " + self->state.options.workers[slot] +
                        " failed: " + self->system().render(error)));
                release(self, slot);
              });
    };
    entry.reject = [promise](const std::string& why) mutable {
      promise.deliver(caf::make_error(caf::sec::runtime_error, why));
    };
    enqueue(self, std::move(entry), caf::actor_cast<caf::actor_addr>(requester));
    return promise;
  };
}

}  // namespace detail

// Spawns a pool that runs the job types Jobs... (e.g. compile_job, or verify_job, profile_job
// and evaluate_job) on its workers, and answers (pool_stats_atom).
template <class... Jobs>
caf::actor spawn_job_pool(caf::actor_system& system, job_pool_options options) {
  return system.spawn([options](detail::job_pool_actor* self) mutable {
    detail::init(self, std::move(options));
    return caf::behavior{
        detail::job_handler<Jobs>(self)...,
        [self](expire_atom, uint64_t id) { detail::expire(self, id); },
        [self](pool_stats_atom) {
          const auto& q = self->state.queue;
          return pool_stats{static_cast<int32_t>(q.credits()), static_cast<int32_t>(q.in_use()),
                            static_cast<int32_t>(q.waiting()), self->state.rejected,
                            static_cast<int32_t>(q.peak_waiting())};
        }};
  });
}

}  // namespace cuda_agent
