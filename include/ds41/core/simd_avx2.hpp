// ds41/core/simd_avx2.hpp — small AVX2 helpers shared by host-only fast paths (host builds with
// AVX2; nothing here is compiled for the device or without AVX2).
#pragma once
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>

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

/// dot[j] = Σ_d q[d]·k[j][d] for 8 rows, each sum in d order (one lane per row, no FMA): the
/// rows are read 8 columns at a time and transposed, so the 8 sums advance side by side.
inline void dot8_in_order(const float* q, const float* const k[8], int D, float dot[8]) {
  __m256 acc = _mm256_setzero_ps();
  int d0 = 0;
  for (; d0 + 8 <= D; d0 += 8) {
    __m256 c[8];
    for (int j = 0; j < 8; ++j) c[j] = _mm256_loadu_ps(k[j] + d0);
    transpose8(c);  // c[i] lane j = k[j][d0 + i]
    for (int i = 0; i < 8; ++i) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_broadcast_ss(q + d0 + i), c[i]));
  }
  _mm256_storeu_ps(dot, acc);
  for (; d0 < D; ++d0)
    for (int j = 0; j < 8; ++j) dot[j] += q[d0] * k[j][d0];
}

}  // namespace ds41::avx2
#endif
