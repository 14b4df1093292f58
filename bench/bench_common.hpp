// bench/bench_common.hpp — what every ds41 benchmark binary shares: the streaming-read bandwidth
// reference (so each kernel's bytes/s reads as a fraction of what this machine can do, measured in
// the same run), synthetic weight matrices, and counters.
#pragma once
#include <benchmark/benchmark.h>
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <random>
#include <vector>
#include "ds41/backend/host.hpp"
#include "ds41/model/config.hpp"
#include "ds41/model/weights.hpp"
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace ds41::bench {

/// The buffer the stream reads walk, shared between repetitions and variants: allocation is not the point.
inline HostBuffer<uint8_t>& stream_buffer(size_t bytes) {
  static HostBuffer<uint8_t> buf;
  if (buf.size() < bytes) buf = HostBuffer<uint8_t>(bytes);
  return buf;
}

/// Streaming read of a buffer far larger than the last-level cache, on all the host backend's
/// threads (the same pool the kernels use), as wide loads, each line also prefetched
/// kPrefetchAhead bytes ahead when that is nonzero. Arg: MiB. (Reading each chunk as 4 or 8
/// streams side by side, as a panel-walking kernel does, measured the same: 46-48 GB/s on 2
/// threads, one run.)
template <int kPrefetchAhead>
inline void stream_read(benchmark::State& st) {
  const size_t bytes = static_cast<size_t>(st.range(0)) << 20;
  HostBuffer<uint8_t>& buf = stream_buffer(bytes);
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
          if constexpr (kPrefetchAhead > 0) {  // the address may pass the buffer's end: formed as an integer
            const uintptr_t at = reinterpret_cast<uintptr_t>(p + i) + kPrefetchAhead;
            _mm_prefetch(reinterpret_cast<const char*>(at), _MM_HINT_T0);
            _mm_prefetch(reinterpret_cast<const char*>(at + 64), _MM_HINT_T0);
          }
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

/// The bandwidth reference as the hardware prefetcher alone gets it.
inline void BM_StreamRead(benchmark::State& st) { stream_read<0>(st); }
/// The same read with a software prefetch 3 KiB ahead (as the AVX-512 fp8 decoder does,
/// host/gemv_scaled512.hpp): on some machines (Zen 5 VMs here) the hardware prefetcher alone
/// leaves a core's stream well below what memory serves, so a kernel's fraction is read against
/// the faster of the two (scripts/stream_fractions.py).
inline void BM_StreamReadPrefetch(benchmark::State& st) { stream_read<3072>(st); }

inline size_t payload_bytes(WeightFormat f, long rows, long cols) {
  switch (f) {
    case WeightFormat::kF32: return rows * cols * 4;
    case WeightFormat::kBF16: return rows * cols * 2;
    case WeightFormat::kFp8Block32: return rows * cols;
    case WeightFormat::kFp4Block32: return rows * cols / 2;
    case WeightFormat::kGgmlBlocks: return 0;  // depends on the type: stored_bytes(view)
  }
  return 0;
}

/// Bytes of a Linear's weights as `v` stores them, what one pass over all of them reads: the host
/// panels' packed size (host_panels::packed_bytes; fp4 block scales as e8m0 bytes, fp8's
/// per-block subnormal flags), else the row-major payload and f32 block scales.
inline double stored_bytes(const MatrixView& v) {
  if (v.format == WeightFormat::kGgmlBlocks)  // GGUF blocks: row-major or the host's panels, the same bytes a row
    return static_cast<double>(v.layout == WeightLayout::kPanels8 ? (v.rows + 7) / 8 * 8 : v.rows) * v.row_bytes();
  if (v.layout == WeightLayout::kPanels8) return static_cast<double>(host_panels::packed_bytes(v.format, v.rows, v.cols));
  const double kblocks = (v.cols + 31) / 32;
  const double scales = v.format == WeightFormat::kFp8Block32   ? (v.rows + 31) / 32 * kblocks
                        : v.format == WeightFormat::kFp4Block32 ? v.rows * kblocks
                                                                : 0.0;
  return static_cast<double>(payload_bytes(v.format, v.rows, v.cols)) + 4.0 * scales;
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

/// Synthetic V4.1-shaped config: every layer ratio 4, layer 0 the kv/index source the others
/// read; 32 routed experts resident (a decode step touches 6 either way), vocabulary 8192.
inline ModelConfig v41_config(int n_layers) {
  ModelConfig c;
  c.max_seq_len = 4096;
  c.vocab_size = 8192;
  c.dim = 5120;
  c.moe_inter_dim = 2304;
  c.n_layers = n_layers;
  c.n_heads = 64;
  c.n_routed_experts = 32;
  c.n_activated_experts = 6;
  c.route_scale = 2.5;
  c.swiglu_limit = 10.0;
  c.q_lora_rank = 1280;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.window_size = 128;
  c.compress_ratios.assign(n_layers, 4);
  c.kv_source_layers = {0};
  c.index_source_layers = {0};
  c.original_seq_len = 65536;
  c.rope_factor = 16;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  return c;
}

/// V4.1-Flash weights made on request (nothing held twice), in the released model's formats: routed
/// experts fp4 per-32; hc_*, compressor.w* and the head f32; embed, router gate, indexer
/// weights_proj and wk, wo_a bf16; engram tables fp8 e4m3 codes with constant per-row scales and
/// constant q/k norm weights; other matrices fp8 32x32-block; vectors 1 (norm weights, scales) or
/// 0 (bias, base, attention sink).
class V41SyntheticWeights : public WeightSource {
 public:
  bool has(const std::string&) const override { return true; }
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    const uint64_t seed = std::hash<std::string>{}(name);
    auto ends_with = [&](const char* s) {
      const std::string t(s);
      return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
    };
    if (ends_with("engram.embed.scale") || ends_with("q_weight") || ends_with("k_weight")) {
      const float v = ends_with("scale") ? 1.0f / 64 : 1.0f;
      return HostTensor::from_f32(shape, std::vector<float>(static_cast<size_t>(shape[0]) * shape[1], v));
    }
    if (shape.size() == 2) {
      WeightFormat f = WeightFormat::kFp8Block32;
      if (name.find(".experts.") != std::string::npos) f = WeightFormat::kFp4Block32;
      if (name.find("hc_") != std::string::npos || name.find("compressor.w") != std::string::npos ||
          name == "head.weight")
        f = WeightFormat::kF32;
      if (name == "embed.weight" || name.find("gate.weight") != std::string::npos ||
          name.find("weights_proj") != std::string::npos || name.find("wo_a") != std::string::npos ||
          name.find("indexer.wk") != std::string::npos || name.find("markov_head") != std::string::npos ||
          name.find("confidence_head") != std::string::npos)  // DSpark's heads: BF16 in the checkpoint
        f = WeightFormat::kBF16;
      return random_matrix(f, shape[0], shape[1], seed);
    }
    std::vector<float> v(shape.empty() ? 1 : shape[0], 1.0f);
    if (name.find("bias") != std::string::npos || name.find("base") != std::string::npos ||
        name.find("attn_sink") != std::string::npos)
      std::fill(v.begin(), v.end(), 0.0f);
    return HostTensor::from_f32(shape, v);
  }
};

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
