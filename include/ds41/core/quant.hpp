// ds41/core/quant.hpp — the quantise-dequantise round trips the reference applies to activations.
//
// Each works in place on one block of bf16-valued floats and leaves bf16 values behind, exactly as
// the reference's act_quant / fp4_act_quant with inplace=True (SCHEMA §8, shim C4/C5).
#pragma once
#include "numeric.hpp"

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
DS41_HD float fp8_pow2_scale(const float* x, int n) {
  return pow2_ceil(block_amax(x, n, 1e-4f) * (1.0f / 448.0f));
}
DS41_HD void fp8_pow2_roundtrip(float* x, int n) {
  float s = fp8_pow2_scale(x, n);
  for (int i = 0; i < n; ++i) {
    float q = e4m3_round(fminf(fmaxf(x[i] / s, -kE4m3Max), kE4m3Max));
    x[i] = bf16_round(q * s);
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
