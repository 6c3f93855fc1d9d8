// Every atom the actors exchange, defined once. An atom names a request or an event that carries
// no message type of its own; what each accepts and answers is written beside it, and the named
// replies are message types in messages.hpp. CAF 0.17 atoms are at most 10 characters from
// [A-Za-z0-9_ ], and two spellings that differ only in '-' and ' ' are the same atom, so the
// values below are all distinct by construction of this one list.
#pragma once

#include <caf/atom.hpp>

namespace cuda_agent {

// An episode (actors/episode.hpp).
using start_atom = caf::atom_constant<caf::atom("start")>;        // (start) -> episode outcome
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;  // its wall clock ran out (to itself)

// A job pool (actors/job_pool.hpp).
using pool_stats_atom = caf::atom_constant<caf::atom("poolstats")>;  // (pool_stats) -> pool_stats
using expire_atom = caf::atom_constant<caf::atom("expire")>;  // (expire, job id): a waiting job's deadline (to itself)

// The recorder (actors/recorder.hpp).
using record_atom = caf::atom_constant<caf::atom("record")>;  // (record, log entry): append it
using flush_atom = caf::atom_constant<caf::atom("flush")>;    // (flush) -> (): everything sent before is on disk

// The rollout manager (actors/rollout_manager.hpp).
using run_atom = caf::atom_constant<caf::atom("run")>;           // (run) -> finished episodes, when all end
using status_atom = caf::atom_constant<caf::atom("status")>;     // (status) -> rollout_status

// A supervisor (actors/supervisor.hpp).
using child_atom = caf::atom_constant<caf::atom("child")>;        // (child, name) -> the child's handle
using restarts_atom = caf::atom_constant<caf::atom("restarts")>;  // (restarts) -> int32 restarts so far

// The policy actor (actors/policy/policy_actor.hpp).
using policy_stats_atom = caf::atom_constant<caf::atom("polstats")>;  // (policy_stats) -> policy_stats

// Nodes across machines (actors/cluster/): a node says hello, then joins with its offer; it
// leaves, or is told the run is over (finish). A pool takes a node's workers and drops them.
using hello_atom = caf::atom_constant<caf::atom("hello")>;      // (hello, node id, nonce) -> node_challenge
using join_atom = caf::atom_constant<caf::atom("join")>;        // (join, node_offer, node) -> welcome text
using leave_atom = caf::atom_constant<caf::atom("leave")>;      // (leave, node id, reason): a node goes
using add_workers_atom = caf::atom_constant<caf::atom("addworkers")>;  // (add_workers, node id, worker, count)
using drop_node_atom = caf::atom_constant<caf::atom("dropnode")>;      // (drop_node, node id, reason)

// Stand-ins: the actor benchmarks' peers (tools/cli/bench_actors_command.cpp,
// tools/cli/bench_peers.cpp) and the supervision tests' children (crash, finish), which exchange
// nothing else.
using go_atom = caf::atom_constant<caf::atom("go")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using expect_atom = caf::atom_constant<caf::atom("expect")>;
using wake_atom = caf::atom_constant<caf::atom("wake")>;
using crash_atom = caf::atom_constant<caf::atom("crash")>;
using finish_atom = caf::atom_constant<caf::atom("finish")>;

}  // namespace cuda_agent
