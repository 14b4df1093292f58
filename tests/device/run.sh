#!/usr/bin/env bash
# Everything that needs a GPU, in one go, on a machine with CUDA, CMake and a C++ compiler:
# builds the CUDA targets, runs the device golden tests, ds41-golden --backend cuda, the graph
# oracle, and the device benchmarks; logs land in $OUT (or ./device-out).
#   here:   tests/device/vendor.sh        (once: headers + Google Benchmark into .device-vendor/)
#   there:  tests/device/run.sh           (carry .device-vendor)
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
vendor="$PWD/.device-vendor/usr"
export PATH="/usr/local/cuda/bin:$PATH"
export LD_LIBRARY_PATH="$vendor/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
{ nvidia-smi; nvcc --version; cmake --version; } > "$out/machine.txt" 2>&1
jobs=$(nproc)
cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DDS41_ENABLE_CUDA=ON -DDS41_THIRD_PARTY_DIR="$vendor/include" \
  -Dbenchmark_DIR="$vendor/lib/x86_64-linux-gnu/cmake/benchmark" -DDS41_BUILD_BENCHMARKS=ON > "$out/configure.log" 2>&1 \
  || { tail -30 "$out/configure.log"; exit 1; }
cmake --build build-device -j"$jobs" --target test_golden_cuda ds41-golden bench_cuda > "$out/build.log" 2>&1 \
  || { grep -E "error" "$out/build.log" | head -30; exit 1; }
status=0
echo "== device golden tests"
./build-device/tests/test_golden_cuda 2>&1 | tee "$out/test_golden_cuda.log" | tail -15 || status=1
echo "== ds41-golden --backend cuda"
./build-device/examples/ds41-golden golden/ds41_tiny_golden.json --backend cuda --quiet 2>&1 | tee "$out/golden_cuda.log" | tail -5 || status=1
for g in golden/extra/*.json; do
  [ -e "$g" ] || continue
  ./build-device/examples/ds41-golden "$g" --backend cuda --quiet 2>&1 | tail -2 || status=1
done
echo "== graph oracle (eager vs graph-replayed decode, bit for bit)"
./build-device/examples/ds41-golden golden/ds41_tiny_golden.json --backend cuda --graph-oracle 2>&1 | tee "$out/graph_oracle.log" | tail -12 || status=1
echo "== device benchmarks"
./build-device/bench/bench_cuda --benchmark_min_time=0.2 --benchmark_format=console \
  --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json 2>&1 | tee "$out/bench_cuda.txt" | tail -15
exit $status
