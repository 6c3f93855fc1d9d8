#!/usr/bin/env bash
# on_a_core_of_its_own.sh COMMAND [ARGS...]: runs one CTest test on a core that no other test of
# the host holds, or on every core where CUDA_AGENT_TEST_CORES=all.
#
# Why: a process that evaluates on CPU keeps all its own work off the core that its timed runs
# hold (harness.timing_cpus = auto, the last core). Under `ctest -j 2` on a 2-core host, two such
# tests side by side would both run on core 0 while core 1 idled between their timed runs. Pinned
# to one core, a test sees a 1-core host: `auto` holds nothing, its timed runs share the core with
# its own work only, and the other test's work runs on the other core.
#
# A core is taken with a lock file under the temp directory (shared by every ctest of the host);
# the test and everything it starts inherit the lock, so it is held until the last of them ends.
# Where every core is taken (ctest -j above the core count), the test runs unpinned.
# (CTest's own PROCESSOR_AFFINITY needs a libuv with CPU masks; Debian bookworm's CMake 3.25 has
# none and starts every test on every core.)
set -euo pipefail

if [ "${CUDA_AGENT_TEST_CORES:-one}" = all ]; then
  exec "$@"
fi

list=""
while read -r key value; do
  [ "$key" = "Cpus_allowed_list:" ] && list="$value"
done </proc/$$/status

cores=()
IFS=, read -ra ranges <<<"$list"
for range in "${ranges[@]}"; do
  if [[ $range == *-* ]]; then
    for ((core = ${range%-*}; core <= ${range#*-}; core++)); do cores+=("$core"); done
  else
    cores+=("$range")
  fi
done

lock_dir="${TMPDIR:-/tmp}"
for core in "${cores[@]}"; do
  exec {lock}>>"$lock_dir/cuda-agent-test-core-$core.lock"
  if flock --nonblock "$lock"; then
    exec taskset --cpu-list "$core" "$@"
  fi
  exec {lock}>&-
done
exec "$@"
