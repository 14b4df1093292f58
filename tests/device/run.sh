#!/usr/bin/env bash
# Everything that needs a GPU, in one go, inside a deadline (DS41_DEVICE_BUDGET_S, default 340 s):
#   1. a pool of independent runs, 12 at a time on the one GPU: test_golden_cuda, and ds41-golden
#      --backend cuda on every golden in golden/ and golden/extra/ (exact; fp8 ones also from their
#      checkpoint, resident and with --streamed-experts; --chunks / --batch-with / --rewind on the tiny
#      goldens and ds41_mid; --numerics fast --force-inputs on every golden; the graph oracle);
#   2. test_golden_cuda's free-memory checks and the device benchmarks (DS41_BENCH_FILTER, a regex),
#      alone on the GPU (cudaMemGetInfo and timings mean something only then);
#   3. a compute-sanitizer memcheck pass where the machine lets it.
# What lands in $OUT (or ./device-out), at most 8 files as the device tool returns them:
#   machine.txt, summary.txt (one row per run: mode, golden, exit code, its last line),
#   test_golden_cuda.log, test_golden_cuda_memory.log, runs.tar.gz (every run's full log),
#   bench_cuda.txt, bench_cuda.json, memcheck.log (the device tool returns at most 8 files).
#
# Getting the binaries and goldens there (a device machine's time is short, and its working tree may
# be at most 64 MiB, less than the goldens): tests/device/prebuild.sh here, then
#   tests/device/stage.sh   (packs golden/ into .device-golden/ and moves golden/ aside until restored)
#   run(command="tests/device/run.sh", carry=[".device-bin", ".device-golden"])
#   tests/device/stage.sh --restore
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
logs="$(mktemp -d)"
trap 'rm -rf "$logs"' EXIT  # the logs travel back packed in runs.tar.gz
t0=$(date +%s)
budget="${DS41_DEVICE_BUDGET_S:-340}"
left() { echo $((budget - ($(date +%s) - t0))); }
step() { echo "== $1 (t+$(($(date +%s) - t0)) s, $(left) s left)"; }
export PATH="/usr/local/cuda/bin:$PATH"
# what ran: the commit the binaries were built from and the tree's changes then (prebuild.sh), the
# commit the goldens were packed at (stage.sh)
{ nvidia-smi; nvcc --version; ldd --version | head -1; uname -a; nproc; echo "binaries:"; cat .device-bin/commit; \
  echo "goldens:"; cat .device-golden/commit; } > "$out/machine.txt" 2>&1
grep -E "H200|H100|Driver" "$out/machine.txt" | head -3

step "unpacking the goldens, checking the binaries"
. tests/device/env.sh || exit 1

# ---- the pool: one line per run, "MODE NAME ARGS..." ----
jobs="$logs/jobs.txt"
: > "$jobs"
add() { echo "$*" >> "$jobs"; }
base() { basename "$1" .json; }
add tests test_golden_cuda
goldens=(golden/ds41_tiny_golden.json golden/ds41_tiny_fp8_golden.json golden/ds41_mid_golden.json golden/extra/*.json
         golden/ds41_tiny_dspark_golden.json golden/extra/dspark/*.json)
for g in "${goldens[@]}"; do add exact "$(base "$g")" "$g"; done
for g in "${goldens[@]}"; do
  n=$(base "$g"); ck="${g%.json}_ckpt"
  [ "$n" = ds41_tiny_fp8_golden ] && ck=golden/ds41_tiny_fp8_ckpt
  [ -d "$ck" ] || continue
  add ckpt "$n" "$g" --checkpoint "$ck"
  add ckpt-streamed "$n" "$g" --checkpoint "$ck" --streamed-experts 3
  add ckpt-streamed-batch "$n" "$g" --checkpoint "$ck" --streamed-experts 2 --batch-with 2
done
for g in golden/ds41_tiny_golden.json golden/ds41_tiny_fp8_golden.json golden/ds41_mid_golden.json \
         golden/extra/dec40.json golden/extra/tie_r1_ih1.json golden/ds41_tiny_dspark_golden.json; do
  [ -e "$g" ] || continue
  n=$(base "$g")
  add chunks "$n" "$g" --chunks 3,1,2
  add batch "$n" "$g" --batch-with 3
  add rewind "$n" "$g" --rewind
  add chunks-batch-rewind "$n" "$g" --chunks 2,5 --batch-with 2 --rewind
  add graph-oracle "$n" "$g" --graph-oracle
done
for g in "${goldens[@]}"; do add fast-forced "$(base "$g")" "$g" --numerics fast --force-inputs; done
add fast-free ds41_tiny_golden golden/ds41_tiny_golden.json --numerics fast
# where the fast policy's teacher-forced captures leave rel-L2 1e-2 (run of 2026-12-04): the first
# differing samples, and the exact policy teacher-forced on the same golden (forcing itself exact)
add fast-forced-verbose rel_bf16 golden/extra/rel_bf16.json --numerics fast --force-inputs --verbose
add exact-forced rel_bf16 golden/extra/rel_bf16.json --force-inputs
add exact-forced ds41_mid_golden golden/ds41_mid_golden.json --force-inputs

one() {  # MODE NAME ARGS...
  local mode="$1" name="$2"; shift 2
  local log="$logs/${mode}__${name}.log" rc
  if [ "$mode" = tests ]; then
    # the free-memory checks run alone after the pool (cudaMemGetInfo counts every process's memory)
    timeout 170 "$bin/test_golden_cuda" --duration=true -tce="*device memory*" > "$log" 2>&1; rc=$?
  else
    timeout 110 "$bin/ds41-golden" "$@" --backend cuda --quiet > "$log" 2>&1; rc=$?
  fi
  printf '%-20s %-24s rc=%-3s %s\n' "$mode" "$name" "$rc" "$(grep -v '^\s*$' "$log" | tail -1 | cut -c1-110)"
}
export -f one
export bin logs
step "pool: $(wc -l < "$jobs") runs, 12 at a time"
timeout $(($(left) - 150)) xargs -P 12 -L 1 bash -c 'one "$@"' _ < "$jobs" > "$logs/summary.unsorted"
sort -k1,1 -k2,2 "$logs/summary.unsorted" > "$out/summary.txt"
cp "$logs/tests__test_golden_cuda.log" "$out/test_golden_cuda.log" 2>/dev/null
grep -c . "$out/summary.txt" | sed 's/^/runs finished: /'
echo "runs with rc != 0:"; grep -v "rc=0 " "$out/summary.txt" | cut -c1-150
awk '{print $1, $3}' "$out/summary.txt" | sort | uniq -c
grep -E "^\[doctest\] (test cases|assertions)" "$out/test_golden_cuda.log"
status=0
[ "$(grep -vc "rc=0 " "$out/summary.txt")" = 0 ] && [ "$(grep -c . "$out/summary.txt")" = "$(wc -l < "$jobs")" ] || status=1

step "device memory back to its baseline (alone on the GPU)"
timeout 60 "$bin/test_golden_cuda" --duration=true -tc="*device memory*" > "$out/test_golden_cuda_memory.log" 2>&1 \
  || status=1
grep -E "ERROR|values|^\[doctest\] (test cases|assertions)" "$out/test_golden_cuda_memory.log"
if [ "$(left)" -gt 40 ]; then
  step "device benchmarks (alone on the GPU)"
  timeout $(($(left) - 30)) "$bin/bench_cuda" --benchmark_min_time=0.05 --benchmark_format=console \
    --benchmark_filter="${DS41_BENCH_FILTER:-.}" \
    --benchmark_out="$out/bench_cuda.json" --benchmark_out_format=json > "$out/bench_cuda.txt" 2>&1
  echo "bench_cuda rc=$?"; grep -v "^-\|^Bench" "$out/bench_cuda.txt" | cut -c1-120 | head -80
fi
if [ "${DS41_DEVICE_SANITIZE:-1}" = 1 ] && command -v compute-sanitizer > /dev/null && [ "$(left)" -gt 20 ]; then
  step "compute-sanitizer memcheck (device vs host captures, the tiled Linear tests)"
  timeout $(($(left) - 5)) compute-sanitizer --tool memcheck --leak-check no --print-limit 20 \
    "$bin/test_golden_cuda" -tc="*device captures against host*,*awkward shapes*,*unaligned data*" > "$out/memcheck.log" 2>&1
  echo "memcheck rc=$?"; tail -8 "$out/memcheck.log"
fi
tar -czf "$out/runs.tar.gz" -C "$logs" .
step "done"
exit $status
