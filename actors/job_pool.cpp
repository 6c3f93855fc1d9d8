#include "actors/job_pool.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace cuda_agent::detail {
namespace {

constexpr auto lookup_timeout = std::chrono::seconds{30};

// Hands free workers to waiting jobs, oldest first.
void dispatch(job_pool_actor* self) {
  auto& st = self->state;
  for (std::size_t slot = 0; slot < st.busy.size() && !st.waiting.empty(); ++slot) {
    if (st.busy[slot]) continue;
    st.busy[slot] = true;
    auto job = std::move(st.waiting.front());
    st.waiting.pop_front();
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
  st.busy.assign(st.options.workers.size(), false);
  // A requester that dies while its job waits gives up its place.
  self->set_down_handler([self](caf::down_msg& down) {
    auto& waiting = self->state.waiting;
    waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                                 [&](const waiting_job& job) { return job.requester == down.source; }),
                  waiting.end());
  });
}

void enqueue(job_pool_actor* self, waiting_job job) {
  auto& st = self->state;
  if (st.options.workers.empty()) {
    ++st.rejected;
    job.reject(fmt::format("{}: has no workers", st.options.name));
    return;
  }
  if (st.waiting.size() >= st.options.max_waiting) {
    ++st.rejected;
    job.reject(fmt::format("{}: queue full ({} jobs waiting); retry later or raise the pool's "
                           "max_waiting",
                           st.options.name, st.waiting.size()));
    return;
  }
  job.id = st.next_id++;
  if (job.requester) self->monitor(job.requester);
  self->delayed_send(self, st.options.max_wait, expire_atom::value, job.id);
  st.waiting.push_back(std::move(job));
  st.peak_waiting = std::max(st.peak_waiting, st.waiting.size());
  dispatch(self);
}

void release(job_pool_actor* self, std::size_t slot) {
  self->state.busy[slot] = false;
  dispatch(self);
}

void expire(job_pool_actor* self, uint64_t id) {
  auto& st = self->state;
  auto it = std::find_if(st.waiting.begin(), st.waiting.end(),
                         [id](const waiting_job& job) { return job.id == id; });
  if (it == st.waiting.end()) return;  // already running or done
  ++st.rejected;
  it->reject(fmt::format("{}: waited {} ms for a free worker; all {} were busy", st.options.name,
                         st.options.max_wait.count(), st.busy.size()));
  st.waiting.erase(it);
}

}  // namespace cuda_agent::detail
