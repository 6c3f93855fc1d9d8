#!/usr/bin/env bash
# Corpus measurements on a GPU host, after tools/gpu/build_and_test.sh has built build/:
# the bench set through synth's filters on cuda (is each task 1-100 ms eager, compilable,
# deterministic, non-constant?), a synth run on cuda, and every bench demonstration checked.
# Results under $OUT_DIR (default runs/corpus_gpu).
set -uo pipefail
out=${OUT_DIR:-runs/corpus_gpu}
bin=${CUDA_AGENT:-build/tools/cuda-agent}
mkdir -p "$out"
step() { local t0=$SECONDS; "$@"; local rc=$?; echo "step '$1 ${2:-}' rc=$rc in $((SECONDS - t0)) s" >&2; }

step "$bin" corpus validate corpus/tasks/bench --device cuda --filters --json \
  > "$out/bench_filters.json" 2> "$out/bench_filters.log"
step "$bin" corpus synth --device cuda --out "$out/synth_cuda" --count "${SYNTH_COUNT:-200}" \
  --summary "$out/synth_cuda.json" 2> "$out/synth_cuda.log"
step bash corpus/check_demos.sh bench cuda > "$out/bench_demo_checks.txt" 2> "$out/bench_demo_checks.log"
tail -1 "$out/bench_demo_checks.txt" || true
