#!/usr/bin/env bash
# Measurements on the GPU host after the smoke, on the same warm machine (it needs build-gpu/):
# each part named in PARTS (default: all four) writes under $OUT_DIR and its time to steps.txt.
#
#   parity     tests/actors/model/test_gpu_parity.py -k "greedy and (batched or graphs)": the
#              batched, graphed and pooled-graph decode paths against transformers in bf16
#   generate   `bench generate` of a 0.5B Qwen2 shape, batches GEN_BATCHES (1,8,32) at context
#              1024: per-layer CUDA graphs and the decode pool's one graph side by side, with
#              transformers at the same cells; then the 7B shape at batch 1 with the pool
#              (GEN7B=0 skips it)
#   attention  tools/bench/attention_kernels.py: SDPA's flash, cuDNN and efficient kernels at the
#              learner's shapes
#   learn      `bench learn` of the 0.5B shape in bf16, PPO and RFT at LEARN_TOKENS (8k and 32k),
#              once per ';'-separated option set in LEARN_VARIANTS (default: "--attention
#              default;--attention cudnn"), side by side in learn_<i>.txt, each cell's extra
#              profiled step listing its PROFILE_TOP (15) costliest kernels
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT_DIR:-${OUT:-runs/measure}}
mkdir -p "$out"
export PYTHON=${PYTHON:-/opt/torch/.venv/bin/python3}
export PATH=/usr/local/cuda/bin:/opt/deps/usr/bin:$PATH
export LD_LIBRARY_PATH=/opt/deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
step() { local t0=$SECONDS; "$@"; local rc=$?; echo "step '$*' rc=$rc in $((SECONDS - t0)) s" | tee -a "$out/steps.txt" >&2; }
parts=" ${PARTS:-parity generate attention learn} "
bin=build-gpu/tools/cuda-agent
[ -x "$bin" ] || { echo "no $bin: run the smoke (or STAGE=build) on this machine first" >&2; exit 2; }
set_args=(--set "harness.python=$PYTHON")
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/device.txt" 2>&1

if [[ $parts == *" parity "* ]]; then
  CUDA_AGENT_BUILD_DIR=$PWD/build-gpu/tests/actors/model CUDA_AGENT_PARITY_OUT="$out/parity.json" \
    step timeout "${PARITY_S:-300}" "$PYTHON" -m pytest -q -s -p no:cacheprovider tests/actors/model/test_gpu_parity.py \
    -k "greedy and (batched or graphs)" > "$out/parity.log" 2>&1
fi
if [[ $parts == *" generate "* ]]; then
  for variant in graphs pool; do
    pool=; [ "$variant" = pool ] && pool=--decode-pool
    hf=--no-hf; [ "$variant" = graphs ] && hf=  # transformers once, in the first run
    step timeout "${GEN_S:-300}" "$bin" "${set_args[@]}" bench generate --device cuda --batches "${GEN_BATCHES:-1,8,32}" \
      --contexts 1024 --repeats "${GEN_REPEATS:-3}" --batched-decode --cuda-graphs $pool $hf --json \
      > "$out/generate_0.5b_$variant.json" 2> "$out/generate_0.5b_$variant.err"
  done
  if [ "${GEN7B:-1}" = 1 ]; then
    step timeout "${GEN7B_S:-300}" "$bin" "${set_args[@]}" bench generate --device cuda --shape qwen2.5-7b --batches 1 \
      --contexts 1024 --repeats 3 --no-hf --batched-decode --cuda-graphs --decode-pool --json \
      > "$out/generate_7b_pool.json" 2> "$out/generate_7b_pool.err"
  fi
fi
if [[ $parts == *" attention "* ]]; then
  step timeout 180 "$PYTHON" tools/bench/attention_kernels.py --tokens 8192,32768 > "$out/attention_kernels.txt" 2>&1
fi
if [[ $parts == *" learn "* ]]; then
  IFS=';' read -r -a variants <<< "${LEARN_VARIANTS:---attention default;--attention cudnn}"
  for i in "${!variants[@]}"; do
    read -r -a extra <<< "${variants[$i]}"
    echo "variant $i: ${variants[$i]}" > "$out/learn_$i.txt"
    step timeout "${LEARN_S:-240}" "$bin" bench learn --device cuda --shape qwen2-0.5b --compute-dtype bfloat16 \
      --tokens "${LEARN_TOKENS:-8192,32768}" --repeats 2 --profile-top "${PROFILE_TOP:-15}" "${extra[@]}" \
      >> "$out/learn_$i.txt" 2>&1
  done
fi
