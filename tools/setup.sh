#!/usr/bin/env bash
# Sets up cuda-agent on Debian bookworm: system packages, a Python environment with the pinned
# torch (whose LibTorch the build links), and a build in build/. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends \
  cmake ninja-build g++ clang ccache python3 python3-venv bubblewrap \
  libcaf-dev libssl-dev libmsgpack-cxx-dev libspdlog-dev libfmt-dev nlohmann-json3-dev \
  libcli11-dev libtomlplusplus-dev libgtest-dev libcurl4-openssl-dev libpcre2-dev libutf8proc-dev \
  iproute2 openssl util-linux \
  chromium >/dev/null  # chromium: the report's test opens the page headless (tests/pipeline/report_rollout.sh);
                       # iproute2, openssl, util-linux (unshare): the node tests' partition and TLS certificates

# torch with its CUDA libraries is about 5 GiB installed, and pip holds the wheels beside it
# while it installs; the build adds about 1.2 GiB. Say so at once rather than fail half-installed.
if ! compgen -G ".venv/lib/python3*/site-packages/torch" >/dev/null; then
  for dir in "$PWD" "${TMPDIR:-/tmp}"; do
    free_kib=$(df -Pk "$dir" | awk 'NR == 2 { print $4 }')
    if [ "$free_kib" -lt $((10 * 1024 * 1024)) ]; then
      echo "setup: only $((free_kib / 1024)) MiB free under $dir; free at least 10 GiB there (or set TMPDIR to a roomier disk) and run tools/setup.sh again" >&2
      exit 1
    fi
  done
fi

python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --no-cache-dir -r tools/requirements.txt

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDA_AGENT_PYTHON="$PWD/.venv/bin/python" >/dev/null
cmake --build build -j "$(nproc)"
