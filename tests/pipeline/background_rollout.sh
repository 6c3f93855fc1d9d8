#!/usr/bin/env bash
# Background shells of real rollouts outlive neither their episode nor the rollout process. An
# episode starts a background command that leaves processes behind as best it can (a job, a
# double fork into a session of its own, a job that ignores SIGTERM and SIGHUP), then either ends
# (the rollout finishes and exits) or runs a foreground command until the rollout process alone is
# killed with SIGKILL. After each, the host is searched for the commands' processes. Every core is
# kept busy meanwhile, since leaks are races.
set -euo pipefail
bin="$1"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="$(mktemp -d)"
spinners=()
pid=""  # the rollout running in the background
cleanup() {
  for p in "${spinners[@]}" $pid; do kill "$p" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT
chmod 755 "$scratch"  # sandboxed commands may run as another user and must reach the workdir
for _ in $(seq "$(nproc)"); do
  sh -c 'while :; do :; done' &
  spinners+=($!)
done

fail() { echo "FAILED: $*"; tail -30 "$scratch/err" 2>/dev/null; exit 1; }
# Numbers for `sleep`, unlikely anywhere else on the host.
next_marker=$((6000000 + RANDOM * 90))
markers() {
  local m=()
  for _ in $(seq "$1"); do m+=("$next_marker"); next_marker=$((next_marker + 1)); done
  echo "${m[*]}"
}
survivors() {  # how many processes run `sleep M` for one of the markers
  local pattern
  pattern="^sleep ($(echo "$*" | tr ' ' '|'))\$"
  pgrep -fc "$pattern" || true
}
wait_for() {  # count, markers...: waits up to 10 s until exactly `count` survive
  local n="$1"
  shift
  for _ in $(seq 1 200); do
    [ "$(survivors "$@")" = "$n" ] && return 0
    sleep 0.05
  done
  return 1
}

# A task and its demonstration: a background command that leaves three processes behind and waits
# (markers 1 to 4), a wait until all of them run and a second for this script to see them, and,
# with "hold", a foreground command that runs until the rollout is killed (marker 5).
task() {  # id, markers, hold or end
  mkdir -p "$scratch/corpus/$1" "$scratch/demos/$1"
  cp "$source_dir/tests/skills/harness/tasks/elementwise.py" "$scratch/corpus/$1/$1.py"
  python3 - "$scratch" "$1" "$3" $2 <<'PY'
import json, os, sys
scratch, task, hold, m = sys.argv[1], sys.argv[2], sys.argv[3] == "hold", sys.argv[4:]
json.dump({"set": task, "tasks": [{"id": task, "level": 1, "operators": [], "source": "background test",
                                   "file": task + ".py"}]},
          open(os.path.join(scratch, "corpus", task, "index.json"), "w"))
detach = (f"sleep {m[0]} & (setsid sleep {m[1]} >/dev/null 2>&1 &); "
          f"(trap '' TERM HUP; exec sleep {m[2]}) >/dev/null 2>&1 & touch started; sleep {m[3]}")
steps = [{"thought": "detach", "tool": "Bash", "arguments": {"command": detach, "run_in_background": True}},
         {"thought": "wait until it runs", "tool": "Bash",
          "arguments": {"command": "until [ -e started ]; do sleep 0.01; done; sleep 1"}}]
if hold:
    steps.append({"thought": "hold", "tool": "Bash", "arguments": {"command": f"sleep {m[4]}", "timeout": 600000}})
json.dump({"task_id": task, "device": "cpu", "final": "done", "steps": steps},
          open(os.path.join(scratch, "demos", task, "demo.json"), "w"))
PY
}
rollout_args() {  # task (also the run's id): sets args
  args=(--set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$scratch/demos"
        --set policy.tools_dir="$source_dir/skills/tools"
        rollout --corpus "$scratch/corpus/$1" --policy demo --device cpu --log "$scratch/log-$1" --run-id "$1")
}

start() {  # task, end or hold, how many processes it runs
  task "$1" "$m" "$2"
  rollout_args "$1"
  "$bin" "${args[@]}" >"$scratch/out" 2>"$scratch/err" &
  pid=$!
  wait_for "$3" $m || fail "$1: the commands did not all start"
}

# The rollout ends, and its process exits.
for i in 1 2 3; do
  m=$(markers 4)
  start "ends$i" end 4
  wait "$pid" || fail "rollout ends$i failed"
  pid=""
  grep -q "ends$i-0000 .* agent_done" "$scratch/out" || fail "ends$i: the episode did not end"
  wait_for 0 $m || fail "ends$i: $(survivors $m) processes outlived the rollout"
done

# The rollout process alone is killed with SIGKILL while the episode's commands run.
for i in 1 2 3; do
  m=$(markers 5)
  start "killed$i" hold 5
  kill -9 "$pid"
  wait "$pid" 2>/dev/null || true
  pid=""
  wait_for 0 $m || fail "killed$i: $(survivors $m) processes outlived the killed rollout"
  sleep 0.5
  [ "$(survivors $m)" = 0 ] || fail "killed$i: a process came up after the rollout was killed"
done
echo "no background process outlived 3 finished and 3 killed rollouts"
