#!/usr/bin/env bash
# End to end on CPU, all parts real: the demo policy plays a shipped demonstration through the
# sandboxed tools, the compiler pool's build and the locked harness; the log is then replayed
# hermetically and must reproduce every message. `--tasks` picks the one task of the smoke set.
set -euo pipefail
bin="$1"
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
chmod 755 "$scratch"  # sandboxed commands may run as another user and must reach the workdir
"$bin" --set rollout.runs_dir="$scratch/runs" --set policy.demo_dir="$source_dir/corpus/demos" \
  --set policy.tools_dir="$source_dir/skills/tools" --set harness.timed_runs=5 --set harness.warmup_runs=2 \
  rollout --corpus smoke --policy demo --tasks 'smoke_02*' --log "$scratch/log" --run-id ci >"$scratch/out" 2>"$scratch/err" \
  || { cat "$scratch/err"; exit 1; }
cat "$scratch/out"
grep -Eq '^ci-0000 +smoke_02_gelu +agent_done +reward +[123] ' "$scratch/out" \
  || { echo "the demonstration did not earn a positive reward"; tail -20 "$scratch/err"; exit 1; }
"$bin" replay "$scratch/log"
