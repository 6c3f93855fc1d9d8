#!/usr/bin/env bash
# KernelBench-format candidates (load_inline) on CPU, judged by the same build, harness and reward
# as workdir solutions: `check --kernelbench-file` gives the ReLU written with load_inline the
# reward of the same kernel laid out as a workdir (the smoke demonstration); a candidate whose
# sources cannot be read from its text is a candidate that did not compile (r = -1, the reason
# in its error); `eval --kernelbench-dir` judges a directory of generations through the whole
# pipeline and records how they were built; bad input is one line with status 2.
set -euo pipefail
bin="$(realpath "$1")"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
generations="$source_dir/tests/corpus/kernelbench_candidates"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"  # any working directory

run() { "$bin" --set rollout.runs_dir="$scratch/runs" "$@"; }

run check --task "$source_dir/corpus/tasks/smoke/smoke_01_relu.py" \
  --kernelbench-file "$generations/smoke_01_relu.py" --json >inline.json 2>inline.err \
  || { tail -20 inline.err; exit 1; }
run check --task "$source_dir/corpus/tasks/smoke/smoke_01_relu.py" \
  --solution "$source_dir/corpus/demos/smoke/smoke_01_relu" --json >workdir.json 2>workdir.err \
  || { tail -20 workdir.err; exit 1; }
run check --task "$source_dir/corpus/tasks/smoke/smoke_08_add_relu.py" \
  --kernelbench-file "$generations/smoke_08_add_relu.py" --json >unread.json 2>unread.err \
  || { tail -20 unread.err; exit 1; }
python3 - <<'PY'
import json
inline, workdir, unread = (json.load(open(f)) for f in ("inline.json", "workdir.json", "unread.json"))
print("load_inline:", {k: inline[k] for k in ("compiled", "correct", "reward", "violations")}, inline["candidate"])
print("workdir:    ", {k: workdir[k] for k in ("compiled", "correct", "reward", "violations")})
for key in ("compiled", "correct", "reward", "violations"):
    assert inline[key] == workdir[key], (key, inline[key], workdir[key])
assert inline["correct"] and inline["reward"] >= 1
assert inline["candidate"]["format"] == "kernelbench" and "cuda-agent build" in inline["candidate"]["built_with"]
assert inline["candidate"]["files"] == ["kernels/relu_inline.cpp", "model_new.py"]
assert unread["reward"] == -1 and not unread["compiled"], unread
assert "not converted" in unread["error"] and "changes after it is bound" in unread["error"], unread["error"]
PY

run eval --corpus smoke --device cpu --tasks smoke_01_relu,smoke_08_add_relu \
  --kernelbench-dir "$generations" --out "$scratch/eval" >eval.out 2>eval.err \
  || { cat eval.out; tail -20 eval.err; exit 1; }
cat eval.out
python3 - "$scratch/eval/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
assert s["overall"]["tasks"] == 2 and s["overall"]["pass_rate"] == 0.5, s["overall"]
c = s["candidates"]
assert c["format"] == "kernelbench" and c["converted"] == 1, c
assert list(c["not_converted"]) == ["smoke_08_add_relu"], c
PY
"$bin" log export "$scratch/eval/log" | python3 -c '
import json, sys
rewards = {}
for line in sys.stdin:
    r = json.loads(line)
    if r["type"] == "reward_record" and r["sender"] == "episode" and r["receiver"] == "rollout":
        rewards[r["payload"].get("error") or ""] = r["payload"]["reward"]
bad = [e for e in rewards if "not converted" in e]
assert len(rewards) == 2 and len(bad) == 1 and rewards[bad[0]] == -1, rewards
'

expect_usage() {  # status 2 and one line naming $1
  local status=0
  run "${@:2}" >/dev/null 2>usage.err || status=$?
  [ "$status" -eq 2 ] || { echo "expected status 2, got $status: ${*:2}"; cat usage.err; exit 1; }
  grep -q -- "$1" usage.err || { echo "expected '$1' in:"; cat usage.err; exit 1; }
}
expect_usage "give one candidate" check --task "$source_dir/corpus/tasks/smoke/smoke_01_relu.py" \
  --solution "$source_dir/corpus/demos/smoke/smoke_01_relu" --kernelbench-file "$generations/smoke_01_relu.py"
expect_usage "is not a file" check --task "$source_dir/corpus/tasks/smoke/smoke_01_relu.py" \
  --kernelbench-file "$scratch/missing.py"
expect_usage "no generation for smoke_02_gelu" eval --corpus smoke --device cpu \
  --tasks smoke_01_relu,smoke_02_gelu --kernelbench-dir "$generations" --out "$scratch/eval2"
expect_usage "leave out --policy" eval --corpus smoke --device cpu --policy openai \
  --tasks smoke_01_relu --kernelbench-dir "$generations" --out "$scratch/eval3"
echo "kernelbench candidates: ok"
