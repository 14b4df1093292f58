// bench/bench_common.hpp — what every ds41 benchmark binary shares: the streaming-read bandwidth
// reference (so each kernel's bytes/s reads as a fraction of what this machine can do, measured in
// the same run), synthetic weight matrices, and counters.
#pragma once
#include <benchmark/benchmark.h>
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>
#include "ds41/backend/host.hpp"
#include "ds41/model/weights.hpp"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ds41::bench {

/// Streaming read of a buffer far larger than the last-level cache, on all the host backend's
/// threads (the same pool the kernels use), as wide loads. Arg: MiB.
inline void BM_StreamRead(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0)) << 20;
  static HostBuffer<uint8_t> buf;  // shared between repetitions: allocation is not the point
  if (buf.size() < bytes) buf = HostBuffer<uint8_t>(bytes);
  HostThreadPool& pool = HostThreadPool::global();
  constexpr long kChunk = 1 << 20;
  const long chunks = static_cast<long>(bytes / kChunk);
  std::vector<uint64_t> sink(chunks);
  for (auto _ : st) {
    pool.run(chunks, std::max(1L, chunks / (4L * pool.threads())), [&](long b, long e) {
      for (long c = b; c < e; ++c) {
        const uint8_t* p = buf.data() + c * kChunk;
#if defined(__AVX2__)
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (long i = 0; i < kChunk; i += 128) {
          a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
          a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
          a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
          a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
        }
        a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
        sink[c] = static_cast<uint64_t>(_mm256_extract_epi64(a0, 0) + _mm256_extract_epi64(a0, 3));
#else
        uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
        const auto* q = reinterpret_cast<const uint64_t*>(p);
        for (long i = 0; i < kChunk / 8; i += 4) a0 += q[i], a1 += q[i + 1], a2 += q[i + 2], a3 += q[i + 3];
        sink[c] = a0 + a1 + a2 + a3;
#endif
      }
    });
    benchmark::DoNotOptimize(sink.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * static_cast<int64_t>(chunks * kChunk));
  st.counters["threads"] = pool.threads();
}

inline size_t payload_bytes(WeightFormat f, long rows, long cols) {
  switch (f) {
    case WeightFormat::kF32: return rows * cols * 4;
    case WeightFormat::kBF16: return rows * cols * 2;
    case WeightFormat::kFp8Block32: return rows * cols;
    case WeightFormat::kFp4Block32: return rows * cols / 2;
  }
  return 0;
}

/// A [rows, cols] weight of format f with random finite values of a sane size (fast to make: the
/// benchmarks need gigabytes).
inline HostTensor random_matrix(WeightFormat f, long rows, long cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  HostTensor t;
  t.shape = {rows, cols};
  t.format = f;
  t.payload.resize(payload_bytes(f, rows, cols));
  auto* words = reinterpret_cast<uint64_t*>(t.payload.data());
  for (size_t i = 0; i < t.payload.size() / 8; ++i) words[i] = rng();
  const long kblocks = (cols + 31) / 32;
  if (f == WeightFormat::kBF16) {  // |w| < 2^-3: sign, exponent 0x7B..0x7C, random mantissa
    auto* p = reinterpret_cast<uint16_t*>(t.payload.data());
    for (long i = 0; i < rows * cols; ++i) p[i] = static_cast<uint16_t>((p[i] & 0x807F) | 0x3D80);
  } else if (f == WeightFormat::kF32) {
    auto* p = reinterpret_cast<uint32_t*>(t.payload.data());
    for (long i = 0; i < rows * cols; ++i) p[i] = (p[i] & 0x807FFFFFu) | 0x3D800000u;
  } else if (f == WeightFormat::kFp8Block32) {
    // codes distributed as a trained, block-quantised weight's: e4m3(N(0, 1) · 100), block amax
    // near 448, about 1 code in 10^4 subnormal (uniform random bytes would make 1 in 18
    // subnormal, which no checkpoint has and which the host's scaled fp8 decoder declines)
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<uint8_t> code_of(1 << 16);
    for (auto& c : code_of) c = e4m3_encode(normal(rng) * 100.0f);
    for (size_t i = 0; i < t.payload.size(); i += 8) {
      uint64_t r = rng();
      for (size_t j = 0; j < 8 && i + j < t.payload.size(); ++j, r = (r >> 16) | (r << 48))
        t.payload[i + j] = code_of[static_cast<uint16_t>(r ^ (r >> 29))];
    }
    t.scales.assign(static_cast<size_t>((rows + 31) / 32) * kblocks, 1.0f / 256);
  } else {
    t.scales.assign(static_cast<size_t>(rows) * kblocks, 1.0f / 64);
  }
  return t;
}

/// bf16-valued activations.
inline std::vector<float> random_activations(long n, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = bf16_round(normal(rng));
  return x;
}

/// Counters every weight-streaming benchmark reports: bytes/s of weights read, FLOP/s.
inline void set_stream_counters(benchmark::State& st, double bytes_per_iter, double flops_per_iter) {
  st.SetBytesProcessed(static_cast<int64_t>(bytes_per_iter * st.iterations()));
  st.counters["FLOP/s"] = benchmark::Counter(flops_per_iter * st.iterations(), benchmark::Counter::kIsRate);
}

}  // namespace ds41::bench
