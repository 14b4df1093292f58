// ds41/backend/host/gemv.hpp — the host backend's Linear: y = round(x · Wᵀ) for any weight format
// and layout, by the first kernel of HostLinearKernels that takes the call, its output rows split
// across the thread pool, with results bit-identical to MatrixView::dot whichever kernel runs.
//
// Every kernel is a descriptor in its own file (host/linear_call.hpp says what one is); this file
// holds the list, in the order they are tried, and linear(): the call's plan (instruction level,
// the reference's act_quant of the input for fp8/fp4 weights), the kernel choice, the split.
// Why every kernel vectorises across output rows, never along K: host/gemv_rowmajor.hpp.
//
// A new kernel is its file and its place in the list; a new weight format is its FormatTraits
// entry (core/weight_format.hpp) and the kernels that serve it (the scalar one serves every format).
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <cstdint>
#include "../../core/linear_math.hpp"
#include "../../core/simd_avx2.hpp"
#include "buffer.hpp"
#include "gemm_bf16dot512.hpp"
#include "gemm_fp4int512.hpp"
#include "gemm_fp8dot512.hpp"
#include "gemm_panels512.hpp"
#include "gemv_fp4int.hpp"
#include "gemv_fp4int512.hpp"
#include "gemv_fp8dot512.hpp"
#include "gemv_ggml.hpp"
#include "gemv_panels.hpp"
#include "gemv_panels512.hpp"
#include "gemv_rowmajor.hpp"
#include "gemv_scaled.hpp"
#include "gemv_scaled512.hpp"
#include "linear_call.hpp"
#include "threads.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv {

#if defined(DS41_HOST_AVX512)
/// avx2::act_quant_block32 on two 16-lane vectors: the same operations lane for lane, so the
/// same bits, in half as many instructions (one thread, K = 5120: 2.35 -> 1.36 us; a decode
/// GEMV's input is quantised on the calling thread before the pool starts).
inline bool act_quant_block32_512(const float* x, float* q, float* scale) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512 finite_max = _mm512_set1_ps(3.40282347e38f);
  const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
  const __m512 a0 = _mm512_and_ps(v[0], abs_mask), a1 = _mm512_and_ps(v[1], abs_mask);
  if (_mm512_cmp_ps_mask(a0, finite_max, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, finite_max, _CMP_NLE_UQ))
    return false;  // inf, or NaN (unordered)
  const float s = fp8_pow2_scale_of_amax(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_set1_ps(1e-4f))));
  *scale = s;
  const __m512 inv = _mm512_set1_ps(1.0f / s);
  const __m512 lim = _mm512_set1_ps(448.0f), nlim = _mm512_set1_ps(-448.0f);
  const __m512 normal_min = _mm512_set1_ps(0.015625f), grid = _mm512_set1_ps(512.0f), grid_inv = _mm512_set1_ps(1.0f / 512.0f);
  const __m512i half_m1 = _mm512_set1_epi32(0x7FFFF), keep = _mm512_set1_epi32(static_cast<int>(0xFFF00000u)), one = _mm512_set1_epi32(1);
  DS41_UNROLL for (int i = 0; i < 2; ++i) {
    const __m512 y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[i], inv), nlim), lim);
    const __m512 a = _mm512_and_ps(y, abs_mask);
    // normal range: keep 3 mantissa bits, ties to even (e4m3_round's bit trick)
    const __m512i ab = _mm512_castps_si512(a);
    const __m512i rb = _mm512_and_si512(
        _mm512_add_epi32(_mm512_add_epi32(ab, half_m1), _mm512_and_si512(_mm512_srli_epi32(ab, 20), one)), keep);
    const __m512 rn = _mm512_min_ps(_mm512_castsi512_ps(rb), lim);
    // subnormal grid m·2^-9: a·512 is exact, rounded to the nearest even integer
    const __m512 rs = _mm512_mul_ps(_mm512_roundscale_ps(_mm512_mul_ps(a, grid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), grid_inv);
    const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, normal_min, _CMP_GE_OQ), rs, rn);
    _mm512_storeu_ps(q + 16 * i, _mm512_or_ps(r, _mm512_andnot_ps(abs_mask, y)));  // the sign of y
  }
  return true;
}
#endif

/// act_quant_row (core/quant.hpp) with full 32-value blocks 8 (AVX2) or 16 (AVX-512) lanes at a
/// time: the same bits.
inline void act_quant_row_fast(const float* x, int K, float* q, float* scale) {
  int kb = 0;
#if defined(DS41_HOST_AVX512)
  for (; kb + 32 <= K; kb += 32)
    if (!act_quant_block32_512(x + kb, q + kb, scale + kb / 32)) act_quant_row(x + kb, 32, q + kb, scale + kb / 32);
#elif defined(DS41_HOST_AVX2)
  for (; kb + 32 <= K; kb += 32)
    if (!ds41::avx2::act_quant_block32(x + kb, q + kb, scale + kb / 32)) act_quant_row(x + kb, 32, q + kb, scale + kb / 32);
#endif
  if (kb < K) act_quant_row(x + kb, K - kb, q + kb, scale + kb / 32);
}

/// The descriptor (host/linear_call.hpp) that takes every call: MatrixView::dot per output, the
/// definition itself (any format, layout, T; the only kernel of a build without AVX2).
struct ScalarRows {
  static constexpr const char* kName = "scalar reference";
  struct Prepared {};
  static bool usable(const LinearCall&) { return true; }
  static bool prepare(const LinearCall&, Prepared&) { return true; }
  static void run(const LinearCall& c, const Prepared&, int n_begin, int n_end, int) {
    linear_rows_scalar(c.x, c.xs, c.T, c.x_stride, c.w, c.y, c.y_stride, c.round, n_begin, n_end);
  }
};

/// Kernels in the order linear() tries them: the first whose usable() and prepare() say yes runs.
/// The more specialised before the more general, and at one level of specialisation the wider
/// instructions first (c.isa caps them). Each kernel's file says when it applies and what it costs.
template <class... Kernels>
struct KernelList {};
using HostLinearKernels =
    KernelList<host_ggml::Kernel,               // GGUF blocks kept as stored
               fp8dot512::DotDecodeGemv,        // T = 1: fp8 panels packed for the scaled decoder
               scaled512::FmaDecodeGemv,        //
               scaled::DecodeGemv,              //
               fp4int512::DecodeGemv,           // T = 1: fp4 panels
               fp4int::DecodeGemv,              //
               panels512::DecodeGemv,           // T = 1: f32/bf16 panels
               gemm_fp8dot512::Rows,            // T > 1: fp8 panels
               gemm_fp4int512::Rows,            // T > 1: fp4 panels
               gemm_bf16dot512::Rows,           // T > 1: bf16 panels
               gemm512::Rows,                   // T > 1: any panels
               panels::Tiles,                   // any panels, any T
               avx2::RowMajorTiles,             // row-major f32/bf16/fp8/fp4
               ScalarRows>;                     // everything

/// The level kTuned takes for a decode GEMV (one input row) of format f. A decode step reads
/// each matrix from DRAM (it was last read a token, gigabytes, ago), and there fp8 runs fastest
/// on AVX2's tile, 8 rows a vector: four runs of bench_kernels' BM_DecodeGemv (one Zen 5 VM, 2
/// threads, session 11; 1280 x 5120 / 32768 x 1280 / 5120 x 8192 / 5120 x 2304, medians) read
/// 85 / 92 / 85 / 81% of the stream with it, against 85 / 78 / 85 / 79% by BF16 dot products and
/// 83 / 74 / 83 / 74% by AVX-512 multiply-adds, both 16 rows a vector, which are the faster from
/// L3 (1.2-1.6x). fp4 takes the widest: 70 / 87 / 92 / 83% with AVX-512 VNNI (three later runs,
/// tiles of 2 panels) against 65 / 84 / 78 / 77% with AVX2 alone. bf16 takes the widest too:
/// its 16-row tile read the four shapes 4-10% faster than the AVX2 one, alternating call by call
/// (session 12; f32 the same either way, at the stream read). Prefill (T > 1) takes the widest.
/// (docs/PERFORMANCE.md.)
constexpr VectorIsa decode_isa(WeightFormat f) {
  return f == WeightFormat::kFp8Block32 ? VectorIsa::kAvx2 : VectorIsa::kWidest;
}

/// Below this many multiply-adds a Linear runs on the calling thread: waking the pool costs more.
constexpr long kParallelLinearMinMacs = 1L << 16;
/// Output rows per work item: whole tiles, and whole fp8 32-row scale blocks.
constexpr int kRowsPerItem = 32;

/// Without AVX-512 VNNI (no host/gemm_fp4int512.hpp), up to this many input rows an fp4 Linear
/// whose decode GEMV is the integer one (fp4int: the codes multiplied as bytes) runs as one GEMV
/// per row: each is ~3x the multi-row float tile's speed per row, which decodes every code to a
/// float for only a few rows. bench_kernels BM_BatchLinear, cold, 2 threads (session 14): T = 1 /
/// 2 / 4 / 8 took 184 / 600 / 809 / 1067 us at 1280 x 5120 and 240 / 775 / 832 / 1545 us at 5120
/// x 2304 (a routed expert's w2), so a GEMV per row wins up to T = 4. fp8 and bf16 gain from the
/// multi-row tile from T = 2. The same bits either way.
constexpr long kFp4GemvPerRowMax = 4;

namespace detail {
/// The name of the kernel this thread's last linear() ran (tests and benchmarks say which path).
inline const char*& last_kernel_name() {
  thread_local const char* name = "";
  return name;
}

/// Kernel's rows of the call, split over the pool by row blocks.
template <class Kernel>
void run_rows(const LinearCall& c, const typename Kernel::Prepared& p, HostThreadPool& pool) {
  last_kernel_name() = Kernel::kName;
  const MatrixView& w = c.w;
  const long items = (w.rows + kRowsPerItem - 1) / kRowsPerItem;
  const auto row = [&](long item) { return static_cast<int>(std::min<long>(w.rows, item * kRowsPerItem)); };
  auto run = [&](long begin, long end, long share_end) {
    const int n_end = row(end);
    Kernel::run(c, p, row(begin), n_end, std::max(row(share_end), n_end));
  };
  const long macs = c.T * static_cast<long>(w.rows) * w.cols;
  if (pool.threads() == 1 || macs < kParallelLinearMinMacs || items < 2) return run(0, items, items);
  // ~8 chunks per thread, so that a late thread can still catch up (4 left both cores ~5% idle at
  // the end of a decode GEMV, in cache), but each thread's from one contiguous share of the rows,
  // which its tiles prefetch across chunks: cold, 1280 x 5120 fp4 read 33-35 GB/s in chunks
  // handed out in turn, 37-40 in contiguous halves (one Zen 5 VM, 2 threads, 3 rounds
  // alternating call by call; the other V4.1 shapes and formats alike either way)
  pool.run_owned(items, std::max(1L, items / (8L * pool.threads())), run);
}

/// Runs the call with the first kernel that takes it; false where none did (never: ScalarRows).
template <class Kernel>
bool try_kernel(const LinearCall& c, HostThreadPool& pool) {
  if (!Kernel::usable(c)) return false;
  typename Kernel::Prepared p{};
  if (!Kernel::prepare(c, p)) return false;
  run_rows<Kernel>(c, p, pool);
  return true;
}
template <class... Kernels>
bool run_first(KernelList<Kernels...>, const LinearCall& c, HostThreadPool& pool) {
  return (try_kernel<Kernels>(c, pool) || ...);
}
}  // namespace detail

/// The name of the kernel the calling thread's last linear() ran (a descriptor's kName).
inline const char* last_kernel() { return detail::last_kernel_name(); }

/// y[r, n] = round(x[r, :] · W[n, :]) for r < T, n < W.rows, split over the pool by row blocks.
///
/// Compiling this function is most of the compile of any file that runs a HostBackend model (its
/// kernels for every format: ~30 s of g++ -O3 and 0.5 MB of code). An engine gets it inline, as
/// every header; ds41's own binaries define DS41_HOST_LINEAR_SEPARATE and link the one copy that
/// instances/host_linear.cpp compiles (with DS41_HOST_LINEAR_DEFINITION), so that each test,
/// example and benchmark does not compile it again (CMakeLists.txt, "ds41_host_linear").
#if defined(DS41_HOST_LINEAR_SEPARATE) && !defined(DS41_HOST_LINEAR_DEFINITION)
void linear(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride, OutRound round,
            HostThreadPool& pool, VectorIsa isa = VectorIsa::kTuned);
#else
#if defined(DS41_HOST_LINEAR_SEPARATE)
#define DS41_HOST_LINEAR_INLINE
#else
#define DS41_HOST_LINEAR_INLINE inline
#endif
DS41_HOST_LINEAR_INLINE void linear(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                   OutRound round, HostThreadPool& pool, VectorIsa isa = VectorIsa::kTuned) {
  if (T <= 0 || w.rows <= 0) return;
  LinearCall c;
  c.T = T, c.w = w, c.isa = VectorIsa::kWidest;  // what kTuned takes for T > 1
  LinearCall one_row = c;
  one_row.T = 1;
  if (T > 1 && T <= kFp4GemvPerRowMax && isa == VectorIsa::kTuned && fp4int::DecodeGemv::usable(one_row) &&
      !gemm_fp4int512::Rows::usable(c)) {  // no multi-row integer tile: an integer GEMV per row
    for (long r = 0; r < T; ++r) linear(x + r * x_stride, 1, x_stride, w, y + r * y_stride, y_stride, round, pool, isa);
    return;
  }
  if (isa == VectorIsa::kTuned) isa = T == 1 ? decode_isa(w.format) : VectorIsa::kWidest;
  // fp8/fp4: the reference's act_quant of every input row, once (the kernels read q and scales)
  thread_local HostBuffer<float> quantized, quant_scales;
  const float* xs = nullptr;
  if (w.block_scaled()) {
    const long K = w.cols, kblocks = (K + 31) / 32;
    grow(quantized, T * K);
    grow(quant_scales, T * kblocks);
    float* q = quantized.data();
    float* qs = quant_scales.data();
    auto quantize = [&](long begin, long end) {
      for (long r = begin; r < end; ++r) act_quant_row_fast(x + r * x_stride, w.cols, q + r * K, qs + r * kblocks);
    };
    if (T * K >= kParallelQuantMin && pool.threads() > 1) pool.run(T, 1, quantize);
    else quantize(0, T);
    x = q;
    x_stride = K;
    xs = qs;
  }
  c.x = x, c.x_stride = x_stride, c.xs = xs;
  c.y = y, c.y_stride = y_stride, c.round = round, c.isa = isa, c.pool = &pool;
  detail::run_first(HostLinearKernels{}, c, pool);
}
#undef DS41_HOST_LINEAR_INLINE
#endif

}  // namespace ds41::host_gemv
#include "../../core/fp_exact_end.hpp"
