// ds41/core/activation.hpp — elementwise functions and the RMSNorm of a row, as the reference
// computes them in float32 (torch CPU semantics: sigmoid = 1/(1+e^-x), silu = x/(1+e^-x),
// softplus with threshold 20).
#pragma once
#include "macros.hpp"  // DS41_HOST_AVX2
#include "numeric.hpp"
#include "reduce.hpp"
#include "simd_avx2.hpp"
#include "torch_math.hpp"

#include "fp_exact_begin.hpp"
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

/// One element of an expert's gate, as the reference's Expert.forward: bf16(w·(silu(g)·u)) with
/// g clamped above and u to [-lim, lim] where lim > 0 (torch.clamp: a NaN stays NaN), w the row's
/// routing weight (null: none), silu's exp on torch's path for element pos of an npos-element
/// tensor.
DS41_HD float swiglu_entry(float g, float u, float lim, const float* w, long pos, long npos) {
  if (lim > 0.0f) {
    u = torch_clamp(u, -lim, lim);
    g = torch_clamp_max(g, lim);
  }
  float h = torch_silu(g, pos, npos) * u;
  if (w) h = *w * h;
  return bf16_round(h);
}

/// swiglu_entry over one row's columns [c0, c1) in place (g[c] <- the gate; column c is element
/// pos0 + c). Why: the experts of a batched decode step gate ~50 rows of 2304 a layer, and one
/// element at a time (the exp's polynomial in scalar FMAs) that was ~1.4% of a batch-8 step. On
/// the host, 8 columns at a time wherever all 8 take torch's vector exp: the same operations in
/// the same order (avx2::exp_sleef_u10_8, bf16_round8), so the same bits; the rest one by one.
DS41_HD void swiglu_run(float* g, const float* u, long c0, long c1, float lim, const float* w, long pos0, long npos) {
  long c = c0;
#if defined(DS41_HOST_AVX2)
  const long vector_end = npos / kTorchVecElems * kTorchVecElems - pos0;  // columns on the vector exp
  const __m256 sign = _mm256_set1_ps(-0.0f), hi = _mm256_set1_ps(lim), lo = _mm256_set1_ps(-lim);
  for (; c + 8 <= c1 && c + 8 <= vector_end; c += 8) {
    __m256 gv = _mm256_loadu_ps(g + c), uv = _mm256_loadu_ps(u + c);
    if (lim > 0.0f) {  // torch_clamp / torch_clamp_max: compares, so that a NaN stays NaN
      const __m256 u_max = _mm256_blendv_ps(uv, hi, _mm256_cmp_ps(uv, hi, _CMP_GT_OQ));
      uv = _mm256_blendv_ps(u_max, lo, _mm256_cmp_ps(uv, lo, _CMP_LT_OQ));
      gv = _mm256_blendv_ps(gv, hi, _mm256_cmp_ps(gv, hi, _CMP_GT_OQ));
    }
    const __m256 e = avx2::exp_sleef_u10_8(_mm256_xor_ps(gv, sign));
    __m256 h = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), uv);
    if (w) h = _mm256_mul_ps(_mm256_set1_ps(*w), h);
    _mm256_storeu_ps(g + c, avx2::bf16_round8(h));
  }
#endif
  for (; c < c1; ++c) g[c] = swiglu_entry(g[c], u[c], lim, w, pos0 + c, npos);
}

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
#include "fp_exact_end.hpp"
