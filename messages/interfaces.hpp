// What each kind of actor accepts and answers, as CAF typed actor interfaces: every handle that
// crosses a header has one of these types, so a message an actor does not understand, or an
// answer of the wrong type, is a compile error at the sender. The actors live in actors/; the
// atoms in atoms.hpp; the message types in messages.hpp.
//
// Handlers a CAF typed actor sends to itself (timers) must be `reacts_to` (void): they appear
// below as part of the interface, marked "(to itself)".
#pragma once

#include <cstdint>
#include <string>

#include <caf/actor_addr.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "messages/atoms.hpp"
#include "messages/messages.hpp"
#include "messages/recorded_message.hpp"

namespace cuda_agent {

// The recorder (actors/recorder.hpp): appends each record in arrival order; (flush) answers once
// everything sent before it is on stable storage.
using recorder_actor =
    caf::typed_actor<caf::reacts_to<record_atom, recorded_message>, caf::reacts_to<flush_atom>>;

// A supervisor (actors/supervisor.hpp): the current instance of a child by name, and how many
// restarts it has made. Children are of any interface, so the lookup answers an untyped pointer
// that the asker casts to the child's interface (request_child does both).
using supervisor_actor =
    caf::typed_actor<caf::replies_to<child_atom, std::string>::with<caf::strong_actor_ptr>,
                     caf::replies_to<restarts_atom>::with<int32_t>>;

// --- Jobs: compiler workers, GPU profiler slots and the pools in front of them ----------------

// The answer to each job type.
template <class Job> struct job_result_of;
template <> struct job_result_of<compile_job> { using type = compile_result; };
template <> struct job_result_of<verify_job> { using type = verify_result; };
template <> struct job_result_of<profile_job> { using type = profile_result; };
template <> struct job_result_of<evaluate_job> { using type = reward_record; };

// A worker that runs the job types Jobs..., one at a time.
template <class... Jobs>
using job_worker_actor =
    caf::typed_actor<typename caf::replies_to<Jobs>::template with<typename job_result_of<Jobs>::type>...>;

// A pool (actors/job_pool.hpp) takes the same jobs as its workers, and adds its statistics and
// the deadline of a waiting job (to itself).
template <class... Jobs>
using job_pool_actor = typename job_worker_actor<Jobs...>::template extend<
    caf::replies_to<pool_stats_atom>::with<pool_stats>, caf::reacts_to<expire_atom, uint64_t>>;

// A pool open to nodes (actors/job_pool.hpp) also takes a node's workers: `count` credits that
// all send their jobs to one worker handle, and gives them up when the node is dropped (or the
// handle dies); the jobs they held go back to the queue.
template <class... Jobs>
using elastic_pool_actor = typename job_pool_actor<Jobs...>::template extend<
    caf::reacts_to<add_workers_atom, std::string, job_worker_actor<Jobs...>, int32_t>,
    caf::reacts_to<drop_node_atom, std::string, std::string>>;

using compiler_actor = job_worker_actor<compile_job>;
using compiler_pool_actor = job_pool_actor<compile_job>;
using gpu_slot_actor = job_worker_actor<verify_job, profile_job, evaluate_job>;
using gpu_pool_actor = job_pool_actor<verify_job, profile_job, evaluate_job>;
using elastic_compiler_pool_actor = elastic_pool_actor<compile_job>;
using elastic_gpu_pool_actor = elastic_pool_actor<verify_job, profile_job, evaluate_job>;

// --- Nodes across machines (actors/cluster/) ----------------------------------------------------

// A node as the coordinator sees it (actors/cluster/node_endpoint.hpp): it runs jobs whose files
// travel with them, answers a build with the built module's files, and is told when the run is
// over (finish, with the reason).
using node_actor =
    caf::typed_actor<caf::replies_to<compile_job, file_bundle>::with<compile_result, file_bundle>,
                     caf::replies_to<verify_job, file_bundle>::with<verify_result>,
                     caf::replies_to<profile_job, file_bundle>::with<profile_result>,
                     caf::replies_to<evaluate_job, file_bundle>::with<reward_record>,
                     caf::replies_to<finish_atom, std::string>::with<bool>>;

// The coordinator (actors/cluster/coordinator.hpp), published on the rollout's --listen port:
// (hello) starts the mutual proof of the token; (join) admits a node whose offer proves it;
// (leave) a joined node going; (status) the cluster, for a caller that proved the token with a
// hello of its own; (finish) from its own process: the run is over, tell the nodes (answers how
// many acknowledged).
using coordinator_actor =
    caf::typed_actor<caf::replies_to<hello_atom, std::string, std::string>::with<node_challenge>,
                     caf::replies_to<join_atom, node_offer, node_actor>::with<std::string>,
                     caf::reacts_to<leave_atom, std::string, std::string>,
                     caf::replies_to<status_atom, std::string, std::string>::with<cluster_status>,
                     caf::replies_to<finish_atom, std::string>::with<int32_t>>;

// --- An episode and its peers --------------------------------------------------------------------

// An episode's tools (actors/episode_tools.hpp) and each tool call's actor (actors/tool_call.hpp).
using tools_actor = caf::typed_actor<caf::replies_to<tool_request>::with<tool_result>>;

// The policy (actors/policy/policy_actor.hpp): the next turn of a conversation; its statistics;
// the deadline of a waiting request (to itself).
using policy_actor = caf::typed_actor<caf::replies_to<policy_request>::with<policy_response>,
                                      caf::replies_to<policy_stats_atom>::with<policy_stats>,
                                      caf::reacts_to<expire_atom, uint64_t>>;

// An episode (actors/episode.hpp): (start) runs it to the end and answers how it ended, the final
// evaluation and the trajectory; (deadline) is its wall clock running out (to itself).
using episode_actor =
    caf::typed_actor<caf::replies_to<start_atom>::with<episode_ended, reward_record, trajectory>,
                     caf::reacts_to<deadline_atom>>;

// --- The run ------------------------------------------------------------------------------------

// Whoever the learner tells when a batch is trained: the rollout manager's admission.
using learner_listener_actor = caf::typed_actor<caf::reacts_to<learner_update>>;

// The learner (actors/learner/learner_actor.hpp): takes every settled episode's trajectory, and
// answers the sender of a batch's last one with a learner_update; (flush) trains what is open.
using learner_actor =
    caf::typed_actor<caf::reacts_to<trajectory>, caf::replies_to<flush_atom>::with<learner_update>>;

// The rollout manager (actors/rollout_manager.hpp): (run) answers the number of episodes done
// once all have settled and the log is flushed; (status) its progress.
using rollout_actor = learner_listener_actor::extend<caf::replies_to<run_atom>::with<int32_t>,
                                                     caf::replies_to<status_atom>::with<rollout_status>>;

}  // namespace cuda_agent
