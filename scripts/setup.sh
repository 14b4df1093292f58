#!/usr/bin/env bash
# Installs what building ds41 needs on a fresh Debian machine (only the packages that are
# missing): a C++20 compiler, CMake, nlohmann/json, doctest, Google Benchmark, PCRE2 and utf8proc (the
# text layer), OpenSSL (ds41-tokenize's SHA-256). The CUDA toolkit is
# optional (nvcc on PATH turns the device path on).
#   scripts/setup.sh               build + test dependencies
#   scripts/setup.sh --sanitizers  also clang and its runtimes (ASan/UBSan/LSan, libFuzzer)
set -euo pipefail
pkgs=(g++ cmake make nlohmann-json3-dev doctest-dev libbenchmark-dev libpcre2-dev libutf8proc-dev libssl-dev)
if [ "${1:-}" = "--sanitizers" ]; then
  pkgs+=(clang libclang-rt-14-dev)
fi
need=()
for pkg in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
done
if ((${#need[@]})); then
  echo "setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi
# nvcc lives outside PATH on some images
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: nvcc found at /usr/local/cuda/bin (add it to PATH to build the CUDA path)"
fi
