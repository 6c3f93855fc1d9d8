#!/usr/bin/env bash
# Faults inside one rollout, all real, on CPU: beside an honest episode, a candidate that
# segfaults in its kernel, one that never returns, an episode whose tool commands fork-bomb and
# never end, and one that never stops calling tools. Each is contained and ends with a
# termination reason and a reward, the honest episodes are unaffected, and the log holds exactly
# one final reward for every episode: none lost, none counted twice.
#
# The tasks and demonstrations are assembled here from the harness red-team candidates
# (tests/harness), so the faults are the same code the harness tests use.
set -euo pipefail
bin="$1"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
candidates="$source_dir/tests/harness/candidates"
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
  cp "$source_dir/tests/harness/kernels/elementwise.cpp" "$demo_dir/$id/kernels/"
  cp "$candidates/$candidate/model_new.py" "$demo_dir/$id/"
  cp "$source_dir/tests/harness/tasks/elementwise.py" "$set_dir/$id.py"
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

python3 - "$set_dir" <<'PY'
import json, os, sys
d = sys.argv[1]
ids = sorted(f[:-3] for f in os.listdir(d) if f.endswith(".py"))
json.dump({"set": "faults", "tasks": [{"id": i, "level": 1, "operators": [], "source": "fault test", "file": i + ".py"} for i in ids]},
          open(os.path.join(d, "index.json"), "w"), indent=1)
PY

# Turn budget 8: the runaway episode (2 writes, 8 reads, then build) hits it; the others need at
# most 6 turns. The hang is cut at 15 s by the harness.
"$bin" --set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$demo_dir" \
  --set policy.tools_dir="$source_dir/skills/tools" --set harness.timed_runs=5 --set harness.warmup_runs=2 \
  --set harness.candidate_timeout_s=15 --set episode.max_turns=8 \
  rollout --corpus "$set_dir" --policy demo --concurrency 3 --log "$scratch/log" --run-id ft \
  >"$scratch/out" 2>"$scratch/err" || { cat "$scratch/out"; tail -30 "$scratch/err"; exit 1; }
cat "$scratch/out"

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
assert len(finals) == 6 and set(finals.values()) == {1}, f"final rewards per episode: {dict(finals)}"
joined = " | ".join(errors.values())
assert "SIGSEGV" in joined, joined
assert "timed out" in joined, joined
# Both of the bad commands were cut at their time limits, the fork bomb with everything it started.
bad = [e for e, t in task_of.items() if t == "f4_bad_commands"]
cut = [o for o in bash_outputs[bad[0]] if "[timed out after" in o]
assert len(cut) == 2, [o[-200:] for o in bash_outputs[bad[0]]]
print("log: one final reward for each of", len(finals), "episodes; both bad commands cut at their limits")
PY

# The faults replay hermetically like any other episode.
"$bin" replay "$scratch/log"
