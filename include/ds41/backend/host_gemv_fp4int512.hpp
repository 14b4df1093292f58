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
// same products cannot wrap (|S| <= 2^24). The rest is fp4int::gemv_tile itself, with these sums
// as its policy: the float conversion, the unit, the block finish and the float-path blocks run
// per 8-row panel on ymm lanes.
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
  const __m512i w2 = _mm512_broadcast_i32x4(fp4int::weight_times_2());
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // plane 0 (low bytes of xi >> t) and plane 1 (high bytes) in int32, each as two sums (the low
  // and the high nibbles' products): integer sums in any order are the same integers, and four
  // chains per vector rather than two leave less of vpdpbusd's latency exposed (from L3, one
  // thread, 1280 x 5120: 95.6 -> 90.3 us)
  __m512i s0[NV], s1[NV], t0[NV], t1[NV];
  for (int v = 0; v < NV; ++v) s0[v] = s1[v] = t0[v] = t1[v] = _mm512_setzero_si512();
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
      s0[v] = _mm512_dpbusd_epi32(s0[v], x0, wl);
      t0[v] = _mm512_dpbusd_epi32(t0[v], x1, wh);
      s1[v] = _mm512_dpbusd_epi32(s1[v], x2, wl);
      t1[v] = _mm512_dpbusd_epi32(t1[v], x3, wh);
    }
  }
  for (int v = 0; v < NV; ++v)
    sum[v] = _mm512_add_epi32(_mm512_add_epi32(s0[v], t0[v]), _mm512_slli_epi32(_mm512_add_epi32(s1[v], t1[v]), 8));
}

/// block_sums as fp4int::gemv_tile's policy: NP panels (even) as NP / 2 vectors, each vector's
/// halves handed back as the two panels' int32 sums.
struct BlockSums512 {
  template <int NP>
  static void sums(const uint8_t* panel0, long pb, const uint32_t* words, int g0, __m256i (&sum)[NP]) {
    static_assert(NP % 2 == 0, "panels go in pairs");
    __m512i pair[NP / 2];
    block_sums<NP / 2>(panel0, pb, words, g0, pair);
    for (int v = 0; v < NP / 2; ++v) {
      sum[2 * v] = _mm512_castsi512_si256(pair[v]);
      sum[2 * v + 1] = _mm512_extracti64x4_epi64(pair[v], 1);
    }
  }
};

/// fp4int::gemv_rows with each tile's integer blocks summed 16 rows a vector; a single panel by fp4int's tile.
inline void gemv_rows(const float* q, const float* x_scale, const fp4int::Planes& planes, const MatrixView& w,
                      float* y, OutRound round, int n_begin, int n_end) {
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, n_end, panel_bytes(w.format, w.cols));
        if constexpr (NP % 2 == 0) fp4int::gemv_tile<NP, BlockSums512>(q, x_scale, planes, w, p0, ahead, y + n, round);
        else fp4int::gemv_tile<NP>(q, x_scale, planes, w, p0, ahead, y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

}  // namespace ds41::host_gemv::fp4int512
#endif
