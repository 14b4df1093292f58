// ds41/backend/host/bf16_range512.hpp — whether float32 products of two sets of values are all
// exact: each set's magnitude range, taken where every value is a finite bf16 number.
//
// Why: the reference multiplies bf16 values in float32 and rounds each product before adding it.
// A product of two bf16 values has at most 16 significant bits, so it is exact unless it falls
// below 2^-126 (rounded as a subnormal) or overflows; where no product can, a fused multiply-add
// gives the same bits as the multiply and the add, in one instruction. The bf16 Linear of several
// rows (gemm512::bf16_products_exact) and the host sparse attention (host/attention.hpp: q·k and
// bf16(p)·v) ask this before taking their fused loops; either answer gives the same bits.
// Compiled with AVX-512 F/BW/DQ/VL (DS41_HOST_AVX512, as host/gemv_scaled512.hpp).
#pragma once
#include <cstdint>
#include "../../core/numeric.hpp"
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__FMA__) && \
    !defined(__CUDA_ARCH__)
#define DS41_HOST_AVX512 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_exact {

/// The magnitudes seen so far: `bf16` false once a value was not a finite bf16 number (low 16
/// bits set, inf or NaN); lo the smallest nonzero magnitude's bits, hi the largest's (0 when every
/// value was zero).
struct Bf16Range {
  bool bf16 = true;
  uint32_t lo_bits = 0x7F800000u;  // +inf until a nonzero value
  uint32_t hi_bits = 0;
  float lo() const { return bits_f32(lo_bits); }
  float hi() const { return bits_f32(hi_bits); }
};

/// r widened by the n values at x.
inline void add_values(Bf16Range& r, const float* x, long n) {
  const __m512i low = _mm512_set1_epi32(0xFFFF), exponent = _mm512_set1_epi32(0x7F800000);
  const __m512i magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  __mmask16 bad = 0;
  __m512i lo = _mm512_set1_epi32(static_cast<int>(r.lo_bits)), hi = _mm512_set1_epi32(static_cast<int>(r.hi_bits));
  for (long k = 0; k < n; k += 16) {
    const __mmask16 in = n - k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - k)) - 1);
    const __m512i v = _mm512_maskz_loadu_epi32(in, x + k);
    const __m512i m = _mm512_and_si512(v, magnitude);
    bad |= _mm512_mask_test_epi32_mask(in, v, low);                                    // not a bf16 value
    bad |= _mm512_mask_cmpeq_epi32_mask(in, _mm512_and_si512(v, exponent), exponent);  // inf or NaN
    lo = _mm512_mask_min_epu32(lo, _mm512_mask_test_epi32_mask(in, m, m), lo, m);
    hi = _mm512_mask_max_epu32(hi, in, hi, m);
  }
  r.bf16 = r.bf16 && bad == 0;
  r.lo_bits = static_cast<uint32_t>(_mm512_reduce_min_epu32(lo));
  r.hi_bits = static_cast<uint32_t>(_mm512_reduce_max_epu32(hi));
}

/// Whether every product of a value in range a and one with magnitude in [b_lo, b_hi] (b's values
/// finite bf16 numbers, b_lo the smallest nonzero one) is exact in float32: a's values are finite
/// bf16 numbers, and all zero, or the smallest nonzero product at least 2^-126 and the largest
/// below 2^128 (in double: both bounds exact there).
inline bool products_exact(const Bf16Range& a, double b_lo, double b_hi) {
  if (!a.bf16) return false;
  if (a.hi_bits == 0 || b_hi == 0) return true;  // every product zero
  return static_cast<double>(a.lo()) * b_lo >= 0x1p-126 && static_cast<double>(a.hi()) * b_hi < 0x1p128;
}
inline bool products_exact(const Bf16Range& a, const Bf16Range& b) {
  return b.bf16 && products_exact(a, b.lo(), b.hi());
}

}  // namespace ds41::host_exact
#include "../../core/fp_exact_end.hpp"
#endif
