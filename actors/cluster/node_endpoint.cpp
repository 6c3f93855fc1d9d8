#include "actors/cluster/node_endpoint.hpp"

#include <tuple>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/candidate_refusal.hpp"
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

// Points the job's paths at its unpacked files.
void point_at_files(compile_job& job, const fs::path& dir) {
  std::string no_task, no_module;
  relocate_job_files(no_task, job.solution_dir, no_module, dir);
}

template <class Job>
void point_at_files(Job& job, const fs::path& dir) {
  relocate_job_files(job.task_path, job.solution_dir, job.module_path, dir);
}

caf::error job_error(const std::string& job_id, const std::string& what) {
  return caf::make_error(caf::sec::runtime_error, fmt::format("job {}: {}", job_id, what));
}

// Unpacks the job's files into a directory of its own, runs the job on `worker` and answers
// with the tuple accept(result); the directory goes before the answer. Files over
// this node's size limit answer the job as the candidate's failure, with refusal(that failure).
template <class... Out, class Job, class Worker, class Refusal, class Accept>
caf::result<Out...> run_here(endpoint_self self, const Worker& worker, const char* offer, Job job,
                             const file_bundle& files, Refusal refusal, Accept accept) {
  using result_type = typename job_result_of<Job>::type;
  if (!worker) return job_error(job.job_id, std::string{"this node offers no "} + offer);
  fs::path dir;
  try {
    dir = unpack_job(self, job, files);
    point_at_files(job, dir);
  } catch (const candidate_files_error& e) {
    remove_quietly(dir);
    return refusal(candidate_refusal(job, e.what()));
  } catch (const std::exception& e) {
    remove_quietly(dir);
    return job_error(job.job_id, e.what());
  }
  auto promise = self->template make_response_promise<Out...>();
  self->request(worker, self->state.options.job_timeout, job)
      .then(
          [promise, dir, accept](result_type& result) mutable {
            auto answer = accept(result);
            remove_quietly(dir);
            std::apply([&](auto&... out) { promise.deliver(std::move(out)...); }, answer);
          },
          [promise, dir](caf::error& error) mutable {
            remove_quietly(dir);
            promise.deliver(std::move(error));
          });
  return promise;
}

// A build answers with the module's files, which travel back to the coordinator.
caf::result<compile_result, file_bundle> build_here(endpoint_self self, const compile_job& job,
                                                    const file_bundle& files) {
  const auto max_bytes = self->state.options.max_bundle_bytes;
  return run_here<compile_result, file_bundle>(
      self, self->state.options.compiler, "compiler worker", job, files,
      [](compile_result refused) -> caf::result<compile_result, file_bundle> {
        return {std::move(refused), file_bundle{}};
      },
      [job, max_bytes](compile_result& result) {
        file_bundle module;
        if (result.ok) {
          try {
            bundle_writer writer{max_bytes};
            writer.add_directory(fs::path{result.module_path}.parent_path(), "module");
            module = writer.take();
          } catch (const std::exception& e) {
            // The module is built from the candidate's code: one too large to ship is its failure.
            result = candidate_refusal(job, std::string{"the built module cannot be shipped: "} + e.what());
          }
        }
        return std::make_tuple(std::move(result), std::move(module));
      });
}

template <class Job>
auto judge(endpoint_self self) {
  using result_type = typename job_result_of<Job>::type;
  return [self](Job job, const file_bundle& files) -> caf::result<result_type> {
    return run_here<result_type>(
        self, self->state.options.gpu, "GPU slot", std::move(job), files,
        [](result_type refused) -> caf::result<result_type> { return refused; },
        [](result_type& result) { return std::make_tuple(std::move(result)); });
  };
}

}  // namespace

node_actor spawn_node_endpoint(caf::actor_system& system, node_endpoint_options options) {
  // Detached: it unpacks and packs files, which must not hold up the scheduler's threads.
  return system.spawn<caf::detached>([options](endpoint_self self) mutable -> node_actor::behavior_type {
    self->state.options = std::move(options);
    return {
        [self](const compile_job& job, const file_bundle& files) { return build_here(self, job, files); },
        judge<verify_job>(self), judge<profile_job>(self), judge<evaluate_job>(self),
        [self](finish_atom, const std::string& reason) {
          if (self->state.options.on_finish) self->state.options.on_finish(reason);
          return true;
        }};
  });
}

}  // namespace cuda_agent::cluster
