// ds41/backend/host/ggml_panel_pairs512.hpp — the decode GEMV of the 2-bit panel types (Q2_K,
// TQ2_0) with AVX-512: two 8-row panels' columns side by side in one 16-lane vector.
//
// Why: their 8-lane loop (ggml_panel_decoders.hpp) takes five vector operations a column of 8
// rows: the shift of the codes, the permute of the value table, the scale's multiply (or FMA),
// and the Linear's multiply and add. All but the permute wait for ports 0 and 1, so it is bound by
// the arithmetic, not by memory (session 37: two threads ran 2x one). In 16-lane vectors the same
// five operations serve 16 rows, for one more: the move that puts the second panel's code word
// beside the first's (the two panels' blocks lie a row of blocks apart). Each lane computes the
// same operations on the same operands as in the 8-lane loop: the bits are the same.
//
// Measured (docs/PERFORMANCE.md, session 38; 2 threads, µs, medians of 5, two rounds, 8 lanes →
// 16): Q2_K 1280 x 5120 253-268 → 237-246, 32768 x 1280 1892-1903 → 1668-1707, 5120 x 8192
// 1544-1658 → 1478-1499; TQ2_0 1280 x 5120 215-235 → 203-211, 2304 x 5120 393-407 → 350-366. Less
// than the operations counted promise (a sixth fewer on ports 0 and 1): a 16-row panel layout,
// whose column is one word, would save the move too. Q4_K the same way (its nibbles masked in
// place) moved −6% to +4%, within the noise: it stays at 8 lanes.
//
// Compiled with AVX-512 (DS41_HOST_AVX512) where the panel kernel is (DS41_HOST_GGML_PANELS).
#pragma once
#include "../../core/ggml_panels.hpp"
#include "bf16_range512.hpp"        // DS41_HOST_AVX512
#include "ggml_panel_decoders.hpp"  // DS41_HOST_GGML_PANELS
#include "unrolled.hpp"

#if defined(DS41_HOST_GGML_PANELS) && defined(DS41_HOST_AVX512)
#define DS41_HOST_GGML_PAIRS512 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml::pairs512 {

/// The panel types whose decode GEMV runs here.
constexpr bool served(GgmlType t) { return t == GgmlType::kQ2_K || t == GgmlType::kTQ2_0; }

/// Panel a's eight lanes low, panel b's high.
DS41_ALWAYS_INLINE __m512 join(__m256 a, __m256 b) { return _mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1); }
DS41_ALWAYS_INLINE __m512i join(__m256i a, __m256i b) { return _mm512_inserti32x8(_mm512_castsi256_si512(a), b, 1); }

/// The 32-bit word at a + at in lanes 0-7, the one at b + at in lanes 8-15 (a broadcast and a
/// masked one: the move this layout costs a column).
DS41_ALWAYS_INLINE __m512i pair_words(const uint8_t* a, const uint8_t* b, long at) {
  return _mm512_mask_set1_epi32(_mm512_set1_epi32(static_cast<int>(load_u32(a + at))), 0xFF00, static_cast<int>(load_u32(b + at)));
}
/// field_shifted<2, J> of two panels' fields (a: lanes 0-7, b: lanes 8-15): each lane's 2-bit
/// code of column e0 + J (e0 even) shifted down to its low bits, the next row's bits above it.
template <int J>
DS41_ALWAYS_INLINE __m512i pair_shifted2(const uint8_t* a, const uint8_t* b, int e0) {
  constexpr int kJ = J % 2;  // a 32-bit word holds two columns of 8 rows
  const __m512i word = pair_words(a, b, 2L * (e0 + J - kJ));
  const __m512i shifts = _mm512_add_epi32(_mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14),
                                          _mm512_set1_epi32(16 * kJ));
  return _mm512_srlv_epi32(word, shifts);
}
/// The float of each lane's code in a 4-entry table: a permute of the table written four times
/// (the permute reads the index's low 4 bits, of which the two above the code are the next row's).
DS41_ALWAYS_INLINE __m512 table4(__m256 table_twice, __m512i shifted) {
  return _mm512_permutexvar_ps(shifted, join(table_twice, table_twice));
}

/// TQ2_0's d of each lane's row (panels 2h and 2h + 1 of pb).
DS41_ALWAYS_INLINE __m512 tq2_d(const uint8_t* const* pb, int h) {
  constexpr GgmlType t = GgmlType::kTQ2_0;
  constexpr int hb = ggml_panel_header_bytes(t);
  return join(header_f16(pb[2 * h], hb, header_at(t, 64)), header_f16(pb[2 * h + 1], hb, header_at(t, 64)));
}
/// TQ2_0's code − 1 (−1, 0, 1 or 2) of each lane's row at column e0 + J, as a float.
template <int J>
DS41_ALWAYS_INLINE __m512 tq2_factors(const uint8_t* const* pb, int h, int e0) {
  constexpr int q = ggml_panel_field_offset(GgmlType::kTQ2_0, 0);
  return table4(_mm256_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2), pair_shifted2<J>(pb[2 * h] + q, pb[2 * h + 1] + q, e0));
}

/// Columns [0, n) (one block: n = 256) of the four panels pb[0..3]: sink(e, v), v[h] column e of
/// panels 2h (lanes 0-7) and 2h + 1 (lanes 8-15), each lane's value as decode_panels gives it.
template <GgmlType t, class Sink>
DS41_ALWAYS_INLINE Sink decode_pairs(const uint8_t* const* pb, int n, Sink sink) {
  static_assert(served(t) && ggml_block_elems(t) == 256);
  constexpr int hb = ggml_panel_header_bytes(t), q = ggml_panel_field_offset(t, 0);
  __m512 v[2];
  if constexpr (t == GgmlType::kQ2_K) {  // (d·scale)·q − dmin·min, scale and min the nibbles of scales[s]
    const __m256 codes2 = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
    __m512 d[2], dmin[2], vd[2], vm[2];
    __m512i words[2][4];  // scales[0..15] of each lane's row as four words
    DS41_UNROLL for (int h = 0; h < 2; ++h) {
      const uint8_t *a = pb[2 * h], *b = pb[2 * h + 1];
      d[h] = join(header_f16(a, hb, header_at(t, 80)), header_f16(b, hb, header_at(t, 80)));
      dmin[h] = join(header_f16(a, hb, header_at(t, 82)), header_f16(b, hb, header_at(t, 82)));
      for (int w = 0; w < 4; ++w) words[h][w] = join(header_words(a, hb, header_at(t, 4 * w)), header_words(b, hb, header_at(t, 4 * w)));
    }
    const __m512i m4 = _mm512_set1_epi32(0xF), m8 = _mm512_set1_epi32(0xFF);
    for (int s = 0; s < 16 && 16 * s < n; ++s) {
      DS41_UNROLL for (int h = 0; h < 2; ++h) {
        const __m512i sm = _mm512_and_si512(_mm512_srli_epi32(words[h][s / 4], 8 * (s % 4)), m8);
        vd[h] = _mm512_mul_ps(d[h], _mm512_cvtepi32_ps(_mm512_and_si512(sm, m4)));
        vm[h] = _mm512_mul_ps(dmin[h], _mm512_cvtepi32_ps(_mm512_srli_epi32(sm, 4)));
      }
      for (int l = 0; l < 16; l += 4) {
        const int e0 = 16 * s + l;
        unrolled<4>([&](auto J) DS41_LAMBDA_INLINE {
          DS41_UNROLL for (int h = 0; h < 2; ++h)  // exact_mul_sub's FMA: the product d·scale·q is exact
            v[h] = _mm512_fmsub_ps(vd[h], table4(codes2, pair_shifted2<J>(pb[2 * h] + q, pb[2 * h + 1] + q, e0)), vm[h]);
          sink(e0 + J, v);
        });
      }
    }
  } else {  // TQ2_0: (code − 1)·d
    const __m512 d[2] = {tq2_d(pb, 0), tq2_d(pb, 1)};
    for (int e0 = 0; e0 < n; e0 += 4)
      unrolled<4>([&](auto J) DS41_LAMBDA_INLINE {
        DS41_UNROLL for (int h = 0; h < 2; ++h) v[h] = _mm512_mul_ps(tq2_factors<J>(pb, h, e0), d[h]);
        sink(e0 + J, v);
      });
  }
  return sink;
}

/// TQ2_0's decode GEMV over one block of the four panels (n = 256) with its codes as factors,
/// where every x·d is zero or normal (gemv_ggml.hpp's products_normal): a
/// weight is f·d with f = code − 1 in {−1, 0, 1, 2}, and f·(x·d) is then x·(f·d) exactly (by 2
/// too: neither product leaves the normal range), so a + f·(x·d) in one FMA is the Linear's
/// a + x·w. A column of 16 rows: the masked broadcast, the shift, the permute giving f as a float,
/// x·d and the FMA, against the same four and the scale's product, the Linear's product and add.
DS41_ALWAYS_INLINE void tq2_factor_chains(const uint8_t* const* pb, int n, const float* x, __m512 a[2]) {
  const __m512 d[2] = {tq2_d(pb, 0), tq2_d(pb, 1)};
  for (int e0 = 0; e0 < n; e0 += 4)
    unrolled<4>([&](auto J) DS41_LAMBDA_INLINE {
      const __m512 xv = _mm512_set1_ps(x[e0 + J]);
      DS41_UNROLL for (int h = 0; h < 2; ++h) a[h] = _mm512_fmadd_ps(tq2_factors<J>(pb, h, e0), _mm512_mul_ps(xv, d[h]), a[h]);
    });
}

}  // namespace ds41::host_ggml::pairs512
#include "../../core/fp_exact_end.hpp"
#endif  // DS41_HOST_GGML_PAIRS512
