#!/usr/bin/env bash
# Prepares .device-vendor/ (git-ignored) with what a GPU machine whose image has CUDA, CMake and
# Python but no Debian packages lacks: the doctest and nlohmann/json headers and a Google Benchmark
# build, copied from this machine's Debian packages (scripts/setup.sh installs them). The device run
# carries the folder: run(command="tests/device/run.sh", carry=[".device-vendor"]).
set -euo pipefail
cd "$(dirname "$0")/../.."
./scripts/setup.sh
v=.device-vendor/usr
rm -rf .device-vendor
mkdir -p "$v/include" "$v/lib/x86_64-linux-gnu/cmake"
cp -r /usr/include/doctest /usr/include/nlohmann /usr/include/benchmark "$v/include/"
cp -a /usr/lib/x86_64-linux-gnu/libbenchmark*.so* "$v/lib/x86_64-linux-gnu/" 2>/dev/null || true
cp -a /usr/lib/x86_64-linux-gnu/libbenchmark*.a "$v/lib/x86_64-linux-gnu/" 2>/dev/null || true
cp -r /usr/lib/x86_64-linux-gnu/cmake/benchmark "$v/lib/x86_64-linux-gnu/cmake/"
du -sh .device-vendor
