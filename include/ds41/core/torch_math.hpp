// ds41/core/torch_math.hpp — exp as the reference's runtime evaluates it, element by element.
//
// The goldens come from torch 1.13 on an AVX2 CPU. Its elementwise kernels run a contiguous
// tensor of n elements through the vector path two 8-lane vectors at a time — Sleef's expf_u10
// (FMA polynomial) — and the last n mod 16 elements through the scalar path (libm's expf, which
// is correctly rounded in all but vanishingly rare cases). The two differ in the last bit now and
// then, and the hc Sinkhorn, the engram gate and the SwiGLU pass those bits on into bf16
// roundings. Which path an element took therefore depends on its flat position in the tensor the
// reference computed it in: callers pass (index, count) of that tensor.
#pragma once
#include <cstdint>
#include "numeric.hpp"

namespace ds41 {

constexpr long kTorchVecElems = 16;  // two AVX2 float vectors per loop iteration

DS41_HD bool torch_vector_path(long i, long n) { return i < n / kTorchVecElems * kTorchVecElems; }

DS41_HD float pow2i(int q) { return bits_f32(static_cast<uint32_t>(q + 0x7f) << 23); }

/// Sleef's expf (u10, AVX2 with FMA): Cody-Waite reduction by ln 2, degree-6 polynomial, scaling
/// by 2^q in two halves.
DS41_HD float exp_sleef_u10(float d) {
  const int q = static_cast<int>(rintf(d * 1.442695040888963407359924681001892137426645954152985934135449406931f));
  float s = fmaf(static_cast<float>(q), -0.693145751953125f, d);
  s = fmaf(static_cast<float>(q), -1.428606765330187045e-06f, s);
  float u = 0.000198527617612853646278381f;
  u = fmaf(u, s, 0.00139304355252534151077271f);
  u = fmaf(u, s, 0.00833336077630519866943359f);
  u = fmaf(u, s, 0.0416664853692054748535156f);
  u = fmaf(u, s, 0.166666671633720397949219f);
  u = fmaf(u, s, 0.5f);
  u = 1.0f + fmaf(s * s, u, s);
  u = u * pow2i(q >> 1) * pow2i(q - (q >> 1));
  if (d < -104.0f) u = 0.0f;
  if (d > 100.0f) u = INFINITY;
  if (is_nan(d)) u = d;
  return u;
}

/// libm's expf: the correctly rounded value, through double.
DS41_HD float exp_scalar(float d) { return static_cast<float>(exp(static_cast<double>(d))); }

/// exp of element i of an n-element contiguous tensor, on the path torch took for it.
DS41_HD float torch_exp(float x, long i, long n) { return torch_vector_path(i, n) ? exp_sleef_u10(x) : exp_scalar(x); }
/// torch.sigmoid: 1 / (1 + exp(-x)).
DS41_HD float torch_sigmoid(float x, long i, long n) { return 1.0f / (1.0f + torch_exp(-x, i, n)); }
/// F.silu: x / (1 + exp(-x)).
DS41_HD float torch_silu(float x, long i, long n) { return x / (1.0f + torch_exp(-x, i, n)); }

}  // namespace ds41
