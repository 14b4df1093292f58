// bench/bench_peak.hpp — the machine's peak for separately rounded multiply and add, measured in
// the binary that reports against it (bench_kernels' BM_BatchLinear, bench_layer's batched step).
#pragma once
#include <algorithm>
#include <benchmark/benchmark.h>
#include <chrono>
#include <numeric>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif
#include "ds41/backend/host/threads.hpp"

namespace ds41::bench {

// The machine's peak for separately rounded multiply and add (what the Linear kernels do: each
// product rounded, then added, never FMA): kPeakChains independent multiply chains and as many
// independent add chains, in the widest float vectors this build has, on every thread of the
// pool. FLOP counted as 2 per multiply + add pair (a Linear's 2 per multiply-add), so a kernel's
// FLOP/s reads directly as a fraction of this.
#if defined(__AVX512F__)
using PeakVec = __m512;
inline PeakVec peak_set1(float v) { return _mm512_set1_ps(v); }
inline PeakVec peak_mul(PeakVec a, PeakVec b) { return _mm512_mul_ps(a, b); }
inline PeakVec peak_add(PeakVec a, PeakVec b) { return _mm512_add_ps(a, b); }
inline float peak_first(PeakVec a) { return _mm512_cvtss_f32(a); }
constexpr int kPeakLanes = 16, kPeakChains = 10;  // 32 zmm: 20 chains + 2 constants
#elif defined(__AVX2__)
using PeakVec = __m256;
inline PeakVec peak_set1(float v) { return _mm256_set1_ps(v); }
inline PeakVec peak_mul(PeakVec a, PeakVec b) { return _mm256_mul_ps(a, b); }
inline PeakVec peak_add(PeakVec a, PeakVec b) { return _mm256_add_ps(a, b); }
inline float peak_first(PeakVec a) { return _mm256_cvtss_f32(a); }
constexpr int kPeakLanes = 8, kPeakChains = 7;  // 16 ymm: 14 chains + 2 constants
#else
using PeakVec = float;
inline PeakVec peak_set1(float v) { return v; }
inline PeakVec peak_mul(PeakVec a, PeakVec b) { return a * b; }
inline PeakVec peak_add(PeakVec a, PeakVec b) { return a + b; }
inline float peak_first(PeakVec a) { return a; }
constexpr int kPeakLanes = 1, kPeakChains = 8;
#endif
/// `iters` rounds of kPeakChains multiplies (latency ~3, 2 pipes on Zen 4/5) and kPeakChains adds
/// (latency ~2-3, 2 pipes), no chain depending on another. one and tiny come from the caller, so
/// nothing folds.
inline float peak_mul_add_loop(long iters, float one, float tiny) {
  PeakVec m[kPeakChains], a[kPeakChains];
  for (int c = 0; c < kPeakChains; ++c) m[c] = a[c] = peak_set1(1.0f + c);
  const PeakVec vone = peak_set1(one), vtiny = peak_set1(tiny);
  for (long i = 0; i < iters; ++i)
    for (int c = 0; c < kPeakChains; ++c) {
      m[c] = peak_mul(m[c], vone);
      a[c] = peak_add(a[c], vtiny);
    }
  float sum = 0.0f;
  for (int c = 0; c < kPeakChains; ++c) sum += peak_first(m[c]) + peak_first(a[c]);
  return sum;
}
constexpr long kPeakItemIters = 1L << 16;
constexpr double kPeakItemFlop = 2.0 * kPeakItemIters * kPeakChains * kPeakLanes;
/// `items` loops of kPeakItemIters rounds over the pool (many items: a late thread catches up).
inline float peak_mul_add_run(long items) {
  static volatile float one = 1.0f, tiny = 1e-30f;  // volatile: the compiler cannot know them
  const float o = one, t = tiny;
  std::vector<float> sink(items);
  HostThreadPool::global().run(items, 1, [&](long b, long e) {
    for (long i = b; i < e; ++i) sink[i] = peak_mul_add_loop(kPeakItemIters, o, t);
  });
  return std::accumulate(sink.begin(), sink.end(), 0.0f);
}

/// BM_PeakMulAdd's FLOP/s, measured once (best of 19 runs of ~25 ms) for the of_peak counters.
inline double peak_mul_add_flops() {
  static const double peak = [] {
    // 20 rounds of ~25 ms: a handful of ~6 ms rounds sometimes all ran while the pool's other
    // thread was still asleep, reading one core's peak (115 for 225 GFLOP/s)
    const long items = 128L * HostThreadPool::global().threads();
    double best = 0;
    for (int r = 0; r < 20; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(peak_mul_add_run(items));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) best = std::max(best, kPeakItemFlop * items / s);  // the first warms the pool up
    }
    return best;
  }();
  return peak;
}

/// BM_PeakMulAdd: the peak itself, as a benchmark of its own.
inline void peak_mul_add_benchmark(benchmark::State& st) {
  const long items = 32L * HostThreadPool::global().threads();
  for (auto _ : st) benchmark::DoNotOptimize(peak_mul_add_run(items));
  st.counters["FLOP/s"] = benchmark::Counter(kPeakItemFlop * items * st.iterations(), benchmark::Counter::kIsRate);
  st.counters["lanes"] = kPeakLanes;
  st.counters["threads"] = HostThreadPool::global().threads();
}

}  // namespace ds41::bench
