#include "actors/cluster/node_endpoint.hpp"

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/file_bundle.hpp"

namespace cuda_agent::cluster {
namespace fs = std::filesystem;
namespace {

struct endpoint_state {
  node_endpoint_options options;
  uint64_t jobs = 0;
  static inline const char* name = "node_endpoint";
};

using endpoint_self = node_actor::stateful_pointer<endpoint_state>;

// A directory of the job's own, with its files in it; throws bundle_error.
template <class Job>
fs::path unpack_job(endpoint_self self, Job& job, const file_bundle& files) {
  auto& st = self->state;
  const auto dir = st.options.work_dir / "jobs" / fmt::format("{}-{}", ++st.jobs, path_component(job.job_id));
  fs::remove_all(dir);
  unpack_bundle(files, dir, st.options.max_bundle_bytes);
  return dir;
}

void remove_quietly(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
}

caf::error job_error(const std::string& job_id, const std::string& what) {
  return caf::make_error(caf::sec::runtime_error, fmt::format("job {}: {}", job_id, what));
}

template <class Job>
auto judge(endpoint_self self) {
  using result_type = typename job_result_of<Job>::type;
  return [self](Job job, const file_bundle& files) -> caf::result<result_type> {
    if (!self->state.options.gpu) return job_error(job.job_id, "this node offers no GPU slot");
    fs::path dir;
    try {
      dir = unpack_job(self, job, files);
      relocate_job_files(job.task_path, job.solution_dir, job.module_path, dir);
    } catch (const std::exception& e) {
      return job_error(job.job_id, e.what());
    }
    auto promise = self->template make_response_promise<result_type>();
    self->request(self->state.options.gpu, self->state.options.job_timeout, job)
        .then(
            [promise, dir](result_type& result) mutable {
              remove_quietly(dir);
              promise.deliver(std::move(result));
            },
            [promise, dir](caf::error& error) mutable {
              remove_quietly(dir);
              promise.deliver(std::move(error));
            });
    return promise;
  };
}

}  // namespace

node_actor spawn_node_endpoint(caf::actor_system& system, node_endpoint_options options) {
  // Detached: it unpacks and packs files, which must not hold up the scheduler's threads.
  return system.spawn<caf::detached>([options](endpoint_self self) mutable -> node_actor::behavior_type {
    self->state.options = std::move(options);
    return {
        [self](compile_job job, const file_bundle& files) -> caf::result<compile_result, file_bundle> {
          if (!self->state.options.compiler) return job_error(job.job_id, "this node offers no compiler worker");
          fs::path dir;
          try {
            dir = unpack_job(self, job, files);
            std::string no_task, no_module;
            relocate_job_files(no_task, job.solution_dir, no_module, dir);
          } catch (const std::exception& e) {
            return job_error(job.job_id, e.what());
          }
          auto promise = self->make_response_promise<compile_result, file_bundle>();
          const auto max_bytes = self->state.options.max_bundle_bytes;
          self->request(self->state.options.compiler, self->state.options.job_timeout, job)
              .then(
                  [promise, dir, max_bytes](compile_result& result) mutable {
                    file_bundle module;
                    if (result.ok) {
                      try {
                        bundle_writer files{max_bytes};
                        files.add_directory(fs::path{result.module_path}.parent_path(), "module");
                        module = files.take();
                      } catch (const std::exception& e) {
                        remove_quietly(dir);
                        promise.deliver(job_error(result.job_id, std::string{"the built module cannot be shipped: "} + e.what()));
                        return;
                      }
                    }
                    remove_quietly(dir);
                    promise.deliver(std::move(result), std::move(module));
                  },
                  [promise, dir](caf::error& error) mutable {
                    remove_quietly(dir);
                    promise.deliver(std::move(error));
                  });
          return promise;
        },
        judge<verify_job>(self), judge<profile_job>(self), judge<evaluate_job>(self),
        [self](finish_atom, const std::string& reason) {
          if (self->state.options.on_finish) self->state.options.on_finish(reason);
          return true;
        }};
  });
}

}  // namespace cuda_agent::cluster
