#!/usr/bin/env bash
# Nsight Compute on the Linear kernels at a few decode shapes (the device machine's
# Firecracker runtime lets ncu read the counters; leave the clocks alone). Prebuilt binaries as
# run.sh takes them: run(command="tests/device/profile.sh", carry=[".device-bin"]).
# Prints the headline metrics and the stall breakdown; the full text lands in $OUT.
set -uo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$PWD/device-out}"
mkdir -p "$out"
export PATH="/usr/local/cuda/bin:$PATH" LD_LIBRARY_PATH="$PWD/.device-bin:${LD_LIBRARY_PATH:-}"
bin=.device-bin/bench_cuda
filters=${DS41_PROFILE_FILTERS:-"kFp8Block32>/5120/8192/1/ kFp4Block32>/2304/5120/1/ kBF16>/1280/5120/1/"}
i=0
for f in $filters; do
  i=$((i + 1))
  echo "== $f"
  timeout 150 ncu --clock-control none -k regex:"${DS41_PROFILE_KERNEL:-linear_(tiled|gemv)}" --launch-skip 0 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
    "$bin" --benchmark_filter="BM_DeviceGemv<WeightFormat::$f" --benchmark_min_time=0.01 > "$out/ncu_$i.txt" 2>&1
  grep -q "Duration" "$out/ncu_$i.txt" || { tail -20 "$out/ncu_$i.txt"; continue; }
  grep -E "Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Warp Cycles Per Issued|Issued Warp Per|No Eligible|Active Warps Per|Eligible Warps" "$out/ncu_$i.txt" | sed 's/  */ /g'
  grep -E "issue_stalled_.*ratio" "$out/ncu_$i.txt" | awk '{print $NF, $1}' | sort -rn | head -8 | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//'
done
