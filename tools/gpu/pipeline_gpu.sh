#!/usr/bin/env bash
# One batch of GPU measurements on the H200 host: build and the fast tests (build_and_test.sh,
# which also runs `bench build` on the CUDA fixture), the GPU red-team cases of the harness, a
# few bench-set demonstrations through `cuda-agent check`, and a demonstration rollout on cuda
# followed by its hermetic replay. Every step has its own time box; results go to $OUT_DIR.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT_DIR:-${OUT:-runs/pipeline_gpu}}
mkdir -p "$out"
export PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH=/usr/local/cuda/bin:/opt/deps/usr/bin:$PATH
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
step() { local t0=$SECONDS; "$@"; local rc=$?; echo "step '$*' rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/steps.txt" >&2; }

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  OUT_DIR="$out" BUILD_DIR=build-gpu step timeout 330 bash tools/gpu/build_and_test.sh \
    -R 'BuildTest|device_query|supervisor|pool_fixture|peers_fixture|rollout_fixture|routed'
fi
bin=build-gpu/tools/cuda-agent
set_args=(--set "harness.python=$PYTHON" --set harness.timed_runs=20)
# The episode sandbox drops root to another user; where the host forbids that, keep root.
if ! "$bin" bench sandbox --runs 1 >"$out/sandbox_probe.log" 2>&1; then set_args+=(--set sandbox.run_as_uid=0); fi
step timeout 120 "$PYTHON" -m pytest -q -p no:cacheprovider tests/harness/test_redteam_gpu.py \
  > "$out/redteam_gpu.log" 2>&1
for id in $(ls corpus/demos/bench | head -"${DEMOS:-3}"); do
  step timeout 90 "$bin" "${set_args[@]}" check --task "corpus/tasks/bench/$id.py" \
    --solution "corpus/demos/bench/$id" --device cuda --json >> "$out/bench_demo_checks.txt" 2>>"$out/bench_demo_checks.log"
done
step timeout 150 "$bin" "${set_args[@]}" rollout --corpus bench --policy demo --device cuda --episodes 2 \
  --concurrency 2 --log "$out/rollout_log" --run-id gpu > "$out/rollout.txt" 2> "$out/rollout.err"
step timeout 60 "$bin" replay "$out/rollout_log" > "$out/replay.txt" 2>&1
cat "$out/steps.txt"
