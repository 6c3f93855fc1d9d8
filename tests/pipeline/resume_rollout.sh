#!/usr/bin/env bash
# A rollout killed outright (SIGKILL to its whole process group, as a lost machine would) and then
# resumed from its log: the episodes the log settled stand, only the others run again (with
# "-resume1" ids), each task ends up with exactly one final reward, and the log still replays.
set -euo pipefail
bin="$1"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="$(mktemp -d)"
chmod 755 "$scratch"  # sandboxed commands may run as another user and must reach the workdir
rollout() {
  "$bin" --set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$source_dir/corpus/demos" \
    --set policy.tools_dir="$source_dir/skills/tools" --set harness.timed_runs=5 --set harness.warmup_runs=2 \
    rollout --corpus smoke --tasks 'smoke_0[1-3]*' --policy demo --concurrency 1 --log "$scratch/log" \
    --run-id rs "$@"
}
fail() { echo "FAILED: $*"; tail -30 "$scratch/err" 2>/dev/null; exit 1; }
ended() {  # how many episodes the log says ended
  "$bin" log export "$scratch/log" 2>/dev/null | grep -c '"sender":"episode","receiver":"rollout","type":"episode_ended"' || true
}

setsid bash -c "$(declare -f rollout); bin='$bin' source_dir='$source_dir' scratch='$scratch'; rollout" \
  >"$scratch/out1" 2>"$scratch/err1" &
leader=$!
trap 'kill -9 -- -$leader 2>/dev/null || true; rm -rf "$scratch"' EXIT
for _ in $(seq 1 600); do
  [ "$(ended)" -ge 1 ] && break
  kill -0 "$leader" 2>/dev/null || fail "the first rollout ended before it could be killed"
  sleep 0.5
done
[ "$(ended)" -ge 1 ] || fail "no episode ended within 300 s"
kill -9 -- "-$leader"
wait "$leader" 2>/dev/null || true
settled=$(ended)
echo "killed the rollout after $settled episode(s) ended"
[ "$settled" -lt 3 ] || fail "all three episodes ended before the kill; nothing left to resume"

rollout --resume >"$scratch/out" 2>"$scratch/err" || { cat "$scratch/out"; fail "the resumed rollout failed"; }
cat "$scratch/out"
grep -q "resuming run rs: $settled of 3 episodes settled" "$scratch/err" || fail "no resume line for $settled settled"
for task in smoke_01_relu smoke_02_gelu smoke_03_softmax; do
  [ "$(grep -Ec "^rs-[0-9]{4}(-resume1)? +$task +agent_done +reward" "$scratch/out")" = 1 ] \
    || fail "$task: not exactly one row in the final table"
done
[ "$(grep -Ec '^rs-[0-9]{4}-resume1 ' "$scratch/out")" = $((3 - settled)) ] || fail "resumed ids"

# From the log: one final reward per task, the killed run's unfinished episode left incomplete.
"$bin" log export "$scratch/log" > "$scratch/records.jsonl"
python3 - "$scratch/records.jsonl" <<'PY'
import collections, json, sys
task_of, finals = {}, collections.Counter()
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r["type"] == "episode_started":
        task_of[r["episode"]] = r["payload"]["task_id"]
    if r["type"] == "reward_record" and r["sender"] == "episode" and r["receiver"] == "rollout":
        finals[task_of[r["episode"]]] += 1
assert dict(finals) == {"smoke_01_relu": 1, "smoke_02_gelu": 1, "smoke_03_softmax": 1}, dict(finals)
PY
"$bin" replay "$scratch/log" | tail -5
