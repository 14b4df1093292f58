#!/usr/bin/env bash
# A short re-check for the last minutes of a lease (run.sh is the full one): the device golden
# tests that matter most (every capture of the tiny golden, device vs host, batch, rollback, the
# memory and allocation checks) and the decode-step benchmarks. Same set-up as run.sh:
#   tests/device/prebuild.sh && tests/device/stage.sh
#   run(command="tests/device/quick.sh", carry=[".device-bin", ".device-golden"])
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
{ nvidia-smi -L; echo "binaries:"; cat .device-bin/commit; } > "$out/machine.txt" 2>&1
. tests/device/env.sh || exit 1
status=0
timeout 90 .device-bin/test_golden_cuda --duration=true \
  -tc="cuda: every capture*,cuda: device captures*,cuda: a batch*,cuda: rollback*,*memory*,*pool*,*page-locked*" \
  > "$out/quick_tests.log" 2>&1 || status=1
grep -E "ERROR|MESSAGE|^\[doctest\] (test cases|assertions)" "$out/quick_tests.log" | cut -c1-200
timeout 60 .device-bin/bench_cuda --benchmark_filter='CopyBandwidth|Tiny|V41DecodeStepPolicy' --benchmark_min_time=0.05 \
  --benchmark_out="$out/quick_bench.json" --benchmark_out_format=json > "$out/quick_bench.txt" 2>&1 || status=1
grep "^BM_" "$out/quick_bench.txt" | cut -c1-120
exit $status
