#include "actors/cluster/remote_worker.hpp"

#include <unistd.h>

#include <caf/all.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

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

compiler_actor::behavior_type remote_compiler(compiler_actor::pointer self, node_actor node, std::string node_id,
                                              shipping_settings settings) {
  follow_node(self, node, node_id);
  return {[=](const compile_job& job) -> caf::result<compile_result> {
    file_bundle files;
    try {
      files = bundle_job_files({}, job.solution_dir, {}, settings.max_bundle_bytes);
    } catch (const std::exception& e) {
      return node_error(node_id, e.what());
    }
    auto promise = self->make_response_promise<compile_result>();
    self->request(node, settings.job_timeout, job, std::move(files))
        .then(
            [=](compile_result& result, file_bundle& module) mutable {
              if (result.ok) {
                try {
                  result.module_path = store_module(settings, module, result.module_path);
                } catch (const std::exception& e) {
                  promise.deliver(node_error(node_id, std::string{"its built module could not be kept: "} + e.what()));
                  return;
                }
              }
              promise.deliver(std::move(result));
            },
            [=](caf::error& error) mutable { promise.deliver(node_error(node_id, self->system().render(error))); });
    return promise;
  }};
}

template <class Job, class Self>
auto ship(Self self, const node_actor& node, const std::string& node_id, const shipping_settings& settings) {
  using result_type = typename job_result_of<Job>::type;
  return [=](const Job& job) -> caf::result<result_type> {
    file_bundle files;
    try {
      files = bundle_job_files(job.task_path, job.solution_dir, job.module_path, settings.max_bundle_bytes);
    } catch (const std::exception& e) {
      return node_error(node_id, e.what());
    }
    auto promise = self->template make_response_promise<result_type>();
    self->request(node, settings.job_timeout, job, std::move(files))
        .then([=](result_type& result) mutable { promise.deliver(std::move(result)); },
              [=](caf::error& error) mutable { promise.deliver(node_error(node_id, self->system().render(error))); });
    return promise;
  };
}

gpu_slot_actor::behavior_type remote_gpu_slot(gpu_slot_actor::pointer self, node_actor node, std::string node_id,
                                              shipping_settings settings) {
  follow_node(self, node, node_id);
  return {ship<verify_job>(self, node, node_id, settings), ship<profile_job>(self, node, node_id, settings),
          ship<evaluate_job>(self, node, node_id, settings)};
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
