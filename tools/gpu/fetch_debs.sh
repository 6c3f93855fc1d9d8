#!/usr/bin/env bash
# Downloads, on a Debian bookworm machine, the .deb files that tools/gpu/build_and_test.sh
# unpacks on a GPU host without a package registry. The folder is git-ignored. About 53 MB,
# under the device tool's 64 MiB carry limit; clang with its libraries is most of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .deps
cd .deps
# clang++ compiles the kernel build's binding files (build.binding_cxx = auto); libz3-4,
# libedit2, libxml2 and libicu72 are libLLVM's libraries that an Ubuntu host may lack.
apt-get download \
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17 \
  libmsgpack-cxx-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 \
  libgtest-dev googletest nlohmann-json3-dev libcli11-dev libtomlplusplus-dev libtomlplusplus3 \
  bubblewrap libcurl4-openssl-dev \
  clang clang-14 libclang-cpp14 libllvm14 libclang-common-14-dev \
  libz3-4 libedit2 libxml2 libicu72 \
  libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 libutf8proc-dev libutf8proc2
