#include "actors/cluster/remote_worker.hpp"

#include <unistd.h>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "actors/cluster/candidate_refusal.hpp"
#include "actors/cluster/file_bundle.hpp"

namespace cuda_agent::cluster {
namespace fs = std::filesystem;
namespace {

caf::error node_error(const std::string& node_id, const std::string& what) {
  return caf::make_error(caf::sec::runtime_error, fmt::format("node {}: {}", node_id, what));
}

// Keeps a module built on a node in the store, once per content; returns its path here.
std::string store_module(const shipping_settings& settings, const file_bundle& module,
                         const std::string& remote_path) {
  const auto dir = settings.store / bundle_digest(module);
  if (!fs::exists(dir)) {
    const auto staging = fs::path{dir.string() + fmt::format(".part{}", ::getpid())};
    fs::remove_all(staging);
    unpack_bundle(module, staging, settings.max_bundle_bytes);
    std::error_code ec;
    fs::rename(staging, dir, ec);  // another job may have stored the same module meanwhile
    if (ec) fs::remove_all(staging);
  }
  const auto file = dir / "module" / fs::path{remote_path}.filename();
  if (!fs::is_regular_file(file)) throw bundle_error{"the node answered a built module without its file " + file.filename().string()};
  return file.string();
}

// Quits with the node's exit reason when the node is lost: the pool then requeues our jobs.
template <class Self>
void follow_node(Self self, const node_actor& node, const std::string& node_id) {
  self->monitor(node);
  self->set_down_handler([self, node_id](caf::down_msg& down) {
    spdlog::warn("node {}: lost ({})", node_id, self->system().render(down.reason));
    self->quit(down.reason);
  });
}

// The files a job ships with: a build needs only the solution directory.
file_bundle job_files(const compile_job& job, const shipping_settings& settings) {
  return bundle_job_files({}, job.solution_dir, {}, settings.max_bundle_bytes);
}

template <class Job>
file_bundle job_files(const Job& job, const shipping_settings& settings) {
  return bundle_job_files(job.task_path, job.solution_dir, job.module_path, settings.max_bundle_bytes);
}

// Sends `job` with its files to the node; accept(promise, node's answer...) answers it. Files of
// the candidate's that cannot travel answer the job as the candidate's failure.
template <class Job, class Self, class... Answer, class Accept>
caf::result<typename job_result_of<Job>::type> ship(Self self, const node_actor& node, const std::string& node_id,
                                                    const shipping_settings& settings, const Job& job,
                                                    caf::detail::type_list<Answer...>, Accept accept) {
  using result_type = typename job_result_of<Job>::type;
  file_bundle files;
  try {
    files = job_files(job, settings);
  } catch (const candidate_files_error& e) {
    return candidate_refusal(job, e.what());
  } catch (const std::exception& e) {
    return node_error(node_id, e.what());
  }
  auto promise = self->template make_response_promise<result_type>();
  self->request(node, settings.job_timeout, job, std::move(files))
      .then([=](Answer&... answer) mutable { accept(promise, answer...); },
            [=](caf::error& error) mutable { promise.deliver(node_error(node_id, self->system().render(error))); });
  return promise;
}

compiler_actor::behavior_type remote_compiler(compiler_actor::pointer self, node_actor node, std::string node_id,
                                              shipping_settings settings) {
  follow_node(self, node, node_id);
  return {[=](const compile_job& job) -> caf::result<compile_result> {
    // A built module comes back with the answer and is kept here, where later jobs ship it from.
    auto keep_module = [=](caf::typed_response_promise<compile_result>& promise, compile_result& result,
                           file_bundle& module) {
      if (result.ok) {
        try {
          result.module_path = store_module(settings, module, result.module_path);
        } catch (const candidate_files_error& e) {
          result = candidate_refusal(job, std::string{"the built module cannot be shipped: "} + e.what());
        } catch (const std::exception& e) {
          promise.deliver(node_error(node_id, std::string{"its built module could not be kept: "} + e.what()));
          return;
        }
      }
      promise.deliver(std::move(result));
    };
    return ship(self, node, node_id, settings, job, caf::detail::type_list<compile_result, file_bundle>{},
                keep_module);
  }};
}

template <class Job, class Self>
auto judge_on_node(Self self, const node_actor& node, const std::string& node_id, const shipping_settings& settings) {
  using result_type = typename job_result_of<Job>::type;
  return [=](const Job& job) -> caf::result<result_type> {
    return ship(self, node, node_id, settings, job, caf::detail::type_list<result_type>{},
                [](caf::typed_response_promise<result_type>& promise, result_type& result) {
                  promise.deliver(std::move(result));
                });
  };
}

gpu_slot_actor::behavior_type remote_gpu_slot(gpu_slot_actor::pointer self, node_actor node, std::string node_id,
                                              shipping_settings settings) {
  follow_node(self, node, node_id);
  return {judge_on_node<verify_job>(self, node, node_id, settings),
          judge_on_node<profile_job>(self, node, node_id, settings),
          judge_on_node<evaluate_job>(self, node, node_id, settings)};
}

}  // namespace

// Detached: shipping reads and writes files (a module is megabytes), which must not hold up
// the scheduler's threads.
compiler_actor spawn_remote_compiler(caf::actor_system& system, node_actor node, std::string node_id,
                                     shipping_settings settings) {
  return system.spawn<caf::detached>(remote_compiler, std::move(node), std::move(node_id), std::move(settings));
}

gpu_slot_actor spawn_remote_gpu_slot(caf::actor_system& system, node_actor node, std::string node_id,
                                     shipping_settings settings) {
  return system.spawn<caf::detached>(remote_gpu_slot, std::move(node), std::move(node_id), std::move(settings));
}

}  // namespace cuda_agent::cluster
