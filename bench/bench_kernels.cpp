// Host microbenchmarks, one per kernel, at DeepSeek-V4.1-Flash shapes (dim 5120, 64 heads x 512,
// q rank 1280, o 8 groups x 1024, 384 experts top 6 x 2304, index 32 heads x 128 top 512, window
// 128) with synthetic weights, plus the tiny fixture's decode step. BM_StreamRead and
// BM_StreamReadPrefetch (the same with a software prefetch) are the bandwidth reference: read
// every bytes_per_second here as a fraction of the faster (same run, same threads).
//
//   ./build/bench/bench_kernels [--benchmark_filter=Gemv]      (DS41_HOST_THREADS=n to pin threads)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include "bench_common.hpp"
#include "bench_peak.hpp"
#include "ds41/core/attention_math.hpp"
#include "ds41/core/compress_math.hpp"
#include "ds41/core/sinkhorn.hpp"
#include "ds41/core/topk.hpp"
#include "ds41/ds41.hpp"
#include "ds41/testing/golden.hpp"
#include "ds41/model/ops.hpp"

using namespace ds41;
using namespace ds41::bench;

namespace {

constexpr int kDim = 5120, kHeads = 64, kHeadDim = 512, kQRank = 1280, kOGroups = 8, kORank = 1024;
constexpr int kExperts = 384, kTopK = 6, kInter = 2304, kRopeDim = 64, kHc = 4;
constexpr int kIndexHeads = 32, kIndexDim = 128, kIndexTopK = 512;

BENCHMARK(BM_StreamRead)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamReadPrefetch)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

/// Copies of one weight matrix, together at least 256 MiB (8x this machine's 32 MiB L3), taken in
/// turn: each iteration then reads its weights from memory, as a decode step does (a layer's
/// matrix was last read a whole token, gigabytes, ago). Why: timed on one copy, a matrix of up to
/// ~42 MB stays partly in L3 between iterations, and the AVX-512 fp8 decoder, fast enough to
/// profit, read 5120 x 8192 at ~1.6x the stream read.
struct ColdMatrices {
  std::vector<std::unique_ptr<Matrix<HostBackend>>> copies;
  size_t next = 0;
  explicit ColdMatrices(const HostTensor& w) {
    copies.push_back(std::make_unique<Matrix<HostBackend>>(w));
    const size_t n = std::clamp<size_t>(static_cast<size_t>(std::ceil(256.0 * (1 << 20) / bytes())), 1, 64);
    while (copies.size() < n) copies.push_back(std::make_unique<Matrix<HostBackend>>(w));
  }
  MatrixView take() { return copies[next++ % copies.size()]->view(); }
  double bytes() const { return stored_bytes(copies[0]->view()); }  // of one copy, as stored
};

// y = W x for T input rows: T = 1 is the decode GEMV (weight-streaming bound), T = 16 a small GEMM.
// Weights cold (ColdMatrices). Args: rows, cols, T.
template <WeightFormat F>
void BM_Linear(benchmark::State& st) {
  const long rows = st.range(0), cols = st.range(1), T = st.range(2);
  HostTensor w = random_matrix(F, rows, cols, 1);
  ColdMatrices m(w);
  std::vector<float> x = random_activations(T * cols, 2), y(T * rows);
  for (auto _ : st) {
    HostBackend::linear(x.data(), T, cols, m.take(), y.data(), rows, OutRound::kBF16);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_stream_counters(st, m.bytes(), 2.0 * T * rows * cols);
}
// wq_a [1280, 5120], wq_b [64*512, 1280], wo_b [5120, 8*1024], an expert's w2 [5120, 2304]: the
// decode GEMV shapes every GEMV benchmark here runs
constexpr long kDecodeShapes[][2] = {
    {kQRank, kDim}, {kHeads * kHeadDim, kQRank}, {kDim, kOGroups * kORank}, {kDim, kInter}};
// the decode shapes with T = 1, and one prefill GEMM (16 input rows through an expert's w1)
void linear_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "T"});
  for (const auto& shape : kDecodeShapes) b->Args({shape[0], shape[1], 1});
  b->Args({kInter, kDim, 16})->UseRealTime()->Unit(benchmark::kMicrosecond);
}
#define DS41_LINEAR_SHAPES(F) BENCHMARK(BM_Linear<F>)->Apply(linear_shapes)
DS41_LINEAR_SHAPES(WeightFormat::kBF16);
DS41_LINEAR_SHAPES(WeightFormat::kF32);
DS41_LINEAR_SHAPES(WeightFormat::kFp8Block32);
DS41_LINEAR_SHAPES(WeightFormat::kFp4Block32);

// The machine's peak for separately rounded multiply and add (bench_peak.hpp).
void BM_PeakMulAdd(benchmark::State& st) { peak_mul_add_benchmark(st); }
BENCHMARK(BM_PeakMulAdd)->UseRealTime()->Unit(benchmark::kMillisecond);
// Batched decode: y = W x for T input rows (T different sequences, one token each) through one
// Linear at the V4.1 decode shapes, T = 1, 2, 4, 8, 16, weights cold (ColdMatrices), the default
// kernels (host_gemv::linear, VectorIsa::kTuned: for T > 1 host/gemm_panels512.hpp where the build
// has AVX-512). BM_BatchLinearAvx2<F> is the same on the AVX2 kernels (panels::linear_tile, the
// T > 1 path before the AVX-512 one), T >= 2, so that both can be compared in one run
// (--benchmark_enable_random_interleaving). FLOP/s and its fraction of BM_PeakMulAdd (of_peak:
// against the peak measured once in this process; on a busy machine compare with the run's own
// BM_PeakMulAdd instead). Args: rows, cols, T.
template <WeightFormat F, host_gemv::VectorIsa kIsa>
void batch_linear(benchmark::State& st) {
  const long rows = st.range(0), cols = st.range(1), T = st.range(2);
  HostTensor w = random_matrix(F, rows, cols, 1);
  ColdMatrices m(w);
  std::vector<float> x = random_activations(T * cols, 2), y(T * rows);
  const double peak = peak_mul_add_flops();
  for (auto _ : st) {
    host_gemv::linear(x.data(), T, cols, m.take(), y.data(), rows, OutRound::kBF16, HostThreadPool::global(), kIsa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double flop = 2.0 * T * rows * cols;
  set_stream_counters(st, m.bytes(), flop);
  st.counters["of_peak"] = benchmark::Counter(flop * st.iterations() / peak, benchmark::Counter::kIsRate);
}
template <WeightFormat F>
void BM_BatchLinear(benchmark::State& st) { batch_linear<F, host_gemv::VectorIsa::kTuned>(st); }
template <WeightFormat F>
void BM_BatchLinearAvx2(benchmark::State& st) { batch_linear<F, host_gemv::VectorIsa::kAvx2>(st); }
template <long kMinT>
void batch_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols", "T"});
  for (const auto& shape : kDecodeShapes)
    for (long T : {1, 2, 4, 8, 16})
      if (T >= kMinT) b->Args({shape[0], shape[1], T});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
#define DS41_BATCH_SHAPES(F)                                   \
  BENCHMARK(BM_BatchLinear<F>)->Apply(batch_shapes<1>);        \
  BENCHMARK(BM_BatchLinearAvx2<F>)->Apply(batch_shapes<2>)
DS41_BATCH_SHAPES(WeightFormat::kBF16);
DS41_BATCH_SHAPES(WeightFormat::kF32);
DS41_BATCH_SHAPES(WeightFormat::kFp8Block32);
DS41_BATCH_SHAPES(WeightFormat::kFp4Block32);

// The same Linears on one core with warm weights: one matrix of ~1 MiB (in L2) called again and
// again on a pool of one thread, so that what is timed is the tile's instructions alone, without
// the reads, the pool's barriers or the other thread (a 2-core VM's minutes moved BM_BatchLinear by
// 0.5-2x; the best of this one's repetitions moved a few percent in a quiet minute). of_core_peak:
// FLOP/s (2 per weight and row) against one thread's share of BM_PeakMulAdd (measured once in this
// process); the fp8 and bf16 tiles fuse exact products and fp4 sums integers, so they can pass 1.
// Args: rows, cols, T.
//   ./build/bench/bench_kernels --benchmark_filter=OneCoreWarm --benchmark_repetitions=5
template <WeightFormat F>
void BM_LinearOneCoreWarm(benchmark::State& st) {
  const long rows = st.range(0), cols = st.range(1), T = st.range(2);
  HostTensor w = random_matrix(F, rows, cols, 1);
  Matrix<HostBackend> m(w);
  std::vector<float> x = random_activations(T * cols, 2), y(T * rows);
  HostThreadPool one(1);
  const double peak = peak_mul_add_flops() / HostThreadPool::global().threads();
  for (auto _ : st) {
    host_gemv::linear(x.data(), T, cols, m.view(), y.data(), rows, OutRound::kBF16, one);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double flop = 2.0 * T * rows * cols;
  st.counters["FLOP/s"] = benchmark::Counter(flop * st.iterations(), benchmark::Counter::kIsRate);
  st.counters["of_core_peak"] = benchmark::Counter(flop * st.iterations() / peak, benchmark::Counter::kIsRate);
}
template <long kRows>
void one_core_shapes(benchmark::internal::Benchmark* b) {  // kRows x 2048: ~1 MiB of weights
  b->ArgNames({"rows", "cols", "T"});
  for (long T : {1, 2, 3, 4, 8}) b->Args({kRows, 2048, T});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_LinearOneCoreWarm<WeightFormat::kFp4Block32>)->Apply(one_core_shapes<1024>);
BENCHMARK(BM_LinearOneCoreWarm<WeightFormat::kFp8Block32>)->Apply(one_core_shapes<512>);
BENCHMARK(BM_LinearOneCoreWarm<WeightFormat::kBF16>)->Apply(one_core_shapes<256>);
BENCHMARK(BM_LinearOneCoreWarm<WeightFormat::kF32>)->Apply(one_core_shapes<128>);

// The fp8 and fp4 decode GEMVs (the scaled-domain decoder, the integer block sums) at each vector
// level side by side in one run (host_gemv::VectorIsa: AVX2 alone; AVX-512, host/gemv_scaled512.hpp
// and host/gemv_fp4int512.hpp; the widest, with fp8 by BF16 dot products, host/gemv_fp8dot512.hpp;
// a level the build lacks runs the next one down), weights cold (ColdMatrices). Args: rows, cols
// (T = 1).
template <WeightFormat F, host_gemv::VectorIsa kIsa>
void BM_DecodeGemv(benchmark::State& st) {
  const long rows = st.range(0), cols = st.range(1);
  HostTensor w = random_matrix(F, rows, cols, 1);
  ColdMatrices m(w);
  if (F == WeightFormat::kFp8Block32 && !m.copies[0]->view().host_scaled_decode)
    st.SkipWithError("the matrix did not take the scaled decoder");
  std::vector<float> x = random_activations(cols, 2), y(rows);
  for (auto _ : st) {
    host_gemv::linear(x.data(), 1, cols, m.take(), y.data(), rows, OutRound::kBF16, HostThreadPool::global(), kIsa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_stream_counters(st, m.bytes(), 2.0 * rows * cols);
}
void decode_shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "cols"});
  for (const auto& shape : kDecodeShapes) b->Args({shape[0], shape[1]});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
#define DS41_DECODE_SHAPES(F, ISA) BENCHMARK(BM_DecodeGemv<F, ISA>)->Apply(decode_shapes)
DS41_DECODE_SHAPES(WeightFormat::kFp8Block32, host_gemv::VectorIsa::kAvx2);
DS41_DECODE_SHAPES(WeightFormat::kFp8Block32, host_gemv::VectorIsa::kAvx512);
DS41_DECODE_SHAPES(WeightFormat::kFp8Block32, host_gemv::VectorIsa::kWidest);
DS41_DECODE_SHAPES(WeightFormat::kFp4Block32, host_gemv::VectorIsa::kAvx2);
DS41_DECODE_SHAPES(WeightFormat::kFp4Block32, host_gemv::VectorIsa::kWidest);
// The decode GEMV's memory walk without its arithmetic: the same cold panel-packed bytes, read in
// the same order (tiles of 4 panels side by side, one 32-byte group of each in turn) and split
// over the pool the same way (32-row items, ~8 chunks per thread from each thread's contiguous
// share, HostThreadPool::run_owned, as host_gemv::linear). A
// GEMV's bytes/s against this walk's is what its arithmetic costs in overlap; the walk's
// against the stream read, what the panel order costs. Args: rows, cols (rows a multiple of 32).
template <WeightFormat F>
void BM_PanelWalk(benchmark::State& st) {
  const long rows = st.range(0), cols = st.range(1);
  HostTensor w = random_matrix(F, rows, cols, 1);
  ColdMatrices m(w);
  if (m.copies[0]->view().layout != WeightLayout::kPanels8) st.SkipWithError("not stored as panels in this build");
  HostThreadPool& pool = HostThreadPool::global();
  const long items = rows / 32, pb = panel_bytes(F, static_cast<int>(cols));
  std::vector<uint64_t> sink(items);
  for (auto _ : st) {
    const auto* base = static_cast<const uint8_t*>(m.take().data);
    pool.run_owned(items, std::max(1L, items / (8L * pool.threads())), [&](long b, long e, long) {
      for (long it = b; it < e; ++it) {
        const uint8_t* t = base + it * 4 * pb;
        uint64_t sum = 0;
#if defined(__AVX2__)
        __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
        for (long q = 0; q < pb; q += 32) {
          a0 = _mm256_add_epi64(a0, _mm256_load_si256(reinterpret_cast<const __m256i*>(t + q)));
          a1 = _mm256_add_epi64(a1, _mm256_load_si256(reinterpret_cast<const __m256i*>(t + pb + q)));
          a2 = _mm256_add_epi64(a2, _mm256_load_si256(reinterpret_cast<const __m256i*>(t + 2 * pb + q)));
          a3 = _mm256_add_epi64(a3, _mm256_load_si256(reinterpret_cast<const __m256i*>(t + 3 * pb + q)));
        }
        a0 = _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3));
        sum = static_cast<uint64_t>(_mm256_extract_epi64(a0, 0) + _mm256_extract_epi64(a0, 3));
#endif
        sink[it] = sum;
      }
    });
    benchmark::DoNotOptimize(sink.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * items * 4 * pb);  // the payload: scales are not read
}
#define DS41_PANEL_WALK_SHAPES(F) BENCHMARK(BM_PanelWalk<F>)->Apply(decode_shapes)
DS41_PANEL_WALK_SHAPES(WeightFormat::kBF16);
DS41_PANEL_WALK_SHAPES(WeightFormat::kFp8Block32);
DS41_PANEL_WALK_SHAPES(WeightFormat::kFp4Block32);

// One routed expert for one token: w1, w3 [2304, 5120] and w2 [5120, 2304] in fp4, clamped SwiGLU
// between (the MoE's run_expert sequence). Arg: input rows.
void BM_ExpertSwiGLU(benchmark::State& st) {
  const long T = st.range(0);
  HostTensor w1 = random_matrix(WeightFormat::kFp4Block32, kInter, kDim, 3);
  HostTensor w3 = random_matrix(WeightFormat::kFp4Block32, kInter, kDim, 4);
  HostTensor w2 = random_matrix(WeightFormat::kFp4Block32, kDim, kInter, 5);
  Matrix<HostBackend> m1(w1), m3(w3), m2(w2);
  std::vector<float> x = random_activations(T * kDim, 6), g(T * kInter), u(T * kInter), y(T * kDim);
  for (auto _ : st) {
    HostBackend::linear(x.data(), T, kDim, m1.view(), g.data(), kInter, OutRound::kBF16);
    HostBackend::linear(x.data(), T, kDim, m3.view(), u.data(), kInter, OutRound::kBF16);
    float *pg = g.data(), *pu = u.data();
    const long n = T * kInter;
    HostBackend::for_each(n, [=](long e) {
      float uv = fminf(fmaxf(pu[e], -10.0f), 10.0f), gv = fminf(pg[e], 10.0f);
      pg[e] = bf16_round(torch_silu(gv, e, n) * uv);
    });
    HostBackend::linear(g.data(), T, kInter, m2.view(), y.data(), kDim, OutRound::kBF16);
    benchmark::DoNotOptimize(y.data());
  }
  set_stream_counters(st, stored_bytes(m1.view()) + stored_bytes(m3.view()) + stored_bytes(m2.view()), 6.0 * T * kInter * kDim);
}
BENCHMARK(BM_ExpertSwiGLU)->Arg(1)->Arg(8)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Router: f32 gate [384, 5120], sqrt-softplus scores, biased top-6. Arg: tokens.
void BM_Router(benchmark::State& st) {
  const long T = st.range(0);
  HostTensor gate = random_matrix(WeightFormat::kF32, kExperts, kDim, 7);
  Matrix<HostBackend> m(gate);
  std::vector<float> x = random_activations(T * kDim, 8), s(T * kExperts);
  std::vector<int32_t> idx(T * kTopK);
  for (auto _ : st) {
    HostBackend::linear(x.data(), T, kDim, m.view(), s.data(), kExperts, OutRound::kF32);
    float* ps = s.data();
    int32_t* pi = idx.data();
    HostBackend::for_each(T, [=](long t) {
      float* r = ps + t * kExperts;
      for (int e = 0; e < kExperts; ++e) r[e] = sqrtf(softplus(r[e]));
      reference_topk_row(r, kExperts, kTopK, true, reinterpret_cast<int*>(pi + t * kTopK), nullptr);
    });
    benchmark::DoNotOptimize(idx.data());
  }
  set_stream_counters(st, static_cast<double>(gate.payload.size()), 2.0 * T * kExperts * kDim);
}
BENCHMARK(BM_Router)->Arg(1)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

// RMSNorm of T rows of the hc-expanded residual [T, 4 x 5120]. Arg: T.
void BM_RMSNorm(benchmark::State& st) {
  const long T = st.range(0);
  const int n = kHc * kDim;
  std::vector<float> x = random_activations(T * n, 9), w(n, 1.0f), work(x);
  for (auto _ : st) {
    std::copy(x.begin(), x.end(), work.begin());
    Ops<HostBackend>::rmsnorm(work.data(), T, n, w.data(), 1e-6f);
    benchmark::DoNotOptimize(work.data());
  }
  set_stream_counters(st, 8.0 * T * n, 3.0 * T * n);
}
BENCHMARK(BM_RMSNorm)->Arg(1)->Arg(128)->UseRealTime()->Unit(benchmark::kMicrosecond);

// RoPE on the last 64 dims of each of 64 heads x 512, YaRN tables. Arg: T.
void BM_RoPE(benchmark::State& st) {
  const long T = st.range(0);
  RopeParams p;
  p.rope_dim = kRopeDim;
  p.original_seq_len = 65536;
  p.factor = 16;
  RopeTables<HostBackend> tables(p, 4096);
  std::vector<float> q = random_activations(T * kHeads * kHeadDim, 10);
  for (auto _ : st) {
    Ops<HostBackend>::rope(q.data(), T * kHeads, kHeadDim, kRopeDim, kHeads, 100, 1, tables.cos_t.data(),
                           tables.sin_t.data(), false);
    benchmark::DoNotOptimize(q.data());
  }
  set_stream_counters(st, 8.0 * T * kHeads * kRopeDim, 3.0 * T * kHeads * kRopeDim);
}
BENCHMARK(BM_RoPE)->Arg(1)->Arg(128)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Quantise-dequantise round trips of the activations (fp8 per-128 pow2 on q/kv, fp4 per-32).
// Args: kind, T (rows of 5120).
void BM_RoundTrip(benchmark::State& st) {
  const auto kind = static_cast<RoundTrip>(st.range(0));
  const long T = st.range(1);
  const int block = kind == RoundTrip::kFp8Pow2 ? 128 : 32;
  std::vector<float> x = random_activations(T * kDim, 11), work(x);
  for (auto _ : st) {
    std::copy(x.begin(), x.end(), work.begin());
    Ops<HostBackend>::roundtrip(work.data(), T, kDim, block, kind);
    benchmark::DoNotOptimize(work.data());
  }
  set_stream_counters(st, 8.0 * T * kDim, 0);
}
BENCHMARK(BM_RoundTrip)
    ->ArgNames({"kind", "T"})
    ->Args({0, 1})->Args({0, 128})->Args({1, 128})->Args({2, 128})
    ->UseRealTime()->Unit(benchmark::kMicrosecond);

// hc mixes: the f32 Linear [(2+4)*4, 4*5120] on the flattened residual, then Sinkhorn (20 iters).
void BM_HcMixesSinkhorn(benchmark::State& st) {
  const long T = st.range(0);
  const int mix = (2 + kHc) * kHc, hd = kHc * kDim;
  HostTensor fn = random_matrix(WeightFormat::kF32, mix, hd, 12);
  Matrix<HostBackend> m(fn);
  std::vector<float> h = random_activations(T * hd, 13), raw(T * mix), pre(T * kHc), post(T * kHc),
                     comb(T * kHc * kHc), scale = {0.5f, 0.5f, 0.5f}, base(mix, 0.1f);
  for (auto _ : st) {
    HostBackend::linear(h.data(), T, hd, m.view(), raw.data(), mix, OutRound::kF32);
    for (long t = 0; t < T; ++t)
      hc_split_sinkhorn(raw.data() + t * mix, scale.data(), base.data(), kHc, 20, 1e-6f, pre.data() + t * kHc,
                        post.data() + t * kHc, comb.data() + t * kHc * kHc, t, T);
    benchmark::DoNotOptimize(comb.data());
  }
  set_stream_counters(st, static_cast<double>(fn.payload.size()), 2.0 * T * mix * hd);
}
BENCHMARK(BM_HcMixesSinkhorn)->Arg(1)->Arg(64)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Indexer scoring + top-k: 32 heads x 128 dot products against n compressed keys, weighted sum
// over heads, top 512. Arg: keys.
void BM_IndexerScoreTopK(benchmark::State& st) {
  // one decode query: the library's per-key index score (index_scores_host, as IndexerT runs it on
  // the host: 32 heads x 128, bf16 roundings, ReLU, head weights) over nk keys, then the top 512
  const long nk = st.range(0);
  std::vector<float> q = random_activations(kIndexHeads * kIndexDim, 14), k = random_activations(nk * kIndexDim, 15),
                     hw = random_activations(kIndexHeads, 16), score(nk);
  std::vector<int32_t> top(kIndexTopK);
  for (auto _ : st) {
    const float *pq = q.data(), *pk = k.data(), *pw = hw.data();
    float* ps = score.data();
    HostBackend::for_each((nk + 7) / 8, [=](long g) {
      index_scores_host(pq, pw, pk, g * 8, nk, kIndexHeads, kIndexDim, false, ps);
    });
    HostBackend::topk_rows(score.data(), 1, static_cast<int>(nk), kIndexTopK, top.data());
    benchmark::DoNotOptimize(top.data());
  }
  set_stream_counters(st, 4.0 * nk * kIndexDim, 2.0 * nk * kIndexHeads * kIndexDim);
}
BENCHMARK(BM_IndexerScoreTopK)->Arg(2048)->Arg(16384)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Sparse attention with a sink for one decode token: 64 heads x 512 against window 128 + top 512
// selected keys (shared K = V latent), softmax with the sink logit.
void BM_SparseAttentionSink(benchmark::State& st) {
  // one decode query, 64 heads x 512, over the window (128) and the index top-k (512): the
  // library's sparse_attn_head per head, as CompressedAttnT runs it (some window slots empty)
  const int nkeys = 128 + kIndexTopK;
  std::vector<float> q = random_activations(kHeads * kHeadDim, 17), kv = random_activations(nkeys * kHeadDim, 18),
                     out(kHeads * kHeadDim), sink(kHeads, 0.5f);
  std::vector<int> idx(nkeys);
  for (int j = 0; j < nkeys; ++j) idx[j] = j < 8 ? -1 : (j * 389) % nkeys;  // scattered rows, 8 masked
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  for (auto _ : st) {
    const float *pq = q.data(), *pkv = kv.data(), *ps = sink.data();
    const int* pi = idx.data();
    float* po = out.data();
    HostBackend::for_each(kHeads, [=](long h) {
      sparse_attn_head(pq + h * kHeadDim, pkv, kHeadDim, pi, nkeys, kHeadDim, ps[h], scale, po + h * kHeadDim);
    });
    benchmark::DoNotOptimize(out.data());
  }
  // bytes: the gathered rows (read once per head, from cache after the first); FLOP: q·k and p·v
  set_stream_counters(st, 4.0 * nkeys * kHeadDim, 4.0 * kHeads * nkeys * kHeadDim);
}
BENCHMARK(BM_SparseAttentionSink)->UseRealTime()->Unit(benchmark::kMicrosecond);

// The same query as CompressedAttnT's host path runs it: groups of attn_heads_per_item heads,
// each gathered block read once per group (host/attention.hpp). Same bits as the per-head one.
void BM_SparseAttentionSinkHeads(benchmark::State& st) {
  const int nkeys = 128 + kIndexTopK;
  std::vector<float> q = random_activations(kHeads * kHeadDim, 17), kv = random_activations(nkeys * kHeadDim, 18),
                     out(kHeads * kHeadDim), sink(kHeads, 0.5f);
  std::vector<int> idx(nkeys);
  for (int j = 0; j < nkeys; ++j) idx[j] = j < 8 ? -1 : (j * 389) % nkeys;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));
  const int group = attn_heads_per_item(kHeads, HostBackend::threads());
  for (auto _ : st) {
    const float *pq = q.data(), *pkv = kv.data(), *ps = sink.data();
    const int* pi = idx.data();
    float* po = out.data();
    HostBackend::for_each_with_scratch<float>(
        (kHeads + group - 1) / group, attn_heads_scratch_floats(kHeadDim, group), true, [=](long g, float* scratch) {
          const int h0 = static_cast<int>(g) * group, hn = std::min(group, kHeads - h0);
          sparse_attn_heads_host(pq + h0 * kHeadDim, pkv, kHeadDim, pi, nkeys, kHeadDim, hn, ps + h0, scale,
                                 po + h0 * kHeadDim, scratch);
        });
    benchmark::DoNotOptimize(out.data());
  }
  // bytes: the gathered rows (read once per group); FLOP: q·k and p·v
  set_stream_counters(st, 4.0 * nkeys * kHeadDim, 4.0 * kHeads * nkeys * kHeadDim);
}
BENCHMARK(BM_SparseAttentionSinkHeads)->UseRealTime()->Unit(benchmark::kMicrosecond);

// Top-k alone: the router's top 6 of 384, the indexer's top 512. Args: n, k. BM_TopK is
// topk_row (insertion into a sorted list, lower index first among ties: the device's order);
// BM_TopKSelect is torch_topk_row (torch 1.13's algorithm and tie outcome: the host's router,
// candidate blocks and, unsorted, HostBackend::topk_rows for the indexer).
void BM_TopK(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0)), k = static_cast<int>(st.range(1));
  std::vector<float> v = random_activations(n, 19);
  std::vector<int> idx(k);
  for (auto _ : st) {
    topk_row(v.data(), n, k, idx.data(), nullptr);
    benchmark::DoNotOptimize(idx.data());
  }
  set_stream_counters(st, 4.0 * n, 0);
}
BENCHMARK(BM_TopK)->Args({kExperts, kTopK})->Args({16384, kIndexTopK})->UseRealTime()->Unit(benchmark::kMicrosecond);
void BM_TopKSelect(benchmark::State& st) {
  const int n = static_cast<int>(st.range(0)), k = static_cast<int>(st.range(1));
  std::vector<float> v = random_activations(n, 19);
  std::vector<int> idx(k);
  std::vector<TopkEntry> scratch(n);
  for (auto _ : st) {
    torch_topk_row(v.data(), n, k, true, idx.data(), nullptr, scratch.data());
    benchmark::DoNotOptimize(idx.data());
  }
  set_stream_counters(st, 4.0 * n, 0);
}
BENCHMARK(BM_TopKSelect)->Args({kExperts, kTopK})->Args({16384, kIndexTopK})->UseRealTime()->Unit(benchmark::kMicrosecond);

// One decode step of the tiny golden model (all 6 layers and the head).
void BM_TinyDecodeStep(benchmark::State& st) {
  static golden::Golden g = golden::load(DS41_BENCH_GOLDEN);
  static WeightSet w = golden::regenerate_weights(g);
  Model<HostBackend> model(g.config, w);
  model.prefill(g.prompt_tokens);
  int32_t tok = 1;
  for (auto _ : st) {
    if (model.position() >= g.config.max_seq_len) {
      st.PauseTiming();
      model.release();
      model.prefill(g.prompt_tokens);
      st.ResumeTiming();
    }
    tok = model.decode(tok).argmax;
  }
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TinyDecodeStep)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
