#!/usr/bin/env bash
# Installs what building ds41 needs on a fresh Debian machine (only the packages that are
# missing): a C++20 compiler, CMake, nlohmann/json, doctest, Google Benchmark, PCRE2 and utf8proc (the
# text layer), OpenSSL (ds41-tokenize's SHA-256); and for the Python module (docs/PYTHON.md) a
# virtual environment .venv with nanobind, numpy, pytest and gguf (gguf-py, the other GGUF writer
# the tests read) from PyPI, the Python CMake builds the module for and CTest runs pytest with. The
# CUDA toolkit is optional (nvcc on PATH turns the device path on).
#   scripts/setup.sh               build + test dependencies
#   scripts/setup.sh --sanitizers  also clang and its runtimes (ASan/UBSan/LSan, libFuzzer)
set -euo pipefail
cd "$(dirname "$0")/.."
pkgs=(g++ cmake make nlohmann-json3-dev doctest-dev libbenchmark-dev libpcre2-dev libutf8proc-dev libssl-dev)
# a python3 with venv and headers where the machine has none (a pyenv or other python3 on PATH is used as it is)
if ! command -v python3 >/dev/null; then
  pkgs+=(python3 python3-venv python3-dev)
fi
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

# The Python module's build and test dependencies, in .venv (git-ignored; CMake prefers it)
if [ ! -x .venv/bin/python ]; then
  echo "setup: making .venv (python3 -m venv) for the Python module"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import nanobind, numpy, pytest, gguf" 2>/dev/null; then
  echo "setup: installing nanobind, numpy, pytest, gguf into .venv (PyPI)"
  .venv/bin/python -m pip install --quiet --disable-pip-version-check nanobind numpy pytest "gguf>=0.19,<0.20"
fi
