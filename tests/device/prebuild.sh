#!/usr/bin/env bash
# Builds the device binaries here (nvcc, sm_90 + PTX) into .device-bin/ (git-ignored), so a device
# run spends its short lease running, not compiling: run(command="tests/device/run.sh",
# carry=[".device-bin"]). libstdc++ and libgcc are linked statically (the device image's may be
# older); the CUDA runtime is static by CMake's default; Google Benchmark is the static library
# when one exists, else its shared library travels beside the binaries. DS41_NATIVE=OFF: they run on
# the device machine's CPU, not this one's (ds41-golden's host path is then the scalar fallback).
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${DS41_PREBUILD_DIR:-build-device-prebuilt}"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DDS41_ENABLE_CUDA=ON -DDS41_BUILD_BENCHMARKS=ON -DDS41_NATIVE=OFF \
  -DCMAKE_EXE_LINKER_FLAGS="-static-libstdc++ -static-libgcc" -DCMAKE_BUILD_RPATH='$ORIGIN' > /dev/null
cmake --build "$build" -j"$(nproc)" --target test_golden_cuda ds41-golden bench_cuda
rm -rf .device-bin
mkdir -p .device-bin
cp "$build/tests/test_golden_cuda" "$build/examples/ds41-golden" "$build/bench/bench_cuda" .device-bin/
for lib in $(ldd .device-bin/bench_cuda | awk '/libbenchmark/ {print $3}'); do cp -L "$lib" .device-bin/; done
echo "$PWD/golden" > .device-bin/golden_dir
{ git log -1 --format='%H %s'; git status --short; } > .device-bin/commit  # what the binaries are
strip .device-bin/test_golden_cuda .device-bin/ds41-golden .device-bin/bench_cuda
du -sh .device-bin
