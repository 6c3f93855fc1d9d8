#!/usr/bin/env bash
# Faults inside one rollout, all real, on CPU: beside an honest episode, a candidate that
# segfaults in its kernel, one that never returns, an episode whose tool commands fork-bomb and
# never end, one that never stops calling tools, and one whose harness worker is killed with
# SIGKILL in the middle of its evaluation. Each is contained and ends with a termination reason
# and a reward, the honest episodes are unaffected, and the log holds exactly one final reward
# for every episode: none lost, none counted twice. A second, small rollout talks to a policy
# server that accepts the connection and never answers.
#
# The tasks and demonstrations are assembled here from the harness red-team candidates
# (tests/skills/harness), so the faults are the same code the harness tests use.
set -euo pipefail
bin="$1"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
candidates="$source_dir/tests/skills/harness/candidates"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
chmod 755 "$scratch"  # sandboxed commands may run as another user and must reach the workdir
set_dir="$scratch/corpus/faults"
demo_dir="$scratch/demos"
mkdir -p "$set_dir" "$demo_dir"

# A demonstration: write the shared kernel file and CANDIDATE's model_new.py, then EXTRA steps
# (JSON objects, comma-separated), then build.
demo() {
  local id="$1" candidate="$2" extra="${3:-}"
  mkdir -p "$demo_dir/$id/kernels"
  cp "$source_dir/tests/skills/harness/kernels/elementwise.cpp" "$demo_dir/$id/kernels/"
  [[ "$candidate" == /* ]] || candidate="$candidates/$candidate"
  cp "$candidate/model_new.py" "$demo_dir/$id/"
  cp "$source_dir/tests/skills/harness/tasks/elementwise.py" "$set_dir/$id.py"
  cat > "$demo_dir/$id/demo.json" <<JSON
{"task_id": "$id", "device": "cpu", "final": "done",
 "steps": [
  {"thought": "kernel", "tool": "Write", "arguments": {"file_path": "kernels/elementwise.cpp", "content": {"\$file": "kernels/elementwise.cpp"}}},
  {"thought": "model", "tool": "Write", "arguments": {"file_path": "model_new.py", "content": {"\$file": "model_new.py"}}},
  ${extra:+$extra,}
  {"thought": "build", "tool": "Bash", "arguments": {"command": "build"}}
 ]}
JSON
}

read_step='{"thought": "look again", "tool": "Read", "arguments": {"file_path": "model.py"}}'
demo f1_honest honest_elementwise
demo f2_segfault fault_segfault
demo f3_hang fault_infinite_loop
demo f4_bad_commands honest_elementwise \
  '{"thought": "fork bomb", "tool": "Bash", "arguments": {"command": "(f() { f | f & }; f) 2>/dev/null; sleep 30", "timeout": 5000}},
   {"thought": "never ends", "tool": "Bash", "arguments": {"command": "sleep 600", "timeout": 2000}}'
runaway=""
for _ in 1 2 3 4 5 6 7 8; do runaway+="${runaway:+,}$read_step"; done
demo f5_runaway honest_elementwise "$runaway"
demo f6_honest honest_elementwise

# Honest, but its first forward in a process waits 10 s: the moment a watcher below uses to kill
# the harness worker that evaluates it (the candidate's parent) with SIGKILL.
mkdir -p "$scratch/slow_first_forward"
cat > "$scratch/slow_first_forward/model_new.py" <<'PY'
import time

import torch.nn as nn

import cuda_extension

# kill-the-worker-marker


class ModelNew(nn.Module):
    first = True

    def __init__(self):
        super().__init__()

    def forward(self, x):
        if ModelNew.first:
            ModelNew.first = False
            time.sleep(10)
        return cuda_extension.fused_forward(x)
PY
demo f7_worker_killed "$scratch/slow_first_forward"

python3 - "$set_dir" <<'PY'
import json, os, sys
d = sys.argv[1]
ids = sorted(f[:-3] for f in os.listdir(d) if f.endswith(".py"))
json.dump({"set": "faults", "tasks": [{"id": i, "level": 1, "operators": [], "source": "fault test", "file": i + ".py"} for i in ids]},
          open(os.path.join(d, "index.json"), "w"), indent=1)
PY

# The watcher: finds the candidate process of f7 (its working directory holds the marked
# model_new.py) and kills the harness worker above it (the candidate runs in the worker's
# bubblewrap sandbox, so the worker is its parent's parent's parent), once.
(
  for _ in $(seq 1 3000); do
    for cmdline in $(grep -las harness.candidate_runner /proc/[0-9]*/cmdline); do
      pid="${cmdline#/proc/}"; pid="${pid%/cmdline}"
      grep -qs kill-the-worker-marker "/proc/$pid/cwd/model_new.py" || continue
      worker=$pid
      while [ "$worker" -gt 1 ] && ! grep -qs harness.worker "/proc/$worker/cmdline"; do
        worker="$(awk '{ print $4 }' "/proc/$worker/stat" 2>/dev/null || echo 0)"
      done
      [ "$worker" -gt 1 ] || continue
      kill -KILL "$worker" && echo "$worker" > "$scratch/killed_worker" && exit 0
    done
    sleep 0.1
  done
) &
watcher=$!

# Turn budget 8: the runaway episode (2 writes, 8 reads, then build) hits it; the others need at
# most 6 turns. The hang is cut at 30 s by the harness: an honest candidate started beside three
# busy episodes on 2 cores has been seen to need more than 15 s to finish verify.
"$bin" --set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$demo_dir" \
  --set policy.tools_dir="$source_dir/skills/tools" --set harness.timed_runs=5 --set harness.warmup_runs=2 \
  --set harness.candidate_timeout_s=30 --set episode.max_turns=8 \
  rollout --corpus "$set_dir" --policy demo --concurrency 3 --log "$scratch/log" --run-id ft \
  >"$scratch/out" 2>"$scratch/err" || { cat "$scratch/out"; tail -30 "$scratch/err"; exit 1; }
cat "$scratch/out"
kill "$watcher" 2>/dev/null || true

fail() { echo "FAILED: $*"; tail -30 "$scratch/err"; exit 1; }
expect() {  # task, termination, reward pattern
  grep -Eq "^ft-[0-9]{4} +$1 +$2 +reward +$3 " "$scratch/out" || fail "$1: expected $2 with reward $3"
}
expect f1_honest agent_done '[123]'
expect f2_segfault agent_done '-1'
expect f3_hang agent_done '-1'
expect f4_bad_commands agent_done '[123]'
expect f5_runaway turn_budget '[123]'
expect f6_honest agent_done '[123]'
expect f7_worker_killed agent_done '-1'
[ -s "$scratch/killed_worker" ] || fail "the watcher never found f7's harness worker to kill"
echo "killed harness worker $(cat "$scratch/killed_worker") during f7's evaluation"

# From the log: exactly one final reward per episode, for all six, and the faults named.
"$bin" log export "$scratch/log" > "$scratch/records.jsonl"
python3 - "$scratch/records.jsonl" <<'PY'
import collections, json, sys
finals = collections.Counter()
errors, task_of, bash_outputs = {}, {}, collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "episode_started":
        task_of[r["episode"]] = r["payload"]["task_id"]
    if r["type"] == "tool_result" and r["payload"]["tool"] == "Bash":
        bash_outputs[r["episode"]].append(r["payload"]["output"])
    if r["type"] == "reward_record" and r["sender"] == "episode" and r["receiver"] == "rollout":
        finals[r["episode"]] += 1
        errors[r["episode"]] = r["payload"]["error"]
assert len(finals) == 7 and set(finals.values()) == {1}, f"final rewards per episode: {dict(finals)}"
joined = " | ".join(errors.values())
assert "SIGSEGV" in joined, joined
assert "timed out" in joined, joined
killed = [errors[e] for e, t in task_of.items() if t == "f7_worker_killed"]
assert killed and "harness worker" in killed[0] and "signal 9" in killed[0], killed
# Both of the bad commands were cut at their time limits, the fork bomb with everything it started.
bad = [e for e, t in task_of.items() if t == "f4_bad_commands"]
cut = [o for o in bash_outputs[bad[0]] if "[timed out after" in o]
assert len(cut) == 2, [o[-200:] for o in bash_outputs[bad[0]]]
print("log: one final reward for each of", len(finals), "episodes; both bad commands cut at their limits")
PY

# The faults replay hermetically like any other episode.
"$bin" replay "$scratch/log"

# A policy server that accepts every connection and never answers: each attempt of the episode
# ends when the backend gives up, as an infrastructure failure (not the agent's), is retried
# once, and is then reported with its reason; nothing is evaluated.
silent_set="$scratch/corpus/silent"
mkdir -p "$silent_set"
cp "$set_dir/f1_honest.py" "$silent_set/"
echo '{"set": "silent", "tasks": [{"id": "f1_honest", "level": 1, "operators": [], "source": "fault test", "file": "f1_honest.py"}]}' \
  > "$silent_set/index.json"
python3 - "$scratch/port" <<'PY' &
import socket, sys
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(16)
open(sys.argv[1], "w").write(str(server.getsockname()[1]))
held = []
while True:
    held.append(server.accept()[0])  # read nothing, answer nothing, close nothing
PY
silent_server=$!
trap 'kill $silent_server 2>/dev/null; rm -rf "$scratch"' EXIT
for _ in $(seq 1 100); do [ -s "$scratch/port" ] && break; sleep 0.1; done
"$bin" --set rollout.runs_dir="$scratch/runs" --set policy.tools_dir="$source_dir/skills/tools" \
  --set policy.base_url="http://127.0.0.1:$(cat "$scratch/port")/v1" --set policy.model=silent \
  --set policy.timeout_s=2 --set policy.retries=1 --set policy.retry_backoff_ms=100 \
  --set rollout.retries=1 \
  rollout --corpus "$silent_set" --policy openai --concurrency 1 --log "$scratch/silent_log" --run-id ps \
  >"$scratch/silent_out" 2>"$scratch/silent_err" || true
cat "$scratch/silent_out"
grep -Eq "^ps-0000-retry1 +f1_honest +infrastructure_failure " "$scratch/silent_out" \
  || { tail -20 "$scratch/silent_err"; fail "the silent policy's episode was not reported as an infrastructure failure after its retry"; }
grep -q "ps-0000: infrastructure failure" "$scratch/silent_err" || fail "no retry after the first silent attempt"
"$bin" log export "$scratch/silent_log" > "$scratch/silent.jsonl"
python3 - "$scratch/silent.jsonl" <<'PY'
import collections, json, sys
started, ended, finals = [], collections.Counter(), collections.defaultdict(list)
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "episode_started":
        started.append(r["episode"])
    if r["type"] == "episode_ended":
        ended[(r["episode"], r["payload"]["reason"])] += 1
    if r["type"] == "reward_record" and r["sender"] == "episode":
        finals[r["episode"]].append((r["payload"]["reward"], r["payload"]["error"]))
assert started == ["ps-0000", "ps-0000-retry1"], started
assert set(ended) == {(e, "infrastructure_failure") for e in started} and set(ended.values()) == {1}, dict(ended)
# One final record per attempt, charged -1 and saying why nothing was evaluated.
assert sorted(finals) == started and all(len(v) == 1 for v in finals.values()), dict(finals)
assert all(v[0][0] == -1 and "not evaluated" in v[0][1] for v in finals.values()), dict(finals)
PY
echo "silent policy: both attempts ended once each as infrastructure failures, with one final record each"
