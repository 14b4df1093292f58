// ds41/backend/host/gemm_bf16dot512.hpp — the bf16 Linear of several input rows (the grouped
// wo_a of a batched decode step, verify drafts) by BF16 dot products, bit-identical to
// MatrixView::dot.
//
// Why: at T = 8 the multi-row bf16 tile (gemm512::stream_rows, fused) is bound by its
// arithmetic, one multiply-add a weight and row: on a Zen 4 core 32 zmm multiply-adds per 128
// bytes of weights, ~14 GB/s a core, below what the memory gives a core. `vdpbf16ps` does two of a
// lane's multiply-adds in one instruction, and a bf16 panel group is already pairs of bf16 (column
// 2q in each lane's low half, 2q + 1 in its high half): per group pair a load, a rotate and one
// dot product a row.
//
// Same bits. `vdpbf16ps` is fma(lo, lo, fma(hi, hi, acc)) per lane, each rounded to nearest even,
// subnormal inputs read as zero and subnormal results flushed (host/gemv_fp8dot512.hpp; its
// dot_is_two_fmas() checks this CPU once). Each weight pair is rotated so that column 2q is the
// high half, and each input row is packed as pairs x[2q] << 16 | x[2q + 1]: the chain is the
// reference's `part = part + x[k]·w[k]` in K order, fused where bf16_products_exact says every
// product is exact (the fused tile's own condition). What the flushes need besides
// (sums_stay_normal): no input and no weight subnormal, and every product a multiple of a grain
// of at least 2^-126. A bf16 value of exponent e is a multiple of 2^(e-7), so every product is a
// multiple of 2^(ex + ew - 14) (ex, ew the exponents of the smallest nonzero magnitudes); sums and
// their roundings stay multiples of it, so a nonzero partial sum is never below it: never
// subnormal. An odd K's last column takes the fused multiply-add.
// Compiled where host/gemv_fp8dot512.hpp is (AVX-512 F/BW/DQ/VL and BF16).
#pragma once
#include <algorithm>
#include <cstdint>
#include "bf16_range512.hpp"
#include "broadcast512.hpp"
#include "gemm_panels512.hpp"
#include "gemv_fp8dot512.hpp"
#include "gemm_fp8dot512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512_BF16)
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::gemm_bf16dot512 {

/// Words of one input row's pairs at K columns (an odd K's last column is not paired).
inline long pairs_per_row(int K) { return K / 2; }

/// Whether a call of T > 1 rows on w may take this tile: bf16 panels, a CPU whose `vdpbf16ps` is
/// the two FMAs.
inline bool usable(const MatrixView& w) {
  return w.format == WeightFormat::kBF16 && w.layout == WeightLayout::kPanels8 && fp8dot512::dot_is_two_fmas();
}

/// Whether, for inputs of range x (every product already exact: bf16_products_exact), the dot
/// products' flushes never act: no input or weight subnormal, and the grain 2^(ex + ew - 14) of
/// every product (see top) at least 2^-126. All-zero inputs or weights: every product zero.
inline bool sums_stay_normal(const host_exact::Bf16Range& x, const MatrixView& w) {
  if (x.hi_bits == 0 || !(w.host_bf16_abs_max > 0)) return true;
  const int ex = static_cast<int>(x.lo_bits >> 23) - 127;
  const int ew = static_cast<int>(f32_bits(w.host_bf16_abs_min) >> 23) - 127;
  return x.lo_bits >= 0x00800000u && w.host_bf16_abs_min >= 0x1p-126f && ex + ew - 14 >= -126;
}

/// One input row's pairs: pairs[q] = bf16(x[2q]) << 16 | bf16(x[2q + 1]) for q < K / 2 (x's
/// values are bf16 numbers: bf16_products_exact checked).
inline void prepare_row(const float* x, int K, uint32_t* pairs) {
  int k = 0;
  for (; k + 32 <= K; k += 32) fp8dot512::pack_pairs32(x + k, pairs + k / 2);
  for (; k + 2 <= K; k += 2) pairs[k / 2] = (f32_bits(x[k]) & 0xFFFF0000u) | f32_bits(x[k + 1]) >> 16;
}

/// R input rows (pairs pr[i], values xr[i]) through the bf16 panels [p0, p0 + 2·NV) from panel0:
/// acc[i][v] = row i's K-order chain, two columns a `vdpbf16ps`, each group pair loaded and
/// rotated once for the R rows, each panel prefetched as gemm512::stream_rows does. Not
/// inlined: R·NV accumulators in registers.
template <int R, int NV>
#if defined(__GNUC__)
__attribute__((noinline))
#endif
void stream_rows(const uint32_t* const* pr, const float* const* xr, const uint8_t* panel0, long pb, int K,
                 __m512 (*acc)[NV]) {
  __m512 a[R][NV];
  DS41_UNROLL for (int i = 0; i < R; ++i)
    DS41_UNROLL for (int v = 0; v < NV; ++v) a[i][v] = _mm512_setzero_ps();
  const int whole = K / 2;  // groups wholly inside K
  for (int q = 0; q < whole; ++q) {
    if (q % 2 == 0)  // two groups to a 64-byte line
      for (int v = 0; v < 2 * NV; ++v)
        panels::prefetch_ahead(panels::group_at(panel0 + v * pb, q), 64, panels512::kPrefetchAhead);
    __m512i wq[NV];
    DS41_UNROLL for (int v = 0; v < NV; ++v)  // column 2q into each lane's high half: the pair's first product
      wq[v] = _mm512_rol_epi32(scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q), 16);
    DS41_UNROLL for (int i = 0; i < R; ++i)
      DS41_UNROLL for (int v = 0; v < NV; ++v) a[i][v] = dpbf16_broadcast(a[i][v], wq[v], pr[i] + q);
  }
  if (whole * 2 < K)  // an odd K's last column, fused (every product exact)
    gemm512::add_group<gemm512::Bf16Columns, R, NV, true>(gemm512::Bf16Columns{}, xr, panel0, pb, whole, 1, a);
  DS41_UNROLL for (int i = 0; i < R; ++i)
    DS41_UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = a[i][v];
}

/// stream_rows with R known at compile time (R = gemm512::kRowBlock, or the remainder).
template <int NV, int R = gemm512::kRowBlock>
inline void stream_rows_n(int rows, const uint32_t* const* pr, const float* const* xr, const uint8_t* panel0, long pb,
                          int K, __m512 (*acc)[NV]) {
  if constexpr (R > 1)
    if (rows < R) return stream_rows_n<NV, R - 1>(rows, pr, xr, panel0, pb, K, acc);
  stream_rows<R, NV>(pr, xr, panel0, pb, K, acc);
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for T input rows (row r's values at x + r·x_stride,
/// its pairs at pairs + r·pairs_per_row) of bf16 panels whose products with x are exact and whose
/// sums stay normal (bf16_products_exact, sums_stay_normal): tiles of 4 panels in passes of
/// gemm512::kRowBlock rows (later passes find the tile's panels in L2), a single panel by the AVX2
/// tile, rows outside whole panels by the scalar dot.
inline void linear_rows(const float* x, const uint32_t* pairs, long T, long x_stride, const MatrixView& w, float* y,
                        long y_stride, OutRound round, int n_begin, int n_end) {
  const long pb = panel_bytes(w.format, w.cols), np = pairs_per_row(w.cols);
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        if constexpr (NP % 2 == 1) {
          panels::linear_tile<panels::Bf16Columns, NP, false>(x, nullptr, T, x_stride, w, p0, y + n, y_stride, round);
        } else {
          constexpr int NV = NP / 2;
          const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
          for (long r0 = 0; r0 < T; r0 += gemm512::kRowBlock) {
            const int rows = static_cast<int>(std::min<long>(gemm512::kRowBlock, T - r0));
            const uint32_t* pr[gemm512::kRowBlock];
            const float* xr[gemm512::kRowBlock];
            for (int i = 0; i < rows; ++i) {
              pr[i] = pairs + (r0 + i) * np;
              xr[i] = x + (r0 + i) * x_stride;
            }
            __m512 acc[gemm512::kRowBlock][NV];
            stream_rows_n<NV>(rows, pr, xr, panel0, pb, w.cols, acc);
            for (int i = 0; i < rows; ++i)
              DS41_UNROLL for (int v = 0; v < NV; ++v)
                gemm512::store_rounded(acc[i][v], y + (r0 + i) * y_stride + n + 16 * v, round);
          }
        }
      },
      [&](int from, int to) { linear_rows_scalar(x, nullptr, T, x_stride, w, y, y_stride, round, from, to); });
}

/// The descriptor (host/linear_call.hpp): the bf16 multi-row tile by BF16 dot products (T > 1, at the
/// widest level), where every product is exact and every sum stays normal for this input, and the
/// dot products are the faster sums here; each row's pairs, once for every row worker.
struct Rows {
  static constexpr const char* kName = "bf16 multi-row tile, BF16 dot products (AVX-512)";
  struct Prepared {
    const uint32_t* pairs = nullptr;
  };
  static bool usable(const LinearCall& c) {
    return c.T > 1 && c.isa == VectorIsa::kWidest && gemm512::usable(c.w) && gemm_bf16dot512::usable(c.w);
  }
  static bool prepare(const LinearCall& c, Prepared& p) {
    const host_exact::Bf16Range range = gemm512::input_range(c.x, c.T, c.x_stride, c.w.cols);
    if (!gemm512::bf16_products_exact(range, c.w) || !gemm_fp8dot512::use_dot_products() || !sums_stay_normal(range, c.w))
      return false;
    thread_local HostBuffer<uint32_t> row_pairs;
    const long np = pairs_per_row(c.w.cols);
    grow(row_pairs, c.T * np);
    for (long r = 0; r < c.T; ++r) prepare_row(c.x + r * c.x_stride, c.w.cols, row_pairs.data() + r * np);
    p.pairs = row_pairs.data();
    return true;
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int) {
    gemm_bf16dot512::linear_rows(c.x, p.pairs, c.T, c.x_stride, c.w, c.y, c.y_stride, c.round, n_begin, n_end);
  }
};

}  // namespace ds41::host_gemv::gemm_bf16dot512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::gemm_bf16dot512 {
struct Rows : NotBuilt {};
}  // namespace ds41::host_gemv::gemm_bf16dot512
#endif
