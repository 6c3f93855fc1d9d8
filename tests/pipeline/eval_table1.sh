#!/usr/bin/env bash
# `cuda-agent eval` on CPU: two attempts at each of two smoke tasks with the demo policy. Its
# summary.json must be the Table 1 that a hand computation from its own message log gives
# (reward_record and episode_ended of each episode, by the definitions in run_summary.hpp), and
# bad input is a one-line error with status 2.
set -euo pipefail
bin="$(realpath "$1")"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$source_dir"
# What is checked here is the table's arithmetic and the exit statuses, not speed: a few timed
# runs per measurement instead of the default 50.
few_runs=(--set harness.timed_runs=5 --set harness.warmup_runs=2)

"$bin" --set rollout.runs_dir="$scratch/runs" "${few_runs[@]}" \
  eval --corpus smoke --policy demo --device cpu --tasks 'smoke_0[12]*' --attempts 2 --out "$scratch/eval" \
  >"$scratch/out" 2>"$scratch/err" || { cat "$scratch/out"; tail -20 "$scratch/err"; exit 1; }
cat "$scratch/out"
"$bin" log export "$scratch/eval/log" >"$scratch/log.jsonl"
python3 - "$scratch/log.jsonl" "$scratch/eval/summary.json" <<'PY'
import collections, json, math, sys
task, level, reward, speedup, ended = {}, {}, {}, {}, {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    e, p = r["episode"], r["payload"]
    if r["type"] == "task_spec" and r["sender"] == "rollout":
        task[e], level[e] = p["id"], p["level"]
    if r["sender"] == "episode" and r["receiver"] == "rollout":
        if r["type"] == "reward_record":
            reward[e], speedup[e] = p["reward"], (p["speedup_eager"], p["speedup_compile"])
        if r["type"] == "episode_ended":
            ended[e] = p["reason"]
attempts = collections.defaultdict(list)
for e in ended:
    attempts[task[e]].append(e)
assert len(attempts) == 2 and all(len(v) == 2 for v in attempts.values()), attempts
got = json.load(open(sys.argv[2]))
row = got["overall"]
best = {t: max(es, key=lambda e: (reward.get(e, -1), speedup.get(e, (0, 0))[0] or 0)) for t, es in attempts.items()}
passing = [t for t in attempts if reward.get(best[t], -1) >= 1]
want = {
    "tasks": 2, "attempts": 4, "k": 2,
    "pass_rate": len(passing) / 2,
    "faster_than_eager": sum(reward.get(best[t], -1) >= 2 for t in attempts) / 2,
    "faster_than_compile": sum(reward.get(best[t], -1) == 3 for t in attempts) / 2,
    "pass_at_1": sum(sum(reward.get(e, -1) >= 1 for e in es) / len(es) for es in attempts.values()) / 2,
}
for key, value in want.items():
    assert abs(row[key] - value) < 1e-12, (key, row[key], value)
assert len(passing) == 2, "the demos should pass"  # so that the geomeans below are of something
for i, name in enumerate(["geomean_speedup_eager", "geomean_speedup_compile"]):
    logs = [math.log(speedup[best[t]][i]) for t in passing]
    assert abs(row[name] - math.exp(sum(logs) / len(logs))) < 1e-9 * row[name], name
assert got["levels"]["1"] == row and got["infrastructure_failures"] == []
assert got["run_id"] == "eval" and got["corpus"] == "smoke" and "definitions" in got
print("summary.json matches the hand computation from the log:", json.dumps(row))
PY
grep -q "pass@2" "$scratch/out" || { echo "FAILED: no pass@2 column"; exit 1; }

for args in "--levels 9" "--attempts 0" "--resume"; do
  set +e
  # shellcheck disable=SC2086
  "$bin" eval --corpus smoke --policy demo --device cpu $args >"$scratch/bad_out" 2>"$scratch/bad_err"
  status=$?
  set -e
  [ "$status" -eq 2 ] && [ "$(wc -l <"$scratch/bad_err")" -eq 1 ] \
    || { echo "FAILED: eval $args: status $status, stderr:"; cat "$scratch/bad_err"; exit 1; }
done

# A set with a broken task (it imports a module that does not exist): refused before anything is
# built or run, one line naming the task, status 3, and no episode of any task.
mkdir -p "$scratch/broken"
cp corpus/tasks/smoke/smoke_01_relu.py "$scratch/broken/"
sed 's/^import torch$/import torch\nimport no_such_module_here/' corpus/tasks/smoke/smoke_02_gelu.py >"$scratch/broken/smoke_02_gelu.py"
python3 - "$scratch/broken" <<'PY'
import json, sys
index = json.load(open("corpus/tasks/smoke/index.json"))
index["tasks"] = [dict(t, demo="") for t in index["tasks"] if t["id"] in ("smoke_01_relu", "smoke_02_gelu")]
json.dump(index, open(sys.argv[1] + "/index.json", "w"))
PY
grep -q no_such_module_here "$scratch/broken/smoke_02_gelu.py" || { echo "FAILED: the broken task was not written"; exit 1; }
set +e
"$bin" --set rollout.runs_dir="$scratch/runs" --set logging.level=warn \
  eval --corpus "$scratch/broken" --policy demo --device cpu --out "$scratch/eval-broken" >"$scratch/bad_out" 2>"$scratch/bad_err"
status=$?
set -e
[ "$status" -eq 3 ] && [ "$(wc -l <"$scratch/bad_err")" -eq 1 ] && grep -q "task smoke_02_gelu is broken" "$scratch/bad_err" \
  && grep -q no_such_module_here "$scratch/bad_err" && [ ! -e "$scratch/eval-broken/episodes" ] \
  || { echo "FAILED: eval of a broken set: status $status, stderr:"; cat "$scratch/bad_err"; exit 1; }

# A task that imports but whose inputs cannot be drawn passes that check; its episode's verify and
# final evaluation then fail as the task's, not the candidate's: an infrastructure failure, left
# out of the table (exit 4), never the candidate's r = -1.
sed 's/^    return \[torch.randn(rows, cols)\]$/    raise RuntimeError("these inputs cannot be drawn")/' \
  corpus/tasks/smoke/smoke_02_gelu.py >"$scratch/broken/smoke_02_gelu.py"
grep -q "cannot be drawn" "$scratch/broken/smoke_02_gelu.py" || { echo "FAILED: the broken task was not written"; exit 1; }
python3 - "$scratch/broken" "$source_dir" <<'PY'
import json, sys
index = json.load(open(sys.argv[1] + "/index.json"))
for t in index["tasks"]:
    t["demo"] = f"{sys.argv[2]}/corpus/demos/smoke/{t['id']}"
json.dump(index, open(sys.argv[1] + "/index.json", "w"))
PY
set +e
"$bin" --set rollout.runs_dir="$scratch/runs" --set rollout.retries=0 "${few_runs[@]}" \
  eval --corpus "$scratch/broken" --policy demo --device cpu --out "$scratch/eval-inputs" >"$scratch/inputs_out" 2>"$scratch/inputs_err"
status=$?
set -e
python3 - "$scratch/eval-inputs/summary.json" "$status" "$scratch/inputs_out" <<'PY' || { cat "$scratch/inputs_out"; tail -5 "$scratch/inputs_err"; exit 1; }
import json, sys
got = json.load(open(sys.argv[1]))
assert sys.argv[2] == "4", f"exit status {sys.argv[2]}, not 4"
failed = got["infrastructure_failures"]
# One line per episode: id, task, how it ended, reward, error.
ended = {line.split()[1]: line.split() for line in open(sys.argv[3]) if " reward " in line}
assert ended["smoke_02_gelu"][2] == "infrastructure_failure", ended
assert failed == [ended["smoke_02_gelu"][0]], (failed, ended)
row = got["overall"]
assert row["tasks"] == 1 and row["pass_rate"] == 1.0, row  # smoke_01 alone, and it passed
print("a task whose inputs cannot be drawn: an infrastructure failure, left out:", json.dumps(failed))
PY
"$bin" log export "$scratch/eval-inputs/log" | grep '"episode_ended"' | grep -q "the task is broken, not the candidate" \
  || { echo "FAILED: the episode's end does not say the task is broken"; exit 1; }
echo "eval: Table 1 as computed by hand; bad input is a one-line error with status 2, a broken task one with status 3"
