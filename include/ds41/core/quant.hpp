// ds41/core/quant.hpp — the quantise-dequantise round trips the reference applies to activations.
//
// Each works in place on one block of bf16-valued floats and leaves bf16 values behind, exactly as
// the reference's act_quant / fp4_act_quant with inplace=True (SCHEMA §8, shim C4/C5).
#pragma once
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

constexpr int kFp8Block = 32;        // window KV, Linear inputs
constexpr int kFp4IndexBlock = 32;   // indexer q / keys (pow2 scale)
constexpr int kFp4KvBlock = 16;      // compressed KV (e4m3 scale)

DS41_HD float block_amax(const float* x, int n, float floor_value) {
  float amax = floor_value;
  for (int i = 0; i < n; ++i) amax = fmaxf(amax, fabsf(x[i]));
  return amax;
}

/// fp8 e4m3 with a power-of-two scale: amax = max(max|x|, 1e-4), s = 2^ceil(log2(amax/448)),
/// x ← bf16(e4m3(x/s)·s).
DS41_HD float fp8_pow2_scale_of_amax(float amax) { return pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f)); }
/// (max is exact in any order, so a floor of 0 then 1e-4 is block_amax(x, n, 1e-4); a NaN is
/// skipped either way, and a warp may reduce the max in its own order.)
DS41_HD float fp8_pow2_scale(const float* x, int n) { return fp8_pow2_scale_of_amax(block_amax(x, n, 0.0f)); }
/// e4m3(clamp(x/s, ±448)): the code value x takes under the block scale s (x/s is exact: s is a
/// power of two).
DS41_HD float fp8_pow2_value(float x, float s) { return e4m3_round(fminf(fmaxf(x / s, -kE4m3Max), kE4m3Max)); }
DS41_HD void fp8_pow2_roundtrip(float* x, int n) {
  float s = fp8_pow2_scale(x, n);
  for (int i = 0; i < n; ++i) x[i] = bf16_round(fp8_pow2_value(x[i], s) * s);
}

// ---------------------------------------------------------------- Linear inputs (act_quant)
// Before a Linear with fp8 or fp4 weights the reference quantises the input row without the
// round trip back (act_quant(x, 32, "ue8m0"), model.py linear()): the GEMM reads q and s.

/// Whether act_quant takes v as it is (neither inf nor NaN), and the scale of a block that holds
/// one that is not (act_quant_scale; a warp's reduction in the device kernels uses both).
DS41_HD bool act_quant_finite(float v) { return fabsf(v) <= 3.40282347e38f; }
DS41_HD float act_quant_nan_scale() { return bits_f32(0x7FC00000u); }
/// act_quant's scale of one block of a Linear input: fp8_pow2_scale, except that a block holding
/// an inf or NaN gets NaN. The reference then turns every output of the row into NaN (inf/inf or
/// the NaN itself becomes a NaN code, and NaN·w is NaN even for w = 0); a NaN scale does the same
/// through (part·s).
DS41_HD float act_quant_scale(const float* x, int n) {
  for (int i = 0; i < n; ++i)
    if (!act_quant_finite(x[i])) return act_quant_nan_scale();  // inf or NaN
  return fp8_pow2_scale(x, n);
}
/// act_quant's e4m3 value of x under the block scale s.
DS41_HD float act_quant_value(float x, float s) { return fp8_pow2_value(x, s); }
/// act_quant of one input row: q[k] (e4m3 values as floats) and scale[kb] per 32 (the last block
/// may be short).
DS41_HD void act_quant_row(const float* x, int K, float* q, float* scale) {
  for (int kb = 0; kb < K; kb += kFp8Block) {
    const int n = K - kb < kFp8Block ? K - kb : kFp8Block;
    const float s = act_quant_scale(x + kb, n);
    scale[kb / kFp8Block] = s;
    for (int k = 0; k < n; ++k) q[kb + k] = act_quant_value(x[kb + k], s);
  }
}

/// fp4 e2m1 with a power-of-two scale (indexer, block 32): amax ≥ 6·2^-126, s = 2^ceil(log2(amax/6)).
DS41_HD float fp4_pow2_scale(const float* x, int n) {
  return pow2_ceil(block_amax(x, n, 6.0f * 1.1754943508222875e-38f) * (1.0f / 6.0f));
}
/// fp4 e2m1 with an e4m3 scale (compressed KV, block 16): amax ≥ 6·2^-9, s = e4m3(amax/6) — an fp32
/// division by 6, not a multiplication by 1/6.
DS41_HD float fp4_e4m3_scale(const float* x, int n) {
  return e4m3_round(block_amax(x, n, 6.0f / 512.0f) / 6.0f);
}
DS41_HD void fp4_apply_scale(float* x, int n, float s) {
  for (int i = 0; i < n; ++i) {
    float q = e2m1_round(fminf(fmaxf(x[i] / s, -kE2m1Max), kE2m1Max));
    x[i] = bf16_round(q * s);
  }
}
DS41_HD void fp4_pow2_roundtrip(float* x, int n) { fp4_apply_scale(x, n, fp4_pow2_scale(x, n)); }
DS41_HD void fp4_e4m3_roundtrip(float* x, int n) { fp4_apply_scale(x, n, fp4_e4m3_scale(x, n)); }

enum class RoundTrip : int { kFp8Pow2 = 0, kFp4Pow2 = 1, kFp4E4m3 = 2 };

/// Apply a round trip to a row of `n` values cut into blocks of `block` (the last may be short).
DS41_HD void roundtrip_row(float* x, int n, int block, RoundTrip kind) {
  for (int b = 0; b < n; b += block) {
    int m = n - b < block ? n - b : block;
    if (kind == RoundTrip::kFp8Pow2) fp8_pow2_roundtrip(x + b, m);
    else if (kind == RoundTrip::kFp4Pow2) fp4_pow2_roundtrip(x + b, m);
    else fp4_e4m3_roundtrip(x + b, m);
  }
}

}  // namespace ds41
#include "fp_exact_end.hpp"
