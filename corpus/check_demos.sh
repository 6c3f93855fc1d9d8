#!/usr/bin/env bash
# Checks every demonstration of a shipped set with `cuda-agent check` and prints one line per
# task (id, then the check's JSON) and a reward tally. Exit status 1 if any reward is below 1.
#   corpus/check_demos.sh smoke cpu        corpus/check_demos.sh bench cuda
set -euo pipefail
set_name=${1:?usage: corpus/check_demos.sh SET DEVICE}
device=${2:?usage: corpus/check_demos.sh SET DEVICE}
bin=${CUDA_AGENT:-build/tools/cuda-agent}
root=$(cd "$(dirname "$0")" && pwd)
below=0
for demo in "$root/demos/$set_name"/*/; do
  id=$(basename "$demo")
  line=$("$bin" check --task "$root/tasks/$set_name/$id.py" --solution "$demo" --device "$device" --json)
  echo "$id $line"
  reward=$(printf '%s' "$line" | sed -n 's/.*"reward": *\(-\{0,1\}[0-9]\).*/\1/p')
  if [ -z "$reward" ] || [ "$reward" -lt 1 ]; then below=$((below + 1)); fi
done
echo "demos with reward below 1: $below"
[ "$below" -eq 0 ]
