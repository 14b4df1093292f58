// ds41/backend/host/broadcast512.hpp — 512-bit multiply, multiply-add and byte dot product with
// one operand broadcast from memory inside the instruction (m32{1to16}), for the multi-row tiles
// (host/gemm_panels512.hpp, host/gemm_fp8dot512.hpp, host/gemm_fp4int512.hpp).
//
// Why: those tiles apply each decoded weight vector to several input rows, one scalar of each
// row broadcast per instruction. Written with _mm512_set1_*, GCC emits a separate broadcast per
// row and scalar (vbroadcastss / vpbroadcastd) and never folds it into the arithmetic: one more
// instruction per multiply-add. Folded in, measured: the f32 tile on one Zen 5 core ran 8 rows x 2
// vectors from L1 at ~65% of BM_PeakMulAdd with the separate broadcasts and 95-100% with them
// folded; on one Xeon VM (Emerald Rapids; ab runs alternating, medians, same bits)
// the fp8 multiply-add tile at T = 8 took 0.91-0.93x the time (5120 x 8192 cold, 2 threads, 5.07
// -> 4.55 ms; 512 x 2048 warm, one core, 241 -> 223 us) and the fp4 integer tile 0.91-0.93x (1024
// x 2048 warm, one core: T = 2 / 3 / 8 88 / 178 / 347 -> 82 / 166 / 316 us).
//
// The address goes in a register ("r", not "m": with an "m" operand GCC stored every accumulator
// to the stack on every use); the memory must be written before the tile starts and not while it
// runs (the asm does not say it reads memory). Each instruction computes what its intrinsic
// form computes: the same bits.
#pragma once
#include <cstdint>
#include "bf16_range512.hpp"  // DS41_HOST_AVX512
#if defined(DS41_HOST_AVX512)
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv {

/// w · x[0] on 16 lanes (each product rounded; IEEE multiplication commutes).
inline __m512 mul_broadcast(__m512 w, const float* x) {
#if defined(__GNUC__)
  __m512 p;
  asm("vmulps (%1)%{1to16%}, %2, %0" : "=v"(p) : "r"(x), "v"(w));
  return p;
#else
  return _mm512_mul_ps(_mm512_set1_ps(*x), w);
#endif
}

/// a + w · x[0] in one rounding (vfmadd231ps m32{1to16}).
inline __m512 fma_broadcast(__m512 a, __m512 w, const float* x) {
#if defined(__GNUC__)
  asm("vfmadd231ps (%1)%{1to16%}, %2, %0" : "+v"(a) : "r"(x), "v"(w));
  return a;
#else
  return _mm512_fmadd_ps(_mm512_set1_ps(*x), w, a);
#endif
}

#if defined(__AVX512BF16__)
/// a + the bf16 pair dot products of w with x[0]'s pair in every lane (vdpbf16ps m32{1to16}).
inline __m512 dpbf16_broadcast(__m512 a, __m512i w, const uint32_t* x) {
#if defined(__GNUC__)
  asm("vdpbf16ps (%1)%{1to16%}, %2, %0" : "+v"(a) : "r"(x), "v"(w));
  return a;
#else
  return _mm512_dpbf16_ps(a, (__m512bh)w, (__m512bh)_mm512_set1_epi32(static_cast<int>(*x)));
#endif
}
#endif

#if defined(__AVX512VNNI__)
/// a + the byte dot products of w (unsigned) with x[0]'s four bytes (signed) in every lane
/// (vpdpbusd m32{1to16}).
inline __m512i dpbusd_broadcast(__m512i a, __m512i w, const uint32_t* x) {
#if defined(__GNUC__)
  asm("vpdpbusd (%1)%{1to16%}, %2, %0" : "+v"(a) : "r"(x), "v"(w));
  return a;
#else
  return _mm512_dpbusd_epi32(a, w, _mm512_set1_epi32(static_cast<int>(*x)));
#endif
}
#endif

}  // namespace ds41::host_gemv
#include "../../core/fp_exact_end.hpp"
#endif
