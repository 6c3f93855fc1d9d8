#!/usr/bin/env bash
# End to end on CPU, all parts real: the demo policy plays a shipped demonstration through the
# sandboxed tools, the compiler pool's build and the locked harness; the log is then replayed
# hermetically and must reproduce every message, then live (tools, build and harness run again)
# and must reproduce the outcome. `--tasks` picks the one task of the smoke set.
# The harness settings are not the defaults, and every job in the log must say so: the harness
# judges each job by the parameters the job carries (messages.hpp judging_parameters).
set -euo pipefail
bin="$1"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
chmod 755 "$scratch"  # sandboxed commands may run as another user and must reach the workdir
"$bin" --set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$source_dir/corpus/demos" \
  --set policy.tools_dir="$source_dir/skills/tools" --set harness.timed_runs=5 --set harness.warmup_runs=2 --set harness.atol=0.05 \
  rollout --corpus smoke --policy demo --tasks 'smoke_02*' --log "$scratch/log" --run-id ci >"$scratch/out" 2>"$scratch/err" \
  || { cat "$scratch/err"; exit 1; }
cat "$scratch/out"
grep -Eq '^ci-0000 +smoke_02_gelu +agent_done +reward +[123] ' "$scratch/out" \
  || { echo "the demonstration did not earn a positive reward"; tail -20 "$scratch/err"; exit 1; }
# This test alone runs on every core (tests/pipeline/CMakeLists.txt): with two or more, the timed
# runs hold the last one (harness.timing_cpus = auto) and everything else keeps off it.
if [ "$(nproc)" -ge 2 ]; then
  grep -Eq "core [0-9]+ held for CPU timed runs" "$scratch/err" \
    || { echo "FAILED: $(nproc) cores, and no core held for the timed runs"; tail -20 "$scratch/err"; exit 1; }
fi
"$bin" log export "$scratch/log" --out "$scratch/log.jsonl"
python3 - "$scratch/log.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1])]
jobs = [r for r in records if r["type"] in ("verify_job", "profile_job", "evaluate_job", "episode_started")]
assert any(r["type"] == "evaluate_job" for r in jobs), "no evaluate_job in the log"
for r in jobs:
    judging = r["payload"]["judging"]
    assert judging["atol"] == 0.05 and judging["timed_runs"] == 5 and judging["warmup_runs"] == 2, (r["type"], judging)
timed = [r["payload"]["candidate"]["runs"] for r in records if r["type"] == "profile_result"]
assert all(n == 5 for n in timed), timed
print(f"{len(jobs)} jobs and episode starts record atol 0.05 and 5 timed runs; {len(timed)} profiles ran 5")
PY
"$bin" replay "$scratch/log"
# Live: tools, the build and the harness run again for real; only what is incidental to the
# outcome (a cache hit, measured times) may differ, so the episode must be reproduced.
"$bin" --set rollout.runs_dir="$scratch/runs" replay --live "$scratch/log" >"$scratch/live" 2>"$scratch/live.err" \
  || { cat "$scratch/live" "$scratch/live.err"; exit 1; }
cat "$scratch/live"
grep -q '^1 of 1 episodes reproduced live$' "$scratch/live" || { echo "live replay did not reproduce the episode"; exit 1; }
