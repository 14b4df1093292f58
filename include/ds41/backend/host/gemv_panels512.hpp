// ds41/backend/host/gemv_panels512.hpp — the decode GEMV (one input row) of f32 and bf16 panels
// with 512-bit vectors: two panels (16 rows) per vector, bit-identical to MatrixView::dot.
//
// Why: panels::gemv_tile reads a 32768 x 1280 bf16 matrix (wq_b) from DRAM at ~75-80% of the
// stream read; its panel walk, the same bytes in the same order with no arithmetic, reads at
// ~100%. The likely reason (not measured directly): a core keeps only as many loads in flight as
// its reorder window holds instructions after a miss, and the AVX2 tile spends ~8 of them per
// 32-byte group. Here one 256-bit load and
// one insert-with-load fetch a group of two panels (pb bytes apart, as host/gemv_scaled512.hpp
// does for fp8) and the same shift or mask, multiply and add serve 16 rows, about half the
// instructions per weight; each panel is also prefetched kPrefetchAhead bytes ahead.
// Measured (one Zen 5 VM, 2 threads, 5 interleaved rounds against a 41-43 GB/s stream read,
// 32768 x 1280 bf16): AVX2 tile 28-35 GB/s, this tile without prefetch 33-38, with it 37-40.
//
// Each lane is its row's own chain in K order, x[k]·w rounded, then added (never fused), the
// operations of the AVX2 tile lane for lane: lanes 0-7 are panel p's rows, 8-15 panel p + 1's.
// Compiled with AVX-512 F/BW/DQ/VL (DS41_HOST_AVX512, host/gemv_scaled512.hpp); a single
// panel left at a walk's end takes the AVX2 tile.
#pragma once
#include <cstdint>
#include "gemv_panels.hpp"
#include "gemv_scaled512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512)
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::panels512 {

// Column decoders on a group pair (panel a's 32 bytes in the low half, b's in the high):
// panels::F32Columns / Bf16Columns on 16 lanes.
struct F32Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kF32;
  static constexpr int kGroup = 1;
  static void columns(__m512i g, __m512* c) { c[0] = _mm512_castsi512_ps(g); }
};
struct Bf16Columns {  // k even in each lane's low half, k odd in its high half; bf16 -> f32 = << 16
  static constexpr WeightFormat kFormat = WeightFormat::kBF16;
  static constexpr int kGroup = 2;
  static void columns(__m512i g, __m512* c) {
    c[0] = _mm512_castsi512_ps(_mm512_slli_epi32(g, 16));
    c[1] = _mm512_castsi512_ps(_mm512_and_si512(g, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

/// How far ahead of its use each panel is prefetched (into L1). 1 KiB rather than the fp8/fp4
/// tiles' 3 KiB (panels::kPrefetchAhead): this tile reads a panel's bytes ~2x as fast as they
/// do. Measured as above (5 rounds, GB/s): none 33-38, 1 KiB 37-40, 1.5 KiB 35-40; at the
/// other V4.1 shapes (1280 x 5120, 5120 x 8192, 5120 x 2304, 3 rounds) 1 KiB was within the
/// noise of none.
constexpr int kPrefetchAhead = 1024;

/// Decode GEMV of panels [p0, p0 + 2·NV) into y[0 .. 16·NV).
template <class Columns, int NV>
void gemv_tile(const float* x, const MatrixView& w, long p0, float* y, OutRound round) {
  constexpr int g = Columns::kGroup;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  __m512 part[NV];
  DS41_UNROLL for (int v = 0; v < NV; ++v) part[v] = _mm512_setzero_ps();
  const int whole = K / g;  // groups wholly inside K
  for (int q = 0; q < whole; ++q) {
    if (q % 2 == 0)  // two groups to a 64-byte line
      for (int v = 0; v < 2 * NV; ++v) panels::prefetch_ahead(panels::group_at(panel0 + v * pb, q), 64, kPrefetchAhead);
    __m512 c[NV][g];
    DS41_UNROLL for (int v = 0; v < NV; ++v)
      Columns::columns(scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q), c[v]);
    for (int j = 0; j < g; ++j) {
      const __m512 xk = _mm512_set1_ps(x[q * g + j]);
      DS41_UNROLL for (int v = 0; v < NV; ++v) part[v] = _mm512_add_ps(part[v], _mm512_mul_ps(xk, c[v][j]));
    }
  }
  if (whole * g < K) {  // a bf16 K tail: the last group's first column only
    __m512 c[NV][g];
    DS41_UNROLL for (int v = 0; v < NV; ++v)
      Columns::columns(scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, whole), c[v]);
    const __m512 xk = _mm512_set1_ps(x[whole * g]);
    DS41_UNROLL for (int v = 0; v < NV; ++v) part[v] = _mm512_add_ps(part[v], _mm512_mul_ps(xk, c[v][0]));
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v) {  // lanes 0-7 the first panel's rows, 8-15 the second's
    panels::store_rounded(_mm512_castps512_ps256(part[v]), y + 16 * v, round);
    panels::store_rounded(_mm512_extractf32x8_ps(part[v], 1), y + 16 * v + 8, round);
  }
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for one input row and an f32 or bf16 panel view:
/// tiles of 4 panels as 2 vectors, a single panel by the AVX2 tile, rows outside whole panels
/// by the scalar dot.
template <class Columns, class Columns256>
inline void gemv_rows_with(const float* x, const MatrixView& w, float* y, OutRound round, int n_begin, int n_end) {
  static_assert(Columns::kGroup == Columns256::kGroup);
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        if constexpr (NP % 2 == 0) gemv_tile<Columns, NP / 2>(x, w, p0, y + n, round);
        else panels::gemv_tile<Columns256, NP, false>(x, nullptr, w, p0, y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(x, nullptr, 1, w.cols, w, y, 0, round, from, to); });
}

/// Whether gemv_rows takes view w: f32 and bf16 panels.
inline bool usable(const MatrixView& w) {
  return w.layout == WeightLayout::kPanels8 && (w.format == WeightFormat::kF32 || w.format == WeightFormat::kBF16);
}

inline void gemv_rows(const float* x, const MatrixView& w, float* y, OutRound round, int n_begin, int n_end) {
  if (w.format == WeightFormat::kF32) gemv_rows_with<F32Columns, panels::F32Columns>(x, w, y, round, n_begin, n_end);
  else gemv_rows_with<Bf16Columns, panels::Bf16Columns>(x, w, y, round, n_begin, n_end);
}

/// The descriptor (host/linear_call.hpp): the f32/bf16 panel decode GEMV, 16 rows a vector.
struct DecodeGemv {
  static constexpr const char* kName = "f32/bf16 panel decode GEMV (AVX-512)";
  struct Prepared {};
  static bool usable(const LinearCall& c) { return c.T == 1 && panels512::usable(c.w) && c.isa != VectorIsa::kAvx2; }
  static bool prepare(const LinearCall&, Prepared&) { return true; }
  static void run(const LinearCall& c, const Prepared&, int n_begin, int n_end, int) {
    panels512::gemv_rows(c.x, c.w, c.y, c.round, n_begin, n_end);
  }
};

}  // namespace ds41::host_gemv::panels512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::panels512 {
struct DecodeGemv : NotBuilt {};
}  // namespace ds41::host_gemv::panels512
#endif
