// ds41/core/numeric.hpp — scalar number formats of the reference: bf16, e4m3, e2m1, ue8m0.
//
// Everything here is a pure DS41_HD function on float32 values, so the host reference and the CUDA
// kernels call the very same code. Activations are carried as float32 numbers that are exactly
// representable in the narrower format; "round" functions put a float onto that grid.
#pragma once
#include <cstdint>
#include <cmath>
#include <cstring>
#include "macros.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

DS41_HD uint32_t f32_bits(float f) {
#if DS41_DEVICE_CODE
  return __float_as_uint(f);
#else
  uint32_t b;  // memcpy rather than std::bit_cast: nvcc's front end lacks the builtin behind it
  std::memcpy(&b, &f, sizeof b);
  return b;
#endif
}

DS41_HD float bits_f32(uint32_t b) {
#if DS41_DEVICE_CODE
  return __uint_as_float(b);
#else
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
#endif
}

DS41_HD bool is_nan(float x) { return x != x; }

// ---------------------------------------------------------------- bf16
/// Round a float32 to the nearest bfloat16 (ties to even), returned as float32. NaN stays NaN.
DS41_HD float bf16_round(float x) {
  if (is_nan(x)) return x;
  uint32_t b = f32_bits(x);
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  return bits_f32(b);
}
/// The 16-bit pattern of bf16_round(x).
DS41_HD uint16_t bf16_bits(float x) { return static_cast<uint16_t>(f32_bits(bf16_round(x)) >> 16); }
DS41_HD float bf16_to_f32(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }
/// IEEE binary16 bits to f32 (exact; subnormals kept, inf and NaN carried over): GGUF's F16 and the
/// f16 scales of ggml's blocks (ggml_quants.hpp), safetensors' F16.
DS41_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
  if (exp == 0) return bits_f32(f32_bits(static_cast<float>(man) * 0x1p-24f) | sign);  // 0 or man·2^-24
  if (exp == 31) return bits_f32(sign | 0x7F800000u | (man << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

// ---------------------------------------------------------------- fp8 e4m3 (float8_e4m3fn)
constexpr float kE4m3Max = 448.0f;

/// Whether an e4m3 code is subnormal (exponent field 0, mantissa nonzero: ±m·2^-9).
DS41_HD constexpr bool e4m3_code_is_subnormal(uint8_t c) { return (c & 0x78) == 0 && (c & 0x07) != 0; }

/// Nearest float8_e4m3fn value, ties to the even code, saturating at ±448 (CUDA's satfinite
/// conversion). Subnormals are multiples of 2^-9 below 2^-6. The sign of zero is kept.
DS41_HD float e4m3_round(float v) {
  if (is_nan(v)) return v;
  float a = fabsf(v);
  float r;
  if (a >= 0.015625f) {  // normal range: keep 3 mantissa bits, round to nearest even
    uint32_t b = f32_bits(a);
    b = (b + 0x7FFFFu + ((b >> 20) & 1u)) & 0xFFF00000u;
    r = bits_f32(b);
    if (r > kE4m3Max) r = kE4m3Max;
  } else {  // subnormal grid m * 2^-9; a * 512 is exact
    r = rintf(a * 512.0f) * (1.0f / 512.0f);
  }
  return copysignf(r, v);
}

/// Encode an on-grid e4m3 value to its 8-bit code (sign | exp4 | man3).
DS41_HD uint8_t e4m3_encode(float v) {
  float r = e4m3_round(v);
  uint8_t sign = (f32_bits(r) >> 31) ? 0x80 : 0;
  float a = fabsf(r);
  if (a < 0.015625f) return sign | static_cast<uint8_t>(rintf(a * 512.0f));
  uint32_t b = f32_bits(a);
  int e = static_cast<int>((b >> 23) & 0xFF) - 127 + 7;
  uint32_t m = (b >> 20) & 7u;
  return sign | static_cast<uint8_t>((e << 3) | m);
}
DS41_HD float e4m3_decode(uint8_t c) {
  float sign = (c & 0x80) ? -1.0f : 1.0f;
  int e = (c >> 3) & 0xF, m = c & 7;
  if (e == 0) return sign * m * (1.0f / 512.0f);
  if (e == 15 && m == 7) return NAN;
  return sign * ldexpf(1.0f + m / 8.0f, e - 7);
}
/// One element of an fp8 table row (the engram tables): bf16(code's value · its block's scale).
/// Backends' row gathers (HostBackend::gather_fp8_rows, CudaBackend's) give these bits.
DS41_HD float fp8_row_value(uint8_t code, float scale) { return bf16_round(e4m3_decode(code) * scale); }

/// e4m3_decode by bit placement, for kernels where a 256-entry table would cost shared-memory
/// bank conflicts: the code's 7 exponent and mantissa bits go to float32's bits 20..26, which
/// reads as 2^(e-127)·(1 + m/8) (e > 0) or as the float32 subnormal m·2^-129 (e = 0); times
/// 2^120 (exact: a power of two, no overflow) that is 2^(e-7)·(1 + m/8) or m·2^-9, the e4m3
/// value. The sign bit is OR-ed in (so code 0x80 gives -0), and both NaN codes give NAN. Needs
/// float32 subnormals kept (no flush to zero). The same bits as e4m3_decode for all 256 codes
/// (test_numerics).
DS41_HD float e4m3_decode_shift(uint32_t code) {
  const uint32_t mag = code & 0x7Fu;
  if (mag == 0x7Fu) return NAN;
  const float a = bits_f32(mag << 20) * 0x1p120f;
  return bits_f32(f32_bits(a) | ((code & 0x80u) << 24));
}
/// Host fast path of e4m3_decode: its 256 results, computed once by e4m3_decode itself, so a lookup
/// gives the very same bits (every e4m3 value is exact in float32; both NaN codes give NAN). A host
/// function (not DS41_HD): device code keeps calling e4m3_decode. Hoist the call out of loops (the
/// first call builds the table).
inline const float* e4m3_decode_table() {
  static const struct Table {
    float v[256];
    Table() {
      for (int c = 0; c < 256; ++c) v[c] = e4m3_decode(static_cast<uint8_t>(c));
    }
  } table;
  return table.v;
}

// ---------------------------------------------------------------- fp4 e2m1
constexpr float kE2m1Max = 6.0f;

/// Nearest of {0, .5, 1, 1.5, 2, 3, 4, 6} after clamping to ±6; exact ties go to the even code
/// (0.25→0, 0.75→1, 1.25→1, 1.75→2, 2.5→2, 3.5→4, 5→4).
DS41_HD float e2m1_round(float v) {
  if (is_nan(v)) return v;
  float a = fminf(fabsf(v), kE2m1Max);
  float r;
  if (a <= 0.25f) r = 0.0f;
  else if (a < 0.75f) r = 0.5f;
  else if (a <= 1.25f) r = 1.0f;
  else if (a < 1.75f) r = 1.5f;
  else if (a <= 2.5f) r = 2.0f;
  else if (a < 3.5f) r = 3.0f;
  else if (a <= 5.0f) r = 4.0f;
  else r = 6.0f;
  return copysignf(r, v);
}

/// 4-bit code (sign | exp2 | man1) of e2m1_round(v), and back. The magnitude's code (0..7 for 0,
/// .5, 1, 1.5, 2, 3, 4, 6) is the number of e2m1_round's thresholds |v| passes, its ties included,
/// without the ladder's branches (the golden filler quantises every fp4 expert weight through it);
/// the sign is v's (-0 and negatives that round to 0 give code 8); a NaN gives 7 with its sign, as
/// the ladder's value did. test_numerics pins it against e2m1_round.
DS41_HD uint8_t e2m1_encode(float v) {
  const uint8_t sign = (f32_bits(v) >> 31) ? 8 : 0;
  if (is_nan(v)) return sign | 7;
  const float a = fabsf(v);
  const int c = (a > 0.25f) + (a >= 0.75f) + (a > 1.25f) + (a >= 1.75f) + (a > 2.5f) + (a >= 3.5f) + (a > 5.0f);
  return sign | static_cast<uint8_t>(c);
}
DS41_HD float e2m1_decode(uint8_t c) {
  // code & 7 -> 0, .5, 1, 1.5, 2, 3, 4, 6
  uint8_t m = c & 7;
  float a = m < 4 ? 0.5f * m : (m == 4 ? 2.0f : m == 5 ? 3.0f : m == 6 ? 4.0f : 6.0f);
  return (c & 8) ? -a : a;
}

// ---------------------------------------------------------------- ue8m0 power-of-two scales
/// 2^ceil(log2(x)) for a positive finite float, taken from the exponent bits: the exponent, plus
/// one when the mantissa is non-zero (the kernels' `fast_round_scale`).
DS41_HD float pow2_ceil(float x) {
  uint32_t b = f32_bits(x);
  uint32_t e = (b >> 23) & 0xFFu;
  if (b & 0x7FFFFFu) e += 1;
  if (e == 0) e = 1;  // subnormal inputs still give a usable (normal) scale
  if (e >= 255) e = 254;
  return bits_f32(e << 23);
}

/// e8m0 (OCP MX) as files and the host's fp4 panels store block scales: 2^(e-127), byte 0 the
/// subnormal 2^-127 (bits 0x00400000); 255 (NaN) is never stored (f32_to_e8m0 refuses it).
DS41_HD float e8m0_to_f32(uint8_t e) { return bits_f32(e == 0 ? 0x00400000u : static_cast<uint32_t>(e) << 23); }
/// The e8m0 byte of a power of two in [2^-127, 2^127]; false for anything else (zero, NaN,
/// infinities, negative values, non-powers of two, subnormals below 2^-127), which e8m0 cannot hold.
DS41_HD bool f32_to_e8m0(float p, uint8_t* e) {
  const uint32_t b = f32_bits(p);
  if (b == 0x00400000u) return *e = 0, true;
  if ((b & 0x807FFFFFu) != 0 || ((b >> 23) & 0xFF) == 0 || ((b >> 23) & 0xFF) == 255) return false;
  *e = static_cast<uint8_t>(b >> 23);
  return true;
}

}  // namespace ds41
#include "fp_exact_end.hpp"
