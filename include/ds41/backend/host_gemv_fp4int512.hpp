// ds41/backend/host_gemv_fp4int512.hpp — the fp4 decode GEMV's integer block sums
// (host_gemv_fp4int.hpp) on 512-bit vectors with VNNI, bit-identical to MatrixView::dot.
//
// Why: with cold weights the AVX2 integer path is bound by its arithmetic on a Zen 5 core
// (5120 x 8192: 763 us where the same bytes walked without arithmetic take 337 us, README
// "Performance"). Here a vector holds two panels' groups (16 rows, as host_gemv_scaled512.hpp),
// and `vpdpbusd` multiplies the plane bytes by the weights and adds each lane's four products
// into its int32 sum in one instruction, where AVX2 takes `vpmaddubsw` and two `vpaddw`.
//
// Same bits: the blocks taken, the planes, the sign folding and the weight lookups are
// fp4int's (prepare() is shared), and each lane's integer sum is the same integer: fp4int's int16
// lanes are exact for every block prepare() lets through (its third test), and int32 sums of the
// same products cannot wrap (|S| <= 2^24). The float conversion, the unit, the block finish and the
// float-path blocks then run per 8-row panel on ymm lanes exactly as fp4int::gemv_tile does.
// Compiled when the translation unit has AVX-512 F, BW, DQ, VL and VNNI (Ice Lake and later
// Intel cores, Zen 4 and later).
#pragma once
#include "host_gemv_fp4int.hpp"
#include "host_gemv_scaled512.hpp"
#if defined(DS41_HOST_AVX512) && defined(__AVX512VNNI__)
#define DS41_HOST_AVX512_VNNI 1
#include <immintrin.h>

namespace ds41::host_gemv::fp4int512 {

using fp4int::kGroupK;
using fp4int::kGroupWords;

/// fp4int::block_sums for panel pairs (panel0 + 2v·pb, + (2v + 1)·pb), v < NV: lanes 0-7 of
/// sum[v] the first panel's rows, 8-15 the second's.
template <int NV>
inline void block_sums(const uint8_t* panel0, long pb, const uint32_t* words, int g0, __m512i (&sum)[NV]) {
  const __m512i w2 =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512i s0[NV], s1[NV];  // plane 0 (low bytes of xi >> t), plane 1 (high bytes), in int32
  for (int v = 0; v < NV; ++v) s0[v] = s1[v] = _mm512_setzero_si512();
  for (int g = g0; g < g0 + 32 / kGroupK; ++g) {
    const uint32_t* x = words + static_cast<size_t>(g) * kGroupWords;
    const __m512i x0 = _mm512_set1_epi32(static_cast<int>(x[0])), x1 = _mm512_set1_epi32(static_cast<int>(x[1]));
    const __m512i x2 = _mm512_set1_epi32(static_cast<int>(x[2])), x3 = _mm512_set1_epi32(static_cast<int>(x[3]));
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(x[4]));
    for (int v = 0; v < NV; ++v) {
      const __m512i raw = _mm512_xor_si512(
          scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, g), sign);
      const __m512i wl = _mm512_shuffle_epi8(w2, _mm512_and_si512(raw, nibble));
      const __m512i wh = _mm512_shuffle_epi8(w2, _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble));
      s0[v] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s0[v], x0, wl), x1, wh);
      s1[v] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(s1[v], x2, wl), x3, wh);
    }
  }
  for (int v = 0; v < NV; ++v) sum[v] = _mm512_add_epi32(s0[v], _mm512_slli_epi32(s1[v], 8));
}

/// fp4int::gemv_tile of panels [p0, p0 + 2·NV), the integer blocks' sums 16 rows a vector.
template <int NV>
void gemv_tile(const float* q, const float* x_scale, const fp4int::Planes& planes, const MatrixView& w, long p0,
               int ahead, float* y, OutRound round) {
  constexpr int NP = 2 * NV;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const long kblocks = (K + 31) / 32;
  __m256 acc[NP];
  for (int v = 0; v < NP; ++v) acc[v] = _mm256_setzero_ps();
  const auto row_scales = [&](int v, int bi) {
    return _mm256_loadu_ps(panels::fp4_block_scales_at(w.scales, kblocks, p0 + v, bi));
  };
  for (int kb = 0; kb < K; kb += 32) {
    const int bi = kb / 32;
    for (int v = 0; v < ahead; ++v) {  // the next tile's codes (4 groups) and scales (8 floats) of this block
      panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / kGroupK), 32 / kGroupK * 32);
      panels::prefetch_l2(panels::fp4_block_scales_at(w.scales, kblocks, p0 + NP + v, bi), kPanelRows * sizeof(float));
    }
    const __m256 sx = _mm256_broadcast_ss(x_scale + bi);
    const float unit = planes.block_unit[bi];
    if (unit != 0.0f) {
      const __m256 u = _mm256_set1_ps(unit);
      __m512i sum[NV];
      fp4int512::block_sums<NV>(panel0, pb, planes.group, kb / kGroupK, sum);
      for (int v = 0; v < NV; ++v) {
        const __m256i half[2] = {_mm512_castsi512_si256(sum[v]), _mm512_extracti64x4_epi64(sum[v], 1)};
        for (int h = 0; h < 2; ++h)
          acc[2 * v + h] = panels::add_block(acc[2 * v + h], _mm256_mul_ps(_mm256_cvtepi32_ps(half[h]), u), sx,
                                             row_scales(2 * v + h, bi));
      }
    } else {
      __m256 part[NP];
      for (int v = 0; v < NP; ++v) part[v] = _mm256_setzero_ps();
      if (kb + 32 <= K)
        panels::add_groups<panels::Fp4Columns, NP, false>(q, panel0, pb, kb / kGroupK, (kb + 32) / kGroupK, K, part);
      else
        panels::add_groups<panels::Fp4Columns, NP, true>(q, panel0, pb, kb / kGroupK, (K + kGroupK - 1) / kGroupK, K, part);
      for (int v = 0; v < NP; ++v) acc[v] = panels::add_block(acc[v], part[v], sx, row_scales(v, bi));
    }
  }
  for (int v = 0; v < NP; ++v) panels::store_rounded(acc[v], y + 8 * v, round);
}

/// fp4int::gemv_rows with tiles of 4 panels as 2 vectors; a single panel by fp4int's tile.
inline void gemv_rows(const float* q, const float* x_scale, const fp4int::Planes& planes, const MatrixView& w,
                      float* y, OutRound round, int n_begin, int n_end) {
  static_assert(panels::kTilePanels == 4, "a tile of 4 panels is 2 vectors of 16 rows");
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, n_end, panel_bytes(w.format, w.cols));
        if constexpr (NP == 4) fp4int512::gemv_tile<2>(q, x_scale, planes, w, p0, ahead, y + n, round);
        else fp4int::gemv_tile<NP>(q, x_scale, planes, w, p0, ahead, y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

}  // namespace ds41::host_gemv::fp4int512
#endif
