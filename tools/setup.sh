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
  cmake ninja-build g++ ccache python3 python3-venv bubblewrap \
  libcaf-dev libssl-dev libmsgpack-cxx-dev libspdlog-dev libfmt-dev nlohmann-json3-dev \
  libcli11-dev libtomlplusplus-dev libgtest-dev libcurl4-openssl-dev >/dev/null

python="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q -r tools/requirements.txt

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCUDA_AGENT_PYTHON="$PWD/.venv/bin/python" >/dev/null
cmake --build build -j "$(nproc)"
