// Whole-layer and whole-decode-step benchmarks at DeepSeek-V4.1-Flash shapes with synthetic weights
// (dim 5120, 64 heads x 512, q rank 1280, o 8 x 1024, top-6 experts x 2304, index 32 x 128 top 512,
// window 128, hc 4), dense weights fp8 32x32-block, experts fp4 per-32, as the released model.
// To fit this machine, a layer holds 32 routed experts instead of 384 (a decode step touches 6 +
// the shared one either way) and the vocabulary is 8192 (the head is a separate GEMV benchmark).
// Bytes/s counts the weight bytes one decode step reads (attention, router, active experts, the
// head).
#include <benchmark/benchmark.h>
#include <map>
#include <mutex>
#include <string>
#include "bench_common.hpp"
#include "bench_peak.hpp"
#include "bench_v41.hpp"
#include "ds41/ds41.hpp"

using namespace ds41;

namespace {

/// Decode steps after a prefill of `prompt` tokens (bench_v41.hpp). Args: layers, prompt tokens.
void BM_V41DecodeStep(benchmark::State& st) { bench::v41_decode_steps<HostBackend>(st); }
// one layer (the kv/index source) and a two-layer step (source + consumer) after a 256-token prompt
BENCHMARK(BM_V41DecodeStep)->Args({1, 256})->Args({2, 256})->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(5);

/// Decode steps of a batch of sequences, one token each (bench_v41.hpp). Args: layers, batch.
/// 20 iterations (each a batch step and a batch-1 step): with 8, one slow stretch of this 2-vCPU
/// VM moved a run's vs_batch1 at batch 8 by up to 10% (2.65-2.93 in two runs a minute apart).
void BM_V41DecodeBatch(benchmark::State& st) { bench::v41_batch_steps<HostBackend>(st); }
BENCHMARK(BM_V41DecodeBatch)
    ->ArgNames({"layers", "batch"})
    ->Args({2, 1})->Args({2, 2})->Args({2, 4})->Args({2, 8})->Args({2, 16})
    ->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(20);
/// The peak the batched step's GFLOP/s is compared with (bench_peak.hpp; of_peak there).
void BM_PeakMulAdd(benchmark::State& st) { bench::peak_mul_add_benchmark(st); }
BENCHMARK(BM_PeakMulAdd)->UseRealTime()->Unit(benchmark::kMillisecond);
/// Verifying a 6-token draft and rolling it back (bench_v41.hpp). Args: layers, draft tokens.
void BM_V41Verify(benchmark::State& st) { bench::v41_verify_steps<HostBackend>(st); }
BENCHMARK(BM_V41Verify)->ArgNames({"layers", "draft"})->Args({2, 2})->Args({2, 6})->Args({2, 16})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(4);

// DSpark speculative rounds at forced acceptance (k of 5 drafts right) against plain decoding
void BM_V41DSpark(benchmark::State& st) { bench::v41_dspark_rounds<HostBackend>(st); }
BENCHMARK(BM_V41DSpark)->ArgNames({"layers", "k"})->Args({2, 0})->Args({2, 2})->Args({2, 5})->UseManualTime()->Unit(benchmark::kMillisecond)->Iterations(2);

BENCHMARK(bench::BM_StreamRead)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(bench::BM_StreamReadPrefetch)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
