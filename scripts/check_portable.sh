#!/usr/bin/env bash
# The portable leg of CI: the whole test suite built without -march=native, so the host backend's
# scalar fallback (no AVX2: row-major and panel weights through MatrixView::dot) is what runs,
# against the same goldens. The vector kernels are checked by the README's test command.
#   scripts/check_portable.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# the text layer (tokenizer, engram derivation, chat) has no vector code: the README's command tests it
# DS41_TEST_GROUPS=OFF: the four suites below each in its own binary, as this leg builds no other
# suite of their unity groups (tests/CMakeLists.txt)
source scripts/cmake_generator.sh
cmake_generator build-portable
cmake "${generator[@]}" -S . -B build-portable -DCMAKE_BUILD_TYPE=Release -DDS41_NATIVE=OFF -DDS41_ENABLE_CUDA=OFF \
  -DDS41_BUILD_BENCHMARKS=OFF -DDS41_ENABLE_TEXT=OFF -DDS41_BUILD_PYTHON=OFF -DDS41_TEST_GROUPS=OFF
# Only what runs the host backend's arithmetic, the one place with vector code (backend/host/,
# core/simd_avx2.hpp): every golden through ds41-golden (the whole model: single rows, prompts,
# the DSpark heads), the kernels against their DS41_HD definitions at the V4.1 shapes with K tails
# and partial tiles, every backend operation, the attention, and sequences in chunks and batches
# (the multi-row tiles). The suites that reach the same kernels through other plumbing (streamed
# experts, GGUF types, DSpark's loop, memory), the parsers, configs, CLI refusals and the CUDA plans
# have no vector code of their own: the README's test command covers them (this keeps CI within
# its time; session 29 left out test_golden_host, test_streaming, test_dspark, test_gguf_types,
# test_gguf_dspark and test_memory, which the goldens below and the main leg cover).
targets=(ds41-golden test_host_kernels test_host_attention test_backend_ops test_sequence)
cmake --build build-portable -j2 --target "${targets[@]}"
# the golden at the released shapes takes minutes with vector code; the scalar fallback leaves it out,
# and the goldens' teacher-forced and serving variants (the same kernels as the plain runs, which stay)
regex="^golden:|^($(IFS='|'; echo "${targets[*]:1}"))\$"
ctest --test-dir build-portable --output-on-failure -j2 -LE "slow|variants" -R "$regex"
