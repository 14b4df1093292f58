// ds41/core/simd_avx2.hpp — small AVX2 helpers shared by host-only fast paths (host builds with
// AVX2 and FMA, as x86-64-v3 has them: the 8-lane exp is FMAs by definition, and GCC's -mavx2 or
// -mavx512f alone do not enable FMA; nothing here is compiled for the device or without them:
// such a build takes every kernel's scalar form, the same bits).
#pragma once
#include "macros.hpp"  // DS41_HOST_AVX2
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#include <cmath>
#include <type_traits>
#include "numeric.hpp"
#include "quant.hpp"
#include "torch_math.hpp"

#include "fp_exact_begin.hpp"
namespace ds41::avx2 {

/// In-register 8x8 transpose: r[i] lane j  ->  r[j] lane i.
inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/// dot[j] = Σ_d q[d]·k[j][d] for 8·G rows, each sum in d order (one lane per row, no FMA): the
/// rows are read 8 columns at a time and transposed, so a group's 8 sums advance side by side.
/// The G groups are G independent add chains: one chain waits on its 3-cycle adds (24 cycles per
/// 8 columns), and two leave the transposes' shuffles as the bound (one core, in cache, D = 512:
/// G = 2 1.12x the rows per second of G = 1).
template <int G>
inline void dot_rows_in_order(const float* q, const float* const* k, int D, float* dot) {
  __m256 acc[G];
  DS41_UNROLL for (int g = 0; g < G; ++g) acc[g] = _mm256_setzero_ps();
  int d0 = 0;
  for (; d0 + 8 <= D; d0 += 8)
    DS41_UNROLL for (int g = 0; g < G; ++g) {
      __m256 c[8];
      DS41_UNROLL for (int j = 0; j < 8; ++j) c[j] = _mm256_loadu_ps(k[8 * g + j] + d0);
      transpose8(c);  // c[i] lane j = k[8g + j][d0 + i]
      DS41_UNROLL for (int i = 0; i < 8; ++i) acc[g] = _mm256_add_ps(acc[g], _mm256_mul_ps(_mm256_broadcast_ss(q + d0 + i), c[i]));
    }
  DS41_UNROLL for (int g = 0; g < G; ++g) _mm256_storeu_ps(dot + 8 * g, acc[g]);
  for (; d0 < D; ++d0)
    for (int j = 0; j < 8 * G; ++j) dot[j] += q[d0] * k[j][d0];
}

/// exp_sleef_u10 on 8 lanes, the same operations in the same order and so the same bits (rintf
/// is the round to nearest even of the default mode; NaN lanes keep d, as the scalar returns it).
inline __m256 exp_sleef_u10_8(__m256 d) {
  using namespace sleef_expf;
  const __m256 qf = _mm256_round_ps(_mm256_mul_ps(d, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256i q = _mm256_cvtps_epi32(qf);  // exact where used: |q| <= 151 inside the range
  __m256 s = _mm256_fmadd_ps(qf, _mm256_set1_ps(-kLn2Hi), d);
  s = _mm256_fmadd_ps(qf, _mm256_set1_ps(-kLn2Lo), s);
  __m256 u = _mm256_set1_ps(kC0);
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(kC1));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(kC2));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(kC3));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(kC4));
  u = _mm256_fmadd_ps(u, s, _mm256_set1_ps(kC5));
  u = _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_fmadd_ps(_mm256_mul_ps(s, s), u, s));
  const __m256i q_half = _mm256_srai_epi32(q, 1), bias = _mm256_set1_epi32(0x7f);
  const auto pow2 = [&](__m256i k) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, bias), 23)); };
  u = _mm256_mul_ps(_mm256_mul_ps(u, pow2(q_half)), pow2(_mm256_sub_epi32(q, q_half)));
  u = _mm256_blendv_ps(u, _mm256_setzero_ps(), _mm256_cmp_ps(d, _mm256_set1_ps(kZeroBelow), _CMP_LT_OQ));
  u = _mm256_blendv_ps(u, _mm256_set1_ps(INFINITY), _mm256_cmp_ps(d, _mm256_set1_ps(kInfAbove), _CMP_GT_OQ));
  return _mm256_blendv_ps(u, d, _mm256_cmp_ps(d, d, _CMP_UNORD_Q));
}

/// bf16_round on 8 lanes: round to nearest even on the top 16 bits, NaN kept as it is.
inline __m256 bf16_round8(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7FFF)), lsb),
                                     _mm256_set1_epi32(static_cast<int>(0xFFFF0000u)));
  return _mm256_blendv_ps(_mm256_castsi256_ps(r), x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

/// e4m3_decode on 8 lanes (codes zero-extended to 32 bits), the same exact floats: codes with an
/// exponent go by moving exponent and mantissa into float32's fields with the bias raised by 120;
/// |code| < 8 (m·2^-9) come from an 8-entry table (vpermps reads the low 3 bits of each lane);
/// the sign moves to bit 31; 0x7F/0xFF give e4m3_decode's NAN.
inline __m256 e4m3_decode8(__m256i codes) {
  const __m256 subnormal = _mm256_setr_ps(0.0f, 0x1p-9f, 0x2p-9f, 0x3p-9f, 0x4p-9f, 0x5p-9f, 0x6p-9f, 0x7p-9f);
  const __m256i mag_mask = _mm256_set1_epi32(0x7F);
  const __m256i mag = _mm256_and_si256(codes, mag_mask);
  const __m256 normal = _mm256_castsi256_ps(_mm256_add_epi32(_mm256_slli_epi32(mag, 20), _mm256_set1_epi32(120 << 23)));
  const __m256 sub = _mm256_permutevar8x32_ps(subnormal, mag);
  __m256 a = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(8), mag)));
  a = _mm256_or_ps(a, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_and_si256(codes, _mm256_set1_epi32(0x80)), 24)));
  return _mm256_blendv_ps(a, _mm256_set1_ps(NAN), _mm256_castsi256_ps(_mm256_cmpeq_epi32(mag, mag_mask)));
}

/// index_score_entry (compress_math.hpp, not the small-bmm path) for 8 keys at once, one lane per
/// key: the keys are transposed once, then per head the q·k sum runs in d order, rounded to bf16,
/// clamped at 0, times w[h] rounded to bf16, added to the total in head order; bf16(total).
/// hd <= kIndexScoresMaxDim (the scratch of transposed keys; index_scores_host checks it).
constexpr int kIndexScoresMaxDim = 512;
inline void index_scores8(const float* q, const float* w, const float* const k[8], int heads, int hd, float out[8]) {
  alignas(32) float kt[kIndexScoresMaxDim * 8];  // kt[d*8 + j] = k[j][d]
  if (hd > kIndexScoresMaxDim) hd = kIndexScoresMaxDim;  // never taken: the caller checks; bounds the scratch
  int d0 = 0;
  for (; d0 + 8 <= hd; d0 += 8) {
    __m256 c[8];
    DS41_UNROLL for (int j = 0; j < 8; ++j) c[j] = _mm256_loadu_ps(k[j] + d0);
    transpose8(c);
    DS41_UNROLL for (int i = 0; i < 8; ++i) _mm256_store_ps(kt + (d0 + i) * 8, c[i]);
  }
  for (float* tail = kt + d0 * 8; d0 < hd; ++d0, tail += 8)
    DS41_UNROLL for (int j = 0; j < 8; ++j) tail[j] = k[j][d0];
  __m256 total = _mm256_setzero_ps();
  const __m256 zero = _mm256_setzero_ps();
  // HN heads at once: HN independent add chains (one chain waits on its 3-cycle adds). 8 keep
  // the multiply pipes busy: one core, 16384 keys x 32 heads x 128: 3.2-3.8 ms against 5.5-6.3
  // with 4, and 10 ms when a runtime head count kept the sums in memory.
  const auto heads_at_once = [&]<int HN>(std::integral_constant<int, HN>, int h0) {
    __m256 dot[HN];
#pragma GCC unroll 8
    for (int i = 0; i < HN; ++i) dot[i] = _mm256_setzero_ps();
    const float* qh = q + static_cast<long>(h0) * hd;
    for (int d = 0; d < hd; ++d) {
      const __m256 kd = _mm256_load_ps(kt + d * 8);
#pragma GCC unroll 8
      for (int i = 0; i < HN; ++i)
        dot[i] = _mm256_add_ps(dot[i], _mm256_mul_ps(_mm256_broadcast_ss(qh + static_cast<long>(i) * hd + d), kd));
    }
#pragma GCC unroll 8
    for (int i = 0; i < HN; ++i) {  // the total in head order
      __m256 s = bf16_round8(dot[i]);
      s = _mm256_and_ps(s, _mm256_cmp_ps(s, zero, _CMP_GT_OQ));  // s > 0 ? s : 0 (NaN -> 0, as the scalar compare)
      total = _mm256_add_ps(total, bf16_round8(_mm256_mul_ps(s, _mm256_broadcast_ss(w + h0 + i))));
    }
  };
  int h0 = 0;
  for (; h0 + 8 <= heads; h0 += 8) heads_at_once(std::integral_constant<int, 8>{}, h0);
  for (; h0 + 4 <= heads; h0 += 4) heads_at_once(std::integral_constant<int, 4>{}, h0);
  for (; h0 < heads; ++h0) heads_at_once(std::integral_constant<int, 1>{}, h0);
  _mm256_storeu_ps(out, bf16_round8(total));
}

/// act_quant of one full 32-value block of a Linear input (quant.hpp act_quant_scale and
/// act_quant_value, 8 lanes at a time, the same bits; the rounding is e4m3_round's in vector form): q[0..32) and the returned scale. x/s is
/// taken as x·(1/s), the same real number (s is a power of two, so 1/s is exact) and so the same
/// rounding. Returns false, writing nothing, for a block holding an inf or NaN (the caller takes
/// the scalar form).
inline bool act_quant_block32(const float* x, float* q, float* scale) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 finite_max = _mm256_set1_ps(3.40282347e38f);
  __m256 v[4], amax = _mm256_set1_ps(1e-4f), bad = _mm256_setzero_ps();
  DS41_UNROLL for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    const __m256 a = _mm256_and_ps(v[i], abs_mask);
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, finite_max, _CMP_NLE_UQ));  // inf, or NaN (unordered)
    amax = _mm256_max_ps(amax, a);
  }
  if (_mm256_movemask_ps(bad)) return false;
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  const float s = fp8_pow2_scale_of_amax(_mm_cvtss_f32(m));
  *scale = s;
  const __m256 inv = _mm256_set1_ps(1.0f / s);
  const __m256 lim = _mm256_set1_ps(448.0f), nlim = _mm256_set1_ps(-448.0f);
  const __m256 normal_min = _mm256_set1_ps(0.015625f), grid = _mm256_set1_ps(512.0f), grid_inv = _mm256_set1_ps(1.0f / 512.0f);
  const __m256i half_m1 = _mm256_set1_epi32(0x7FFFF), keep = _mm256_set1_epi32(static_cast<int>(0xFFF00000u)), one = _mm256_set1_epi32(1);
  DS41_UNROLL for (int i = 0; i < 4; ++i) {
    const __m256 y = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[i], inv), nlim), lim);
    const __m256 a = _mm256_and_ps(y, abs_mask);
    // normal range: keep 3 mantissa bits, ties to even (e4m3_round's bit trick)
    const __m256i ab = _mm256_castps_si256(a);
    const __m256i rb = _mm256_and_si256(
        _mm256_add_epi32(_mm256_add_epi32(ab, half_m1), _mm256_and_si256(_mm256_srli_epi32(ab, 20), one)), keep);
    const __m256 rn = _mm256_min_ps(_mm256_castsi256_ps(rb), lim);
    // subnormal grid m·2^-9: a·512 is exact, rounded to the nearest even integer
    const __m256 rs = _mm256_mul_ps(_mm256_round_ps(_mm256_mul_ps(a, grid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), grid_inv);
    const __m256 r = _mm256_blendv_ps(rs, rn, _mm256_cmp_ps(a, normal_min, _CMP_GE_OQ));
    _mm256_storeu_ps(q + 8 * i, _mm256_or_ps(r, _mm256_andnot_ps(abs_mask, y)));  // the sign of y
  }
  return true;
}

}  // namespace ds41::avx2
#include "fp_exact_end.hpp"
#endif
