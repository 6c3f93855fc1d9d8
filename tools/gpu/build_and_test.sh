#!/usr/bin/env bash
# Builds and tests cuda-agent on a GPU host that has no package registry (the H200 host).
#
# Debian bookworm packages travel as .deb files in $DEPS_DIR (default .deps/, fetched on a
# bookworm machine with tools/gpu/fetch_debs.sh) and are unpacked under /opt/deps, never into /.
# LibTorch comes from the host's own torch (must be 2.11.0). Writes logs and timings to $OUT_DIR
# (default $OUT where set, else build-gpu/).
#
#   tools/gpu/build_and_test.sh [extra ctest arguments]
set -euo pipefail
cd "$(dirname "$0")/../.."

deps_dir="${DEPS_DIR:-.deps}"
prefix=/opt/deps
build_dir="${BUILD_DIR:-build-gpu}"
out_dir="${OUT_DIR:-${OUT:-$build_dir}}"
python="$(command -v "${PYTHON:-python3}")"
mkdir -p "$out_dir" "$prefix"

stamp() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }'; }

t0=$(stamp)
shopt -s nullglob
debs=("$deps_dir"/*.deb)
[ ${#debs[@]} -gt 0 ] || { echo "no .deb files in $deps_dir: run tools/gpu/fetch_debs.sh on a bookworm machine" >&2; exit 2; }
for deb in "${debs[@]}"; do dpkg -x "$deb" "$prefix"; done
export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# bwrap (package bubblewrap) for the episode sandbox, found by name (sandbox.bwrap = "bwrap").
export PATH="$prefix/usr/bin:$PATH"

"$python" -c 'import torch; assert torch.__version__.startswith("2.11.0"), torch.__version__' \
  || { echo "$python must have torch 2.11.0" >&2; exit 2; }

# The kernel build sandboxes compilers with bubblewrap, carried as a .deb like the libraries.
# It needs user namespaces; where the host refuses them, builds run unsandboxed (with a warning).
bwrap="$prefix/usr/bin/bwrap"
if "$bwrap" --unshare-all --ro-bind / / --die-with-parent true 2>"$out_dir/bwrap.log"; then
  export CUDA_AGENT_BWRAP="$bwrap"
  build_sandbox=(--set "build.bwrap=$bwrap")
else
  echo "warning: bubblewrap does not work here ($(head -1 "$out_dir/bwrap.log")); kernel builds run with build.sandbox=none" >&2
  build_sandbox=(--set build.sandbox=none)
fi

t1=$(stamp)
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix/usr" \
  -DCMAKE_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu" \
  -DCMAKE_INCLUDE_PATH="$prefix/usr/include" \
  -DCUDA_AGENT_PYTHON="$python" 2>&1 | tee "$out_dir/configure.log"
t2=$(stamp)
# TARGET=cuda-agent builds the program alone (no tests), CTEST=0 skips the tests.
cmake --build "$build_dir" -j "$(nproc)" ${TARGET:+--target "$TARGET"} 2>&1 | tee "$out_dir/build.log"
t3=$(stamp)
ctest_rc=skipped
if [ "${CTEST:-1}" = 1 ]; then
  set +e
  ctest --test-dir "$build_dir" --output-on-failure -j 4 "$@" 2>&1 | tee "$out_dir/ctest.log"
  ctest_rc=${PIPESTATUS[0]}
  set -e
fi
t4=$(stamp)
"$build_dir/tools/cuda-agent" doctor 2>&1 | tee "$out_dir/doctor.log"
# Kernel build speed on the CUDA fixture: cold, warm and torch.utils.cpp_extension.load.
bench_rc=skipped
if [ "${BENCH_BUILD:-1}" = 1 ]; then
  set +e
  "$build_dir/tools/cuda-agent" "${build_sandbox[@]}" --set "harness.python=$python" \
    bench build tests/kernels/build/fixtures/cuda_add --device cuda 2>&1 | tee "$out_dir/bench_build.log"
  bench_rc=${PIPESTATUS[0]}
  set -e
fi
t5=$(stamp)

cat <<SUMMARY | tee "$out_dir/summary.txt"
host:       $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores
unpack:     $(elapsed "$t0" "$t1") s
configure:  $(elapsed "$t1" "$t2") s
build:      $(elapsed "$t2" "$t3") s
ctest:      $(elapsed "$t3" "$t4") s (exit $ctest_rc)
bench build: $(elapsed "$t4" "$t5") s (exit $bench_rc, sandbox: ${build_sandbox[*]})
SUMMARY
[ "$ctest_rc" = skipped ] || exit "$ctest_rc"
