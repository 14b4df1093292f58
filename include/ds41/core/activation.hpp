// ds41/core/activation.hpp — elementwise functions and the RMSNorm of a row, as the reference
// computes them in float32 (torch CPU semantics: sigmoid = 1/(1+e^-x), silu = x/(1+e^-x),
// softplus with threshold 20).
#pragma once
#include "numeric.hpp"
#include "reduce.hpp"
#include "torch_math.hpp"

namespace ds41 {

// exp and log1p are our ports of glibc's (exp_scalar, log1p_scalar) so that host and device round
// identically (see torch_math.hpp)
// sigmoid / silu: torch_sigmoid / torch_silu in torch_math.hpp (the exp path depends on position)
/// torch.nn.functional.softplus(beta=1, threshold=20): z itself above the threshold. The
/// reference's scalar path is libm's log1pf(expf(z)): glibc's algorithms, ported, on both sides.
DS41_HD float softplus(float z) { return z > 20.0f ? z : log1p_scalar(exp_scalar(z)); }
/// softplus of element i of an n-element tensor on torch's path: the vector path is Sleef's exp
/// then Sleef's log1p.
DS41_HD float torch_softplus(float z, long i, long n) {
  if (z > 20.0f) return z;
  return torch_vector_path(i, n) ? log1p_sleef_u10(exp_sleef_u10(z)) : softplus(z);
}
DS41_HD float rsqrt_ref(float v) { return 1.0f / sqrtf(v); }

/// Sum of squares of a row in float32 (each square rounded, then torch's summation order).
DS41_HD float sum_squares(const float* x, int n) {
  return torch_order_sum(n, [x](long i) { return x[i] * x[i]; });
}

/// RMSNorm as the reference's RMSNorm.forward: y = bf16(w · (x · rsqrt(mean(x²) + eps))).
/// `x` and `y` may alias.
DS41_HD void rmsnorm_row(const float* x, const float* w, float* y, int n, float eps) {
  float r = rsqrt_ref(sum_squares(x, n) / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) y[i] = bf16_round(w[i] * (x[i] * r));
}

}  // namespace ds41
