// ds41/core/torch_math.hpp — exp as the reference's runtime evaluates it, element by element.
//
// The goldens come from torch 1.13 on an AVX2 CPU. Its elementwise kernels run a contiguous
// tensor of n elements through the vector path two 8-lane vectors at a time — Sleef's expf_u10
// (FMA polynomial) — and the last n mod 16 elements through the scalar path (glibc's expf). The
// two differ in the last bit now and then, and the hc Sinkhorn, the engram gate and the SwiGLU pass those bits on into bf16
// roundings. Which path an element took therefore depends on its flat position in the tensor the
// reference computed it in: callers pass (index, count) of that tensor.
#pragma once
#include <cstdint>
#include <cstring>
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

constexpr long kTorchVecElems = 16;  // two AVX2 float vectors per loop iteration

DS41_HD bool torch_vector_path(long i, long n) { return i < n / kTorchVecElems * kTorchVecElems; }

DS41_HD float pow2i(int q) { return bits_f32(static_cast<uint32_t>(q + 0x7f) << 23); }

/// Sleef's expf (u10) constants, shared by exp_sleef_u10 and its 8-lane form (simd_avx2.hpp).
namespace sleef_expf {
constexpr float kLog2e = 1.442695040888963407359924681001892137426645954152985934135449406931f;
constexpr float kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187045e-06f;
// the polynomial, highest degree first (scalars: device code may read those directly)
constexpr float kC0 = 0.000198527617612853646278381f, kC1 = 0.00139304355252534151077271f,
                kC2 = 0.00833336077630519866943359f, kC3 = 0.0416664853692054748535156f,
                kC4 = 0.166666671633720397949219f, kC5 = 0.5f;
constexpr float kZeroBelow = -104.0f, kInfAbove = 100.0f;
}  // namespace sleef_expf

/// Sleef's expf (u10, AVX2 with FMA): Cody-Waite reduction by ln 2, degree-6 polynomial, scaling
/// by 2^q in two halves.
DS41_HD float exp_sleef_u10(float d) {
  using namespace sleef_expf;
  // Sleef masks these lanes after the fact; a scalar int conversion of them would overflow (UB)
  if (is_nan(d)) return d;
  if (d < kZeroBelow) return 0.0f;
  if (d > kInfAbove) return INFINITY;
  const int q = static_cast<int>(rintf(d * kLog2e));
  float s = fmaf(static_cast<float>(q), -kLn2Hi, d);
  s = fmaf(static_cast<float>(q), -kLn2Lo, s);
  float u = kC0;
  u = fmaf(u, s, kC1);
  u = fmaf(u, s, kC2);
  u = fmaf(u, s, kC3);
  u = fmaf(u, s, kC4);
  u = fmaf(u, s, kC5);
  u = 1.0f + fmaf(s * s, u, s);
  u = u * pow2i(q >> 1) * pow2i(q - (q >> 1));
  return u;
}

DS41_HD uint64_t f64_bits(double d) {
#if DS41_DEVICE_CODE
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  uint64_t b;
  std::memcpy(&b, &d, sizeof b);
  return b;
#endif
}
DS41_HD double bits_f64(uint64_t b) {
#if DS41_DEVICE_CODE
  return __longlong_as_double(static_cast<long long>(b));
#else
  double d;
  std::memcpy(&d, &b, sizeof d);
  return d;
#endif
}

/// glibc's expf (the reference's scalar path), evaluated the same way on host and device: k/32 +
/// r split in double, 2^(k/32) from a 32-entry table, a cubic in r. It is NOT always the correctly
/// rounded value (e.g. expf(0x1.da5488p-12) = 0x1.001da8p+0 where exact rounding gives ...a6p+0),
/// which is why it is reproduced rather than computed through double exp. Matches glibc 2.36 on
/// every one of ~1.4e9 sampled inputs in (-87, 87).
DS41_HD float exp_scalar(float x) {
  constexpr uint64_t kTab[32] = {
      0x3ff0000000000000ull, 0x3fefd9b0d3158574ull, 0x3fefb5586cf9890full, 0x3fef9301d0125b51ull,
      0x3fef72b83c7d517bull, 0x3fef54873168b9aaull, 0x3fef387a6e756238ull, 0x3fef1e9df51fdee1ull,
      0x3fef06fe0a31b715ull, 0x3feef1a7373aa9cbull, 0x3feedea64c123422ull, 0x3feece086061892dull,
      0x3feebfdad5362a27ull, 0x3feeb42b569d4f82ull, 0x3feeab07dd485429ull, 0x3feea47eb03a5585ull,
      0x3feea09e667f3bcdull, 0x3fee9f75e8ec5f74ull, 0x3feea11473eb0187ull, 0x3feea589994cce13ull,
      0x3feeace5422aa0dbull, 0x3feeb737b0cdc5e5ull, 0x3feec49182a3f090ull, 0x3feed503b23e255dull,
      0x3feee89f995ad3adull, 0x3feeff76f2fb5e47ull, 0x3fef199bdd85529cull, 0x3fef3720dcef9069ull,
      0x3fef5818dcfba487ull, 0x3fef7c97337b9b5full, 0x3fefa4afa2a490daull, 0x3fefd0765b6e4540ull};
  if (is_nan(x)) return x + x;
  if (x > 0x1.62e42ep6f) return INFINITY;    // > log(2^128)
  if (x < -0x1.9fe368p6f) return 0.0f;       // < log(2^-150), -inf included
  const double N = 32.0, inv_ln2_n = 0x1.71547652b82fep+0 * N, shift = 0x1.8p+52;
  const double c0 = 0x1.c6af84b912394p-5 / N / N / N, c1 = 0x1.ebfce50fac4f3p-3 / N / N,
               c2 = 0x1.62e42ff0c52d6p-1 / N;
  const double xd = static_cast<double>(x);
  const double z = inv_ln2_n * xd;
  double kd = z + shift;  // round to an integer in the low bits
  const uint64_t ki = f64_bits(kd);
  kd -= shift;
  const double r = z - kd;
  uint64_t t = kTab[ki % 32];
  t += ki << (52 - 5);
  const double s = bits_f64(t);
  const double p = c0 * r + c1, r2 = r * r;
  double y = c2 * r + 1.0;
  y = p * r2 + y;
  return static_cast<float>(y * s);
}

/// glibc's log1pf (the reference's scalar path: softplus's tail), evaluated the same way on host
/// and device. glibc 2.36 uses the fdlibm algorithm in plain float arithmetic (no FMA, no double):
/// 1 + x = 2^k (1 + f) with f in [sqrt(2)/2 - 1, sqrt(2) - 1), a correction c for the rounding of
/// 1 + x, then log(1 + f) = f - (f²/2 - s (f²/2 + R(s²))) with s = f / (2 + f) and R a degree-7
/// polynomial in s²; |x| small enough takes f = x directly. Every operation below is a single IEEE
/// float operation in glibc's order, so --fmad=false / -ffp-contract=off give glibc's bits (every
/// one of the 2^32 inputs matches glibc 2.36 on x86_64, NaN payloads included on the host).
DS41_HD float log1p_scalar(float x) {
  const float ln2_hi = 0x1.62e3p-1f, ln2_lo = 0x1.2fefa2p-17f;  // ln2_hi has 8 trailing zero bits
  const float p1 = 0x1.555556p-1f, p2 = 0x1.99999ap-2f, p3 = 0x1.24924ap-2f, p4 = 0x1.c71c52p-3f,
              p5 = 0x1.74664ap-3f, p6 = 0x1.39a09ep-3f, p7 = 0x1.2f112ep-3f;
  const int32_t hx = static_cast<int32_t>(f32_bits(x));
  const int32_t ax = hx & 0x7fffffff;
  int k = 1;      // 0: log1p(f) with f = x, no reduction
  int32_t m = 0;  // mantissa bits of the reduced 1 + x (0 marks the short f < 2^-20 branch)
  float f = 0.0f, c = 0.0f;
  if (hx < 0x3ed413d7) {  // x < 0.41421 (negative x and -NaN included)
    if (ax >= 0x3f800000) {                  // x <= -1, or -NaN
      if (x == -1.0f) return -INFINITY;
      return (x - x) / (x - x);              // NaN (glibc's expression, so the host's bits match)
    }
    if (ax < 0x31000000) {                   // |x| < 2^-29
      if (ax < 0x24800000) return x;         // |x| < 2^-54
      return x - x * x * 0.5f;
    }
    if (hx > 0 || hx <= static_cast<int32_t>(0xbe95f61fu)) {  // -0.29289 <= x < 0.41421
      k = 0;
      f = x;
      m = 1;
    }
  }
  if (hx >= 0x7f800000) return x + x;  // +inf, +NaN
  if (k != 0) {
    float u;
    if (hx < 0x5a000000) {  // x < 2^53: 1 + x rounds; c carries what the rounding lost, over u
      u = 1.0f + x;
      m = static_cast<int32_t>(f32_bits(u));
      k = (m >> 23) - 127;
      c = k > 0 ? 1.0f - (u - x) : x - (u - 1.0f);
      c = c / u;
    } else {  // 1 + x is x
      u = x;
      m = static_cast<int32_t>(f32_bits(u));
      k = (m >> 23) - 127;
      c = 0.0f;
    }
    m &= 0x007fffff;
    if (m < 0x3504f7) {  // mantissa below sqrt(2): u -> [1, sqrt 2)
      u = bits_f32(static_cast<uint32_t>(m | 0x3f800000));
    } else {  // u -> [sqrt(2)/2, 1), one more power of two
      k += 1;
      u = bits_f32(static_cast<uint32_t>(m | 0x3f000000));
      m = (0x00800000 - m) >> 2;
    }
    f = u - 1.0f;
  }
  const float kf = static_cast<float>(k);
  const float hfsq = 0.5f * f * f;
  if (m == 0) {  // |f| < 2^-20
    if (f == 0.0f) {
      if (k == 0) return 0.0f;
      c += kf * ln2_lo;
      return kf * ln2_hi + c;
    }
    const float r = hfsq * (1.0f - 0x1.555556p-1f * f);
    if (k == 0) return f - r;
    return kf * ln2_hi - ((r - (kf * ln2_lo + c)) - f);
  }
  const float s = f / (2.0f + f);
  const float z = s * s;
  const float r = z * (p1 + z * (p2 + z * (p3 + z * (p4 + z * (p5 + z * (p6 + z * p7))))));
  if (k == 0) return f - (hfsq - s * (hfsq + r));
  return kf * ln2_hi - ((hfsq - (s * (hfsq + r) + (kf * ln2_lo + c))) - f);
}

/// Sleef's log1pf (u10, AVX2 with FMA): exponent split at 0.75, (m / (2 + m)) in double-float,
/// odd polynomial, ln2·e in double-float. Used where torch's vector path took log1p (softplus).
DS41_HD float log1p_sleef_u10(float d) {
  // double-float helpers (hi, lo)
  struct F2 {
    float x, y;
  };
  auto df_add_ff = [](float a, float b) {
    float s = a + b;
    return F2{s, a - s + b};
  };
  auto df_add_22 = [](F2 a, F2 b) {
    float s = a.x + b.x;
    return F2{s, a.x - s + b.x + a.y + b.y};
  };
  auto df_add_2f = [](F2 a, float b) {
    float s = a.x + b;
    return F2{s, a.x - s + b + a.y};
  };
  auto df_mul_2f = [](F2 a, float b) {
    float s = a.x * b;
    return F2{s, fmaf(a.y, b, fmaf(a.x, b, -s))};
  };
  auto df_div = [](F2 n, F2 dd) {
    float t = 1.0f / dd.x;
    float s = n.x * t;
    float u = fmaf(t, n.x, -s);
    float v = -fmaf(dd.y, t, -(-fmaf(dd.x, t, -1.0f)));  // vfmanp: -(x*y - z)
    return F2{s, fmaf(s, v, fmaf(n.y, t, u))};
  };
  float dp1 = d + 1.0f;
  const bool tiny = dp1 < 1.17549435e-38f;
  if (tiny) dp1 = dp1 * (4294967296.0f * 4294967296.0f);
  int e = static_cast<int>((f32_bits(dp1 * (1.0f / 0.75f)) >> 23) & 0xff) - 0x7f;
  float t = bits_f32(static_cast<uint32_t>(0x7f - e) << 23);
  float m = fmaf(d, t, t - 1.0f);
  if (tiny) e -= 64;
  F2 s = df_mul_2f(F2{0.69314718246459960938f, -1.904654323148236017e-09f}, static_cast<float>(e));
  F2 x = df_div(F2{m, 0.0f}, df_add_ff(2.0f, m));
  float x2 = x.x * x.x;
  float p = 0.3027294874e+0f;
  p = fmaf(p, x2, 0.3996108174e+0f);
  p = fmaf(p, x2, 0.6666694880e+0f);
  s = df_add_22(s, F2{x.x * 2.0f, x.y * 2.0f});
  s = df_add_2f(s, x2 * x.x * p);
  float r = s.x + s.y;
  if (d > 1e+38f) r = INFINITY;
  if (d < -1.0f || is_nan(d)) r = NAN;
  if (d == -1.0f) r = -INFINITY;
  if (d == 0.0f && (f32_bits(d) >> 31)) r = -0.0f;
  return r;
}

/// exp of element i of an n-element contiguous tensor, on the path torch took for it.
DS41_HD float torch_exp(float x, long i, long n) { return torch_vector_path(i, n) ? exp_sleef_u10(x) : exp_scalar(x); }
/// torch.sigmoid: 1 / (1 + exp(-x)).
DS41_HD float torch_sigmoid(float x, long i, long n) { return 1.0f / (1.0f + torch_exp(-x, i, n)); }
/// torch.clamp(x, lo, hi) / torch.clamp(x, max=hi) on float32: a NaN stays NaN (both torch's
/// scalar std::min/std::max and its vector min/max pass it through); libm's fminf/fmaxf would
/// return the bound instead, finite output where the reference has NaN.
DS41_HD float torch_clamp(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }
DS41_HD float torch_clamp_max(float x, float hi) { return x > hi ? hi : x; }
/// F.silu: x / (1 + exp(-x)).
DS41_HD float torch_silu(float x, long i, long n) { return x / (1.0f + torch_exp(-x, i, n)); }

}  // namespace ds41
#include "fp_exact_end.hpp"
