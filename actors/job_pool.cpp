#include "actors/job_pool.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cuda_agent::detail {
namespace {

constexpr auto lookup_timeout = std::chrono::seconds{30};

// Hands free workers to waiting jobs, oldest first.
void dispatch(job_pool_actor* self) {
  auto& st = self->state;
  while (auto granted = st.queue.next()) {
    const auto slot = granted->credit;
    auto job = std::move(granted->item);
    const auto& worker_name = st.options.workers[slot];
    // Ask the supervisor each time: after a restart the worker is a different actor.
    self->request(st.options.supervisor, lookup_timeout, child_atom::value, worker_name)
        .then([self, job, slot](caf::actor& worker) mutable { job.run(worker, slot); },
              [self, job, slot, worker_name](caf::error& error) mutable {
                job.reject(fmt::format("{}: worker {} is not available: {}",
                                       self->state.options.name, worker_name,
                                       self->system().render(error)));
                release(self, slot);
              });
  }
}

}  // namespace

void init(job_pool_actor* self, job_pool_options options) {
  auto& st = self->state;
  st.options = std::move(options);
  st.queue = credit_queue<waiting_job>{st.options.workers.size(), st.options.max_waiting};
  // A requester that dies while its job waits gives up its place.
  self->set_down_handler(
      [self](caf::down_msg& down) { self->state.queue.drop_waiter(down.source); });
}

void enqueue(job_pool_actor* self, waiting_job job, const caf::actor_addr& requester) {
  auto& st = self->state;
  if (st.options.workers.empty()) {
    ++st.rejected;
    job.reject(fmt::format("{}: has no workers", st.options.name));
    return;
  }
  auto reject = job.reject;
  const auto id = st.queue.push(std::move(job), requester);
  if (id == 0) {
    ++st.rejected;
    reject(fmt::format("{}: queue full ({} jobs waiting); retry later or raise the pool's "
                       "max_waiting",
                       st.options.name, st.queue.waiting()));
    return;
  }
  watch_waiter(self, id, requester, st.options.max_wait);
  dispatch(self);
}

void release(job_pool_actor* self, std::size_t slot) {
  self->state.queue.release(slot);
  dispatch(self);
}

void expire(job_pool_actor* self, uint64_t id) {
  auto& st = self->state;
  auto job = st.queue.expire(id);
  if (!job) return;  // already running or done
  ++st.rejected;
  job->reject(fmt::format("{}: waited {} ms for a free worker; all {} were busy", st.options.name,
                          st.options.max_wait.count(), st.queue.credits()));
}

}  // namespace cuda_agent::detail
