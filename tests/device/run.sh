#!/usr/bin/env bash
# Everything that needs a GPU, in one go: the device golden tests, ds41-golden --backend cuda on
# every golden (exact, and --numerics fast teacher-forced), the graph oracle, the device
# benchmarks and (where the machine lets it) a compute-sanitizer memcheck pass; logs land in $OUT
# (or ./device-out).
#
# Two ways to get the binaries there (a device machine's time is short, so build here if you can):
#   prebuilt: tests/device/prebuild.sh here, then run(command="tests/device/run.sh", carry=[".device-bin"])
#   build there: tests/device/vendor.sh here, then run(command="tests/device/run.sh", carry=[".device-vendor"])
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH"
step() { echo "== $1 ($(date +%s))"; }
{ nvidia-smi; nvcc --version; ldd --version | head -1; uname -a; } > "$out/machine.txt" 2>&1
grep -E "H200|H100|Driver" "$out/machine.txt" | head -3

# a binary that loads exits 0 (or 77 where it finds no device); one the loader refuses, 127
prebuilt_runs() { [ -x .device-bin/test_golden_cuda ] || return 1; ./.device-bin/test_golden_cuda --version > /dev/null 2>&1; local rc=$?; [ $rc = 0 ] || [ $rc = 77 ]; }
export LD_LIBRARY_PATH="$root/.device-bin:${LD_LIBRARY_PATH:-}"
if prebuilt_runs; then
  bin="$root/.device-bin"
  # the binaries were built with the golden folder's absolute path of the machine that built them
  built_golden=$(cat .device-bin/golden_dir)
  if [ "$built_golden" != "$root/golden" ]; then
    mkdir -p "$(dirname "$built_golden")" && rm -rf "$built_golden" && ln -s "$root/golden" "$built_golden"
  fi
  echo "using prebuilt binaries"
else
  [ -x .device-bin/test_golden_cuda ] && { echo "prebuilt binaries do not run here:"; ./.device-bin/test_golden_cuda --version 2>&1 | head -3; }
  step "building here"
  vendor="$root/.device-vendor/usr"
  export LD_LIBRARY_PATH="$vendor/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DDS41_ENABLE_CUDA=ON -DDS41_THIRD_PARTY_DIR="$vendor/include" \
    -Dbenchmark_DIR="$vendor/lib/x86_64-linux-gnu/cmake/benchmark" -DDS41_BUILD_BENCHMARKS=ON > "$out/configure.log" 2>&1 \
    || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build-device -j"$(nproc)" --target test_golden_cuda ds41-golden bench_cuda > "$out/build.log" 2>&1 \
    || { grep -E "error" "$out/build.log" | head -30; exit 1; }
  bin="$root/build-device/bin"
  mkdir -p "$bin"
  cp build-device/tests/test_golden_cuda build-device/examples/ds41-golden build-device/bench/bench_cuda "$bin/"
fi

status=0
step "device golden tests"
timeout 150 "$bin/test_golden_cuda" --duration=true 2>&1 | tee "$out/test_golden_cuda.log" | grep -v "^[0-9.]* s: " | tail -40 || status=1
grep -E "^[0-9.]+ s: " "$out/test_golden_cuda.log" | sort -rn | head -12
step "ds41-golden --backend cuda"
for g in golden/ds41_tiny_golden.json golden/extra/*.json; do
  [ -e "$g" ] || continue
  echo "-- $g"
  timeout 60 "$bin/ds41-golden" "$g" --backend cuda --quiet 2>&1 | tee -a "$out/golden_cuda.log" | tail -3 || status=1
done
step "ds41-golden --backend cuda --numerics fast (float captures within rel-L2 1e-2; discrete differences counted apart)"
for g in golden/ds41_tiny_golden.json golden/ds41_tiny_fp8_golden.json golden/extra/*.json; do
  [ -e "$g" ] || continue
  echo "-- $g (teacher-forced)"
  timeout 60 "$bin/ds41-golden" "$g" --backend cuda --numerics fast --force-inputs --quiet 2>&1 | tee -a "$out/golden_cuda_fast.log" | tail -3 || status=1
done
echo "-- golden/ds41_tiny_golden.json (free-running)"
timeout 60 "$bin/ds41-golden" golden/ds41_tiny_golden.json --backend cuda --numerics fast --quiet 2>&1 | tee -a "$out/golden_cuda_fast.log" | tail -3 || status=1
step "graph oracle (eager vs graph-replayed decode, bit for bit)"
timeout 60 "$bin/ds41-golden" golden/ds41_tiny_golden.json --backend cuda --graph-oracle 2>&1 | tee "$out/graph_oracle.log" | tail -12 || status=1
step "device benchmarks"
timeout 420 "$bin/bench_cuda" --benchmark_min_time=0.1 --benchmark_format=console \
  --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json 2>&1 | tee "$out/bench_cuda.txt" | grep -v "^-\|^Bench" | cut -c1-150
if [ "${DS41_DEVICE_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null; then
  step "compute-sanitizer memcheck (device vs host captures, the tiled Linear tests)"
  timeout 100 compute-sanitizer --tool memcheck --leak-check no --print-limit 20 \
    "$bin/test_golden_cuda" -tc="*device captures against host*,*awkward shapes*,*unaligned data*,*Flash shapes*,*fast Linear against*" 2>&1 | tee "$out/memcheck.log" | tail -25
fi
step "done"
exit $status
