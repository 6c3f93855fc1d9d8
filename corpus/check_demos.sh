#!/usr/bin/env bash
# Checks every demonstration of a shipped set with `cuda-agent check` and prints one line per
# task (id, then the check's JSON) and a reward tally. Exit status 1 if any reward is below 1.
# Optional globs (one argument, separated by spaces) pick some of the set's tasks by id;
# CUDA_AGENT_ARGS holds options for cuda-agent itself (--set KEY=VALUE ...).
#   corpus/check_demos.sh smoke cpu        corpus/check_demos.sh bench cuda 'bench_0[1-5]* bench_20*'
set -euo pipefail
set_name=${1:?usage: corpus/check_demos.sh SET DEVICE}
device=${2:?usage: corpus/check_demos.sh SET DEVICE}
bin=${CUDA_AGENT:-build/tools/cuda-agent}
pattern=${3:-*}
read -r -a globs <<< "$pattern"  # split only: the globs expand below, under the set's directory
root=$(cd "$(dirname "$0")" && pwd)
[ -d "$root/demos/$set_name" ] || { echo "no demonstrations for set '$set_name' under $root/demos" >&2; exit 2; }
below=0
checked=0
shopt -s nullglob
demos=()
for glob in "${globs[@]}"; do demos+=("$root/demos/$set_name"/$glob/); done
for demo in "${demos[@]}"; do
  checked=$((checked + 1))
  id=$(basename "$demo")
  line=$("$bin" ${CUDA_AGENT_ARGS:-} check --task "$root/tasks/$set_name/$id.py" --solution "$demo" --device "$device" --json)
  echo "$id $line"
  reward=$(printf '%s' "$line" | sed -n 's/.*"reward": *\(-\{0,1\}[0-9]\).*/\1/p')
  if [ -z "$reward" ] || [ "$reward" -lt 1 ]; then below=$((below + 1)); fi
done
[ "$checked" -gt 0 ] || { echo "no demonstration of set '$set_name' matches '$pattern'" >&2; exit 2; }
echo "demos with reward below 1: $below"
[ "$below" -eq 0 ]
