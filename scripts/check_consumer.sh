#!/usr/bin/env bash
# check_consumer.sh — builds tests/consumer (an engine-like project with its own flags:
# -O3 -march=native -ffp-contract=fast) against ds41 twice, through find_package(ds41) from a
# `cmake --install` into a temporary prefix and through add_subdirectory, and runs the public tiny
# goldens bit for bit on the host with each. Exits non-zero on any build failure or any capture that
# is not bit-identical: ds41's exactness must not depend on the consumer's flags.
#
#   scripts/check_consumer.sh [--keep] [--jobs N]
# CXX (environment) picks the consumer's compiler, as CMake does (default: CMake's choice, GCC
# here). Clang with -ffp-contract=fast is the one setting ds41 cannot confine: there the engine
# must stop with ds41's error (exit 2), which --expect-refusal checks instead of exactness.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
keep=0 jobs=2 expect_refusal=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --keep) keep=1 ;;
    --jobs) jobs="$2"; shift ;;
    --expect-refusal) expect_refusal=1 ;;
    *) echo "usage: $0 [--keep] [--jobs N] [--expect-refusal]" >&2; exit 2 ;;
  esac
  shift
done
work="$(mktemp -d /tmp/ds41-consumer.XXXXXX)"
if [[ $keep == 0 ]]; then trap 'rm -rf "$work"' EXIT; else echo "keeping $work"; fi
goldens=("$root/golden/ds41_tiny_golden.json" "$root/golden/ds41_tiny_fp8_golden.json")
common=(-DCMAKE_BUILD_TYPE=Release)

# 1. install ds41 (header-only: configure without its tests/examples/benchmarks, install)
cmake -S "$root" -B "$work/ds41-build" "${common[@]}" -DDS41_BUILD_TESTS=OFF -DDS41_BUILD_EXAMPLES=OFF \
  -DDS41_BUILD_BENCHMARKS=OFF -DDS41_ENABLE_CUDA=OFF -DDS41_BUILD_PYTHON=OFF -DCMAKE_INSTALL_PREFIX="$work/prefix" > "$work/ds41-build.log"
cmake --install "$work/ds41-build" >> "$work/ds41-build.log"

# 2. configure the consumer both ways, build both at once (one translation unit each)
cmake -S "$root/tests/consumer" -B "$work/package" "${common[@]}" -DDS41_CONSUMER_MODE=package \
  -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/package.log"
cmake -S "$root/tests/consumer" -B "$work/subdirectory" "${common[@]}" -DDS41_CONSUMER_MODE=subdirectory \
  > "$work/subdirectory.log"
per=$(( jobs > 1 ? jobs / 2 : 1 ))
pids=()
for mode in package subdirectory; do
  cmake --build "$work/$mode" -j "$per" -- VERBOSE=1 >> "$work/$mode.log" 2>&1 & pids+=($!)
done
fail=0
for i in 0 1; do
  if ! wait "${pids[$i]}"; then
    echo "check_consumer: the consumer build failed (log follows)" >&2
    tail -40 "$work/$([[ $i == 0 ]] && echo package || echo subdirectory).log" >&2
    fail=1
  fi
done
[[ $fail == 0 ]] || exit 1

# 3. no numerics flag may come from ds41: the engine's compile line holds only its own
for mode in package subdirectory; do
  line="$(grep -E -- '-c .*engine\.cpp' "$work/$mode.log" | tail -1)"
  n=$(grep -o -- '-ffp-contract=[a-z]*' <<< "$line" | sort -u | tr '\n' ' ')
  if [[ "$n" != "-ffp-contract=fast " ]] || grep -q -- '--fmad\|-ffast-math' <<< "$line"; then
    echo "check_consumer ($mode): unexpected numerics flags on the engine's compile line: $line" >&2
    exit 1
  fi
done

# 4. the goldens, bit for bit
for mode in package subdirectory; do
  set +e
  out="$("$work/$mode/engine" "${goldens[@]}" 2>&1)"
  rc=$?
  set -e
  echo "$mode: $(tr '\n' ' ' <<< "$out")"
  if [[ $expect_refusal == 1 ]]; then
    if [[ $rc != 2 ]] || ! grep -q "ffp-contract" <<< "$out"; then
      echo "check_consumer ($mode): expected ds41's refusal (exit 2), got exit $rc" >&2; fail=1
    fi
  elif [[ $rc != 0 ]]; then
    echo "check_consumer ($mode): engine exit $rc" >&2; fail=1
  fi
done
[[ $fail == 0 ]] && echo "check_consumer: OK"
exit $fail
