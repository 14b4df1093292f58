// ds41/backend/host_gemv_scaled.hpp — the host decode GEMV (one input row) of fp8 panels in a
// scaled domain, bit-identical to MatrixView::dot.
//
// Why: the table decoder (host_gemv_panels.hpp: Fp8Columns) spends ~13 shuffle-unit operations
// per 32 codes on byte-table lookups and widening unpacks, and on this CPU family the shuffle
// units, not memory, bound the GEMV (llvm-mca, Zen 3: ~34 cycles per 128 weights). Here a
// column of 8 rows costs 3 operations, one of them a shuffle: vpshufb puts row i's code c in the
// top byte of lane i (zeros below), vpmulhw by 2^12 (an integer-multiply unit) shifts it right by
// 4 with its sign copied, and an AND keeps sign | c[6:0] << 20: the float w' = w·2^-120 for every
// finite e4m3 w (subnormal codes become f32 subnormals m·2^-129). Measured, one core, in cache:
// 10.7 -> 12.5 Gweights/s through host_gemv::linear (15 for the bare kernel).
// The 2^-120 is paid back without a multiply per weight: x is pre-scaled (x' = x·2^60), so
// x'·w' = x·w·2^-60, and each block's partial sum is scaled back by 2^60 (part'·2^60 = part,
// exactly) before the reference's (part·s_x)·s_w. Every rounding is the reference's, because
// scaling by a power of two commutes with rounding while nothing leaves the normal range: with
// 2^-57 <= |x| < 2^62 (or x == 0) each nonzero product has |x·w·2^-60| >= 2^-126 (|w| >= 2^-9)
// and x' is finite; a partial sum that lands below 2^-126 is the sum of two multiples of 2^-149
// and so exact in both domains. The x of an fp8 Linear are act_quant's e4m3 values (0 or
// 2^-9 <= |q| <= 448), always inside that range. Everything else takes the table decoder: an x
// outside the range, a thread running with FTZ or DAZ set (they would flush the scaled domain's
// exact subnormals), and matrices pack() did not mark `host_scaled_decode` (codes often
// subnormal — a multiply with a subnormal operand is slow on this CPU family, and trained weights
// have ~1 in 10^4 such codes, uniform random bytes 1 in 18).
// fp4 keeps its table decoder: the same scheme needs a byte lookup per code first (e2m1's 0.5
// would otherwise be an f32 subnormal) and measured 12.4 against the table decoder's 14.3
// Gweights/s (one core, in cache).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include "../core/linear_math.hpp"
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#include "host_gemv_panels.hpp"

namespace ds41::host_gemv::scaled {

constexpr float kInputScale = 0x1p60f;  // x' = x·2^60 (w' = w·2^-120)
constexpr float kPartScale = 0x1p60f;   // part = part'·2^60

inline bool x_in_exact_range(float x) {
  const float a = std::fabs(x);
  return a == 0.0f || (a >= 0x1p-57f && a < 0x1p62f);  // false for NaN and inf
}
/// FTZ or DAZ set on this thread would flush the scaled domain's subnormals; the reference runs without.
inline bool flush_modes_off() { return (_mm_getcsr() & 0x8040u) == 0; }

/// xs = x·2^60 (K floats) if every x is in the exact range; false (xs unusable) if not.
inline bool scale_input(const float* x, int K, float* xs) {
  const __m256 factor = _mm256_set1_ps(kInputScale), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 lo = _mm256_set1_ps(0x1p-57f), hi = _mm256_set1_ps(0x1p62f), zero = _mm256_setzero_ps();
  __m256 ok_all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k), a = _mm256_and_ps(v, abs_mask);
    // a == 0 || (a >= 2^-57 && a < 2^62); ordered compares are false for NaN
    const __m256 ok = _mm256_or_ps(_mm256_cmp_ps(a, zero, _CMP_EQ_OQ),
                                   _mm256_and_ps(_mm256_cmp_ps(a, lo, _CMP_GE_OQ), _mm256_cmp_ps(a, hi, _CMP_LT_OQ)));
    ok_all = _mm256_and_ps(ok_all, ok);
    _mm256_storeu_ps(xs + k, _mm256_mul_ps(v, factor));
  }
  if (_mm256_movemask_ps(ok_all) != 0xFF) return false;
  for (; k < K; ++k) {
    if (!x_in_exact_range(x[k])) return false;
    xs[k] = x[k] * kInputScale;
  }
  return true;
}

/// Whether pack() may mark a matrix for the scaled decoder: fp8 with at most 1 code in 512
/// subnormal (a speed choice; the result is exact either way).
inline bool decode_suits(WeightFormat f, const uint8_t* codes, long n_codes) {
  if (f != WeightFormat::kFp8Block32) return false;
  long subnormal = 0;
  for (long i = 0; i < n_codes; ++i) subnormal += (codes[i] & 0x78) == 0 && (codes[i] & 0x07) != 0;
  return subnormal * 512 <= n_codes;
}

/// vpshufb control giving, in each 128-bit half, lane d the half's byte 4j + d (row d's code for
/// column j, panel_code_byte) in its top byte and zeros below. Column j + 1's control is this + 4
/// per byte (the zeroing bytes stay >= 0x80).
inline __m256i column0_control() {
  const char z = static_cast<char>(0x80);
  return _mm256_setr_epi8(z, z, z, 0, z, z, z, 1, z, z, z, 2, z, z, z, 3,  //
                          z, z, z, 0, z, z, z, 1, z, z, z, 2, z, z, z, 3);
}

/// Decode GEMV of panels [p0, p0 + NP) from the scaled input xs (act_quant's q·2^60) and the
/// input's block scales x_scale into y[0 .. 8·NP), summing each row in the reference's order
/// (dot_fp8_block32: per-32 partial sums in K order, then acc + (part·s_x)·s_w). Padding past K
/// is never added (a +0 could turn -0 into +0).
template <int NP>
void gemv_tile(const float* xs, const float* x_scale, const MatrixView& w, long p0, float* y, OutRound round) {
  constexpr int g = 4;  // K positions per 32-byte panel group
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const __m256i shift4 = _mm256_set1_epi16(1 << 12), keep = _mm256_set1_epi32(static_cast<int>(0x87F00000u));
  const __m256i next_column = _mm256_set1_epi8(4);
  const __m256 part_back = _mm256_set1_ps(kPartScale);
  __m256 acc[NP];
  for (int v = 0; v < NP; ++v) acc[v] = _mm256_setzero_ps();
  for (int kb = 0; kb < K; kb += panels::kBlockK) {
    const int ke = std::min(K, kb + panels::kBlockK);
    __m256 part[NP];
    for (int v = 0; v < NP; ++v) part[v] = _mm256_setzero_ps();
    for (int q = kb / g; q * g < ke; ++q) {
      const int jn = std::min(g, ke - q * g);
      __m256 xk[g];
      for (int j = 0; j < jn; ++j) xk[j] = _mm256_broadcast_ss(xs + q * g + j);
      // panel by panel: 4 decoded columns live at a time (all NP x 4 at once spill registers)
      for (int v = 0; v < NP; ++v) {
        const __m256i codes = panels::load_group(panel0 + v * pb, q);
        __m256i control = column0_control();
        for (int j = 0; j < jn; ++j) {
          const __m256i shifted = _mm256_mulhi_epi16(_mm256_shuffle_epi8(codes, control), shift4);
          part[v] = _mm256_add_ps(part[v], _mm256_mul_ps(xk[j], _mm256_castsi256_ps(_mm256_and_si256(shifted, keep))));
          control = _mm256_add_epi8(control, next_column);
        }
      }
    }
    const __m256 sx = _mm256_broadcast_ss(x_scale + kb / 32);
    for (int v = 0; v < NP; ++v)
      acc[v] = panels::add_block(acc[v], _mm256_mul_ps(part[v], part_back), sx, panels::block_scales(w, p0 + v, kb / 32));
  }
  for (int v = 0; v < NP; ++v) panels::store_rounded(acc[v], y + 8 * v, round);
}

/// Whether this call may take the scaled decoder (besides a scaled input having been prepared).
inline bool usable(const MatrixView& w) {
  return w.format == WeightFormat::kFp8Block32 && w.layout == WeightLayout::kPanels8 && w.host_scaled_decode &&
         flush_modes_off();
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for one input row: act_quant's q and scales
/// x_scale (for rows outside whole panels, by the scalar panel dot) and xs = q·2^60 from
/// scale_input.
inline void gemv_rows(const float* q, const float* x_scale, const float* xs, const MatrixView& w, float* y,
                      OutRound round, int n_begin, int n_end) {
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) { gemv_tile<NP>(xs, x_scale, w, p0, y + n, round); },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

}  // namespace ds41::host_gemv::scaled
#endif
