#!/usr/bin/env bash
# Downloads, on a Debian bookworm machine, the .deb files that tools/gpu/build_and_test.sh
# unpacks on a GPU host without a package registry. The folder is git-ignored.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
apt-get download \
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 \
  libmsgpack-cxx-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 \
  libgtest-dev googletest nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libtomlplusplus3 \
  bubblewrap
