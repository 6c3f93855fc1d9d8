#!/usr/bin/env bash
# GPU measurements on the H200 host, in stages that fit one device call each:
#
#   STAGE=build    tools/gpu/build_and_test.sh (build-gpu/, the CUDA build test, both binding
#                  compilers, `bench build` unless BENCH_BUILD=0)
#   STAGE=harness  the GPU red-team cases, the timing variants (where a run's fixed cost comes
#                  from) and the timing study (repeatability, do_bench agreement)
#   STAGE=rollout  a demonstration rollout of the bench set (TASKS='bench_0*' picks some) on cuda
#                  and its hermetic replay, then a small `corpus synth` on cuda unless SYNTH=0;
#                  RESUME=1 continues a run cut off by its time box (ROLLOUT_LOG names its log)
#   STAGE=corpus   every bench demonstration through `cuda-agent check` (DEMO_GROUPS streams at
#                  once), then a `corpus synth` on cuda
#   STAGE=smoke    what every change to skills/, kernels/ or actors/ must pass, from a fresh
#                  machine in about 4 minutes: the build with the CUDA build test, the GPU red
#                  team, `check` of three bench demonstrations (each r >= 1), a 4-episode
#                  demonstration rollout and its hermetic replay, and a `--policy torch` rollout
#                  on cuda with the decode pool and CUDA graphs (test_gpu_torch_rollout.py). When every part passes it writes
#                  $OUT_DIR/gpu-smoke.json (commit it as docs/gpu-smoke.json) with the content
#                  digest of skills/, kernels/ and actors/ as they were run; else gpu-smoke-failed.json.
#                  SMOKE_PART=first, then SMOKE_PART=rest, splits it in two calls (see SMOKE_STATE below).
#   STAGE=learn    config/examples/learn-bench.toml (LEARN_CONFIG): a tiny random model learns the
#                  bench demonstrations by RFT, then live PPO, with greedy evaluations between
#                  (train --out LEARN_OUT, default runs/learn-bench on the machine); builds first
#                  where build-gpu/ is missing; RESUME=1 continues a run cut off by its time box.
#                  metrics.jsonl, eval.jsonl and the log's tail come back in $OUT_DIR.
#   STAGE=kernelbench  KernelBench on cuda: `corpus import` and `corpus validate` of its level 1-3
#                  tasks (KB_DIR, a KernelBench checkout's KernelBench/ folder carried in, default
#                  runs/kb/KernelBench), the KernelBench-format ReLU candidate through `check`
#                  beside the same kernel as a workdir, its build against its own load_inline
#                  (`bench build --kernelbench-file`), and `eval --kernelbench-dir` of it; builds
#                  first where build-gpu/ is missing.
#   STAGE=generate the policy model on cuda in bf16: tests/actors/model/test_gpu_parity.py (logits and 256
#                  greedy tokens of a 0.5B-shaped Qwen2 against transformers; $OUT_DIR/parity.json),
#                  `bench generate` of that shape at its default grid (GEN_BATCHES, GEN_CONTEXTS) and
#                  of Qwen2.5-7B's shape at batch 1 (GEN7B_CONTEXTS; GEN7B=0 skips it; transformers only
#                  with GEN7B_HF=1), each as JSON;
#                  PARITY=0, GEN05B=0 and GEN7B=0 skip a part; BATCHED_DECODE=1 and CUDA_GRAPHS=1 bench policy.batched_decode and policy.cuda_graphs;
#                  builds first where build-gpu/ is missing.
#   STAGE=nodes    a demonstration rollout of bench tasks (NODE_TASKS, 4 episodes) whose GPU slot and
#                  compiler workers all come from a separate `cuda-agent node` process joined over
#                  TCP (`rollout --listen 127.0.0.1:0 --local-slots 0`), and its hermetic replay;
#                  everything in $OUT_DIR/nodes.txt. Needs build-gpu/ (run after the smoke).
#   STAGE=all      build, harness and rollout (the default)
#
# A stage after build needs build-gpu/ from an earlier call on the same machine. Every step has
# its own time box; results go to $OUT_DIR (default $OUT, else runs/pipeline_gpu).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT_DIR:-${OUT:-runs/pipeline_gpu}}
stage=${STAGE:-all}
mkdir -p "$out"
export PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH=/usr/local/cuda/bin:/opt/deps/usr/bin:$PATH
export CUDA_AGENT_HARNESS_PHASES=1  # the harness logs each job's phases (skills/harness/evaluator.py)
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
step() { local t0=$SECONDS; "$@"; local rc=$?; echo "step '$*' rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/steps.txt" >&2; }
wants() { [ "$stage" = "$1" ] || { [ "$stage" = all ] && [ "$1" != corpus ]; }; }

# The digest of the GPU-relevant sources, taken before anything runs (docs/ARCHITECTURE.md, "On the GPU host"; the same command
# checks docs/gpu-smoke.json against a tree).
digest=$(find skills kernels actors -type f ! -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
# SMOKE_PART=first runs the smoke's build, red team and checks and keeps their results in
# SMOKE_STATE (default runs/smoke-state: steps, checks, the digest and the GPU's name);
# SMOKE_PART=rest runs the rollout, its replay and the torch rollout and writes the record of both
# calls, refusing when the sources changed in between. For machines on which the whole smoke does
# not fit one call. The rest runs best on the same warm machine; where that machine was given back,
# carry the first part's state folder to a fresh one (a git-ignored path under runs/) and the
# rest builds build-gpu/ again before it runs; the record then names both GPUs.
smoke_part=${SMOKE_PART:-all}
smoke_state=${SMOKE_STATE:-runs/smoke-state}
if [ "$stage" = smoke ]; then
  rm -f "$out/steps.txt"
  case "$smoke_part" in
    all|first) ;;
    rest)
      if [ "$(cat "$smoke_state/digest" 2>/dev/null)" != "$digest" ]; then
        echo "SMOKE_PART=rest needs the state of SMOKE_PART=first of the same sources ($smoke_state/digest, $digest): run the first part, or carry its state folder" >&2
        exit 2
      fi
      cp "$smoke_state/steps.txt" "$out/steps.txt"
      cp "$smoke_state/checks.txt" "$out/checks.txt"
      split=same
      [ -x build-gpu/tools/cuda-agent ] || split=another ;;  # a fresh machine: the build below runs again
    *) echo "SMOKE_PART must be all, first or rest, not '$smoke_part'" >&2; exit 2 ;;
  esac
fi
if [ "$stage" = smoke ] && { [ "$smoke_part" != rest ] || [ "$split" = another ]; }; then
  OUT_DIR="$out" BUILD_DIR=build-gpu BENCH_BUILD=0 step timeout "${BUILD_S:-300}" bash tools/gpu/build_and_test.sh \
    -R 'BuildTest.Cuda'
fi

if wants build; then
  OUT_DIR="$out" BUILD_DIR=build-gpu step timeout "${BUILD_S:-420}" bash tools/gpu/build_and_test.sh \
    -R "${CTEST_REGEX:-BuildTest.Cuda|BuildTest.BindingFile|device_query}"
fi
if { [ "$stage" = learn ] || [ "$stage" = kernelbench ] || [ "$stage" = generate ]; } && [ ! -x build-gpu/tools/cuda-agent ]; then
  OUT_DIR="$out" BUILD_DIR=build-gpu BENCH_BUILD=0 step timeout "${BUILD_S:-300}" bash tools/gpu/build_and_test.sh \
    -R 'device_query'
fi
bin=build-gpu/tools/cuda-agent
[ -x "$bin" ] || { echo "no $bin: run STAGE=build first on this machine" >&2; exit 2; }
set_args=(--set "harness.python=$PYTHON" --set harness.timed_runs=20)
# Kernel builds sandbox compilers with bubblewrap where the host allows user namespaces.
if ! bwrap --unshare-all --ro-bind / / --die-with-parent true 2>/dev/null; then set_args+=(--set build.sandbox=none); fi
# The episode sandbox drops root to another user; where the host forbids that, keep root.
if ! "$bin" bench sandbox --runs 1 >"$out/sandbox_probe.log" 2>&1; then set_args+=(--set sandbox.run_as_uid=0); fi

if wants harness; then
  step timeout "${REDTEAM_S:-300}" "$PYTHON" -m pytest -q -p no:cacheprovider tests/skills/harness/test_redteam_gpu.py \
    > "$out/redteam_gpu.log" 2>&1
  step timeout "${VARIANTS_S:-150}" "$PYTHON" tools/gpu/timing_variants.py ${VARIANT_TASKS:-bench_05_matmul bench_13_linear_relu} \
    > "$out/timing_variants.txt" 2> "$out/timing_variants.err"
  step timeout "${STUDY_S:-200}" "$PYTHON" tools/gpu/timing_study.py --bin "$bin" "${set_args[@]}" \
    --repeats 10 --runs "${STUDY_RUNS:-50}" ${STUDY_TASKS:-bench_05_matmul bench_13_linear_relu bench_17_attention} \
    > "$out/timing_study.txt" 2> "$out/timing_study.err"
fi

if wants rollout; then
  # Two profiler slots share the one GPU so that the set fits the time box; their timings
  # overlap, so speed-ups here are rough and correctness (reward >= 1) is what counts. A large
  # task's job holds up to ~40 GiB of GPU memory (the reference's outputs in the worker, the input
  # sets and outputs in the candidate's child); more slots have not been tried.
  log=${ROLLOUT_LOG:-$out/rollout_log}
  step timeout "${ROLLOUT_S:-420}" "$bin" "${set_args[@]}" --set rollout.gpu_slots="${GPU_SLOTS:-2}" \
    rollout --corpus bench ${TASKS:+--tasks "$TASKS"} --policy demo --device cuda ${EPISODES:+--episodes "$EPISODES"} --concurrency 4 \
    --log "$log" --run-id gpu ${RESUME:+--resume} > "$out/rollout.txt" 2> "$out/rollout.err"
  step timeout "${REPLAY_S:-90}" "$bin" replay "$log" > "$out/replay.txt" 2>&1
  if [ "${SYNTH:-1}" = 1 ]; then
    step timeout "${SYNTH_S:-150}" "$bin" "${set_args[@]}" corpus synth --device cuda \
      --out "$out/synth_cuda" --count "${SYNTH_COUNT:-24}" --workers "${SYNTH_WORKERS:-1}" --summary "$out/synth_cuda.json" \
      > "$out/synth_cuda.txt" 2> "$out/synth_cuda.log"
  fi
fi

if wants corpus; then
  # Two check streams share the GPU (a large task's job holds up to ~40 GiB of it: reference,
  # inputs and outputs in the worker and the child); synth runs after them, alone. Four streams
  # with synth alongside ran out of GPU memory. Correctness and reward >= 1 are what the checks
  # measure here; their speed-ups are rough.
  groups=${DEMO_GROUPS:-"bench_0* bench_10*|bench_1[1-9]* bench_20*"}
  IFS='|' read -r -a group_list <<< "$groups"
  pids=()
  for i in "${!group_list[@]}"; do
    CUDA_AGENT="$bin" timeout "${DEMOS_S:-300}" bash corpus/check_demos.sh bench cuda "${group_list[$i]}" \
      > "$out/demos_$i.txt" 2> "$out/demos_$i.log" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  cat "$out"/demos_*.txt > "$out/demos.txt"
  echo "demos checked: $(grep -c '^bench_' "$out/demos.txt"), reward below 1 or no result: $(grep '^bench_' "$out/demos.txt" | grep -vc '"reward":[123]')" | tee -a "$out/steps.txt"
  step timeout "${SYNTH_S:-150}" "$bin" "${set_args[@]}" corpus synth --device cuda \
    --out "$out/synth_cuda" --count "${SYNTH_COUNT:-16}" --workers "${SYNTH_WORKERS:-1}" \
    --summary "$out/synth_cuda.json" > "$out/synth_cuda.txt" 2> "$out/synth_cuda.log"
fi
if [ "$stage" = learn ]; then
  learn_out=${LEARN_OUT:-runs/learn-bench}
  step timeout "${LEARN_S:-420}" "$bin" --config "${LEARN_CONFIG:-config/examples/learn-bench.toml}" "${set_args[@]}" \
    --set harness.timed_runs="${LEARN_TIMED_RUNS:-10}" train --out "$learn_out" --device cuda ${RESUME:+--resume} \
    > "$out/learn.txt" 2> "$out/learn.err"
  cp "$learn_out/metrics.jsonl" "$learn_out/eval.jsonl" "$out/" 2>/dev/null
  grep -v '^train: rft ' "$out/learn.err" | tail -c 60000 > "$out/learn_tail.txt"
  rm -f "$out/learn.err"
fi
if [ "$stage" = kernelbench ]; then
  kb_set=$out/kb_set
  rm -rf "$kb_set"
  step timeout "${IMPORT_S:-120}" "$bin" "${set_args[@]}" corpus import kernelbench "${KB_DIR:-runs/kb/KernelBench}" \
    --out "$kb_set" > "$out/kb_import.txt" 2> "$out/kb_import.log"
  step timeout "${VALIDATE_S:-600}" "$bin" "${set_args[@]}" corpus validate "$kb_set" --device cuda --json \
    > "$out/kb_validate.json" 2> "$out/kb_validate.log"
  relu=tests/corpus/kernelbench_candidates/bench_01_relu.py
  step timeout "${CHECK_S:-180}" "$bin" "${set_args[@]}" check --task corpus/tasks/bench/bench_01_relu.py \
    --kernelbench-file "$relu" --device cuda --json > "$out/kb_check_inline.json" 2> "$out/kb_check_inline.log"
  step timeout "${CHECK_S:-180}" "$bin" "${set_args[@]}" check --task corpus/tasks/bench/bench_01_relu.py \
    --solution corpus/demos/bench/bench_01_relu --device cuda --json > "$out/kb_check_workdir.json" 2> "$out/kb_check_workdir.log"
  step timeout "${BENCH_BUILD_S:-240}" "$bin" "${set_args[@]}" bench build --kernelbench-file "$relu" --device cuda \
    > "$out/kb_bench_build.txt" 2> "$out/kb_bench_build.log"
  step timeout "${EVAL_S:-240}" "$bin" "${set_args[@]}" eval --corpus bench --tasks bench_01_relu --device cuda \
    --kernelbench-dir tests/corpus/kernelbench_candidates --out "$out/kb_eval" > "$out/kb_eval.txt" 2> "$out/kb_eval.log"
  cp "$out/kb_eval/summary.json" "$out/kb_eval_summary.json" 2>/dev/null
  rm -rf "$kb_set" "$out/kb_eval"
fi
if [ "$stage" = generate ] && [ "${PARITY:-1}" = 1 ]; then
  CUDA_AGENT_BUILD_DIR=$PWD/build-gpu/tests/actors/model CUDA_AGENT_PARITY_OUT="$out/parity.json" \
    step timeout "${PARITY_S:-240}" "$PYTHON" -m pytest -q -s -p no:cacheprovider tests/actors/model/test_gpu_parity.py \
    > "$out/parity.log" 2>&1
fi
if [ "$stage" = generate ] && [ "${GEN05B:-1}" = 1 ]; then
  step timeout "${GEN_S:-420}" "$bin" "${set_args[@]}" bench generate --device cuda --repeats "${GEN_REPEATS:-2}" \
    ${GEN_BATCHES:+--batches "$GEN_BATCHES"} ${GEN_CONTEXTS:+--contexts "$GEN_CONTEXTS"} ${BATCHED_DECODE:+--batched-decode} ${CUDA_GRAPHS:+--cuda-graphs} --json \
    > "$out/bench_generate_0.5b.json" 2> "$out/bench_generate_0.5b.err"
fi
if [ "$stage" = generate ] && [ "${GEN7B:-1}" = 1 ]; then
  # Without transformers unless GEN7B_HF=1: the roofline needs the engine's side only, and the
  # stage must fit one call (an earlier one ran out of time before any 7B cell).
  gen7b_hf=--no-hf; [ "${GEN7B_HF:-0}" = 1 ] && gen7b_hf=
  step timeout "${GEN7B_S:-300}" "$bin" "${set_args[@]}" bench generate --device cuda --shape qwen2.5-7b --batches 1 \
    --contexts "${GEN7B_CONTEXTS:-1024,8192}" --repeats "${GEN_REPEATS:-2}" $gen7b_hf ${BATCHED_DECODE:+--batched-decode} ${CUDA_GRAPHS:+--cuda-graphs} --json \
    > "$out/bench_generate_7b.json" 2> "$out/bench_generate_7b.err"
fi
if [ "$stage" = nodes ]; then
  log=$out/nodes_log
  token=runs/nodes-token
  rm -rf "$log" && mkdir -p runs && head -c 32 /dev/urandom | base64 > "$token" && chmod 600 "$token"
  t0=$SECONDS
  timeout "${NODES_S:-360}" "$bin" "${set_args[@]}" rollout --corpus bench --policy demo --device cuda \
    --tasks "${NODE_TASKS:-bench_0[1-4]*}" --episodes 4 --concurrency 4 --log "$log" --run-id nodes \
    --listen 127.0.0.1:0 --token-file "$token" --local-slots 0 > "$out/nodes_rollout.txt" 2> "$out/nodes_rollout.err" &
  coordinator=$!
  port=
  for _ in $(seq 600); do
    port=$(grep -o 'listening on 127.0.0.1:[0-9]*' "$out/nodes_rollout.err" | cut -d: -f2)
    [ -n "$port" ] && break
    sleep 0.1
  done
  timeout "${NODES_S:-360}" "$bin" "${set_args[@]}" node --join "127.0.0.1:${port:-0}" --token-file "$token" \
    --device cuda --gpus 0 --compilers 2 --name gpu-node > "$out/nodes_node.txt" 2>&1 &
  node=$!
  wait "$coordinator"; rc=$?
  echo "step 'nodes rollout (coordinator, --local-slots 0)' rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/steps.txt" >&2
  wait "$node"; echo "step 'nodes node process' rc=$? in $((SECONDS - t0)) s" | tee -a "$out/steps.txt" >&2
  step timeout "${REPLAY_S:-90}" "$bin" replay "$log" > "$out/nodes_replay.txt" 2>&1
  "$bin" log export "$log" --out "$out/nodes_log.jsonl" > /dev/null 2>&1
  { echo "== rollout"; cat "$out/nodes_rollout.txt"; echo "== rollout stderr (tail)"; tail -40 "$out/nodes_rollout.err"
    echo "== node"; tail -40 "$out/nodes_node.txt"; echo "== replay"; cat "$out/nodes_replay.txt"
    echo "== membership and requeues in the log"
    grep -E '"type":"(node_join|node_leave|job_requeued|late_answer)"' "$out/nodes_log.jsonl" | cut -c1-300
    echo "== jobs by node (compile and gpu results)"; grep -c '"type":"compile_result"' "$out/nodes_log.jsonl"
  } > "$out/nodes.txt"
  rm -rf "$log" "$out/nodes_log.jsonl" "$out/nodes_rollout.txt" "$out/nodes_rollout.err" "$out/nodes_node.txt" "$out/nodes_replay.txt"
fi
if [ "$stage" = smoke ] && [ "$smoke_part" != rest ]; then
  step timeout "${REDTEAM_S:-300}" "$PYTHON" -m pytest -q -p no:cacheprovider tests/skills/harness/test_redteam_gpu.py \
    > "$out/redteam_gpu.log" 2>&1
  CUDA_AGENT="$bin" CUDA_AGENT_ARGS="${set_args[*]}" step timeout "${CHECKS_S:-240}" bash corpus/check_demos.sh bench cuda \
    "${SMOKE_DEMOS:-bench_05_matmul bench_08_add_relu bench_17_attention}" > "$out/checks.txt" 2> "$out/checks.log"
fi
if [ "$stage" = smoke ] && [ "$smoke_part" = first ]; then
  rm -rf "$smoke_state" && mkdir -p "$smoke_state"
  cp "$out/steps.txt" "$out/checks.txt" "$smoke_state/"
  echo "$digest" > "$smoke_state/digest"
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 > "$smoke_state/host"
  echo "first part done; run SMOKE_PART=rest next (on this machine, or carry $smoke_state to another)" >&2
fi
if [ "$stage" = smoke ] && [ "$smoke_part" != first ]; then
  log=$out/smoke_rollout_log
  rm -rf "$log"
  step timeout "${ROLLOUT_S:-240}" "$bin" "${set_args[@]}" rollout --corpus bench --policy demo --device cuda \
    --tasks "${SMOKE_TASKS:-bench_0[1-4]*}" --episodes 4 --concurrency 4 --log "$log" --run-id smoke \
    > "$out/rollout.txt" 2> "$out/rollout.err"
  step timeout "${REPLAY_S:-90}" "$bin" replay "$log" > "$out/replay.txt" 2>&1
  # The torch policy on cuda: a rollout of more episodes than decode pool slots, with CUDA graphs.
  CUDA_AGENT_BINARY=$PWD/$bin CUDA_AGENT_BUILD_DIR=$PWD/build-gpu/tests/actors/model step timeout "${TORCH_S:-240}" \
    "$PYTHON" -m pytest -q -s -p no:cacheprovider tests/actors/model/test_gpu_torch_rollout.py > "$out/torch_rollout.log" 2>&1
  split_args=(); [ "$smoke_part" = rest ] && split_args=(--split "$split" --first-host "$(cat "$smoke_state/host" 2>/dev/null)")
  # Over both calls, where the smoke was split: the record's seconds are the parts' sum.
  seconds=$(awk '/^step .* rc=-?[0-9]+ in [0-9]+ s$/ { s += $(NF - 1) } END { print s + 0 }' "$out/steps.txt")
  "$PYTHON" tools/gpu/smoke_record.py --steps "$out/steps.txt" --digest "$digest" --commit "${COMMIT:-unknown}" \
    --seconds "$seconds" --checks "$out/checks.txt" --out "$out" "${split_args[@]}"
fi
cat "$out/steps.txt"
