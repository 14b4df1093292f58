// ds41/core/attention_math.hpp — one query head of sparse attention with an attention sink
// (shim C6): online softmax over blocks of 64 gathered rows, probabilities rounded to bf16 before
// the value sum, the sink in the denominator only, -1 indices skipped, bf16 output.
#pragma once
#include "macros.hpp"  // DS41_HOST_AVX2
#include <type_traits>
#include "numeric.hpp"
#include "reduce.hpp"
#include "simd_avx2.hpp"
#include "torch_math.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

constexpr int kAttnBlock = 64;

/// One block's softmax step, shared by every path (this file's per-head one and the host's
/// multi-head one, backend/host/attention.hpp). On entry s[t] (t < bn) holds score·scale where
/// idx[t] >= 0 (masked entries hold any initialised float: only the result is masked); on return
/// s[t] = bf16(exp(s[t] - new max)), masked 0, m is the new running max and den = den·alpha + Σ p
/// (torch's sum order over the block, before the bf16 rounding); returns alpha = exp(old max -
/// new max) for the value accumulator.
DS41_HD float attn_block_softmax(float* s, const int* idx, int bn, float& m, float& den) {
  float bmax = -INFINITY;
  for (int t = 0; t < bn; ++t)
    if (idx[t] >= 0) bmax = fmaxf(bmax, s[t]);
  const float new_m = fmaxf(m, bmax);
  const float alpha = exp_sleef_u10(m - new_m);
  int t0 = 0;
#if defined(DS41_HOST_AVX2)
  // 8 exps at once (exp_sleef_u10_8: the same bits), masked entries then set to 0
  for (; t0 + 8 <= bn; t0 += 8) {
    const __m256 e = avx2::exp_sleef_u10_8(_mm256_sub_ps(_mm256_loadu_ps(s + t0), _mm256_set1_ps(new_m)));
    const __m256i ix = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(idx + t0));
    _mm256_storeu_ps(s + t0, _mm256_and_ps(e, _mm256_castsi256_ps(_mm256_cmpgt_epi32(ix, _mm256_set1_epi32(-1)))));
  }
#endif
  for (int t = t0; t < bn; ++t) s[t] = idx[t] < 0 ? 0.0f : exp_sleef_u10(s[t] - new_m);
  den = den * alpha + torch_order_sum(bn, [&](long t) { return s[t]; });
  for (int t = 0; t < bn; ++t) s[t] = bf16_round(s[t]);  // the value sum takes bf16(p)
  m = new_m;
  return alpha;
}

/// After the last block, per element (the fast device kernels' merged states take these too): the
/// sink joins the denominator only, and an output is bf16(acc / den).
DS41_HD float attn_denominator(float den, float m, float sink) { return den + exp_sleef_u10(sink - m); }
DS41_HD float attn_output(float acc, float den_with_sink) { return bf16_round(acc / den_with_sink); }
/// After the last block: out[d] = attn_output(acc[d], attn_denominator(...)), in place.
DS41_HD void attn_finish(float* out, int D, float sink, float m, float den) {
  den = attn_denominator(den, m, sink);
  for (int d = 0; d < D; ++d) out[d] = attn_output(out[d], den);
}

/// q: [D]; kv: rows of D (K = V); idx: [n] row indices or -1; out: [D] (bf16 values).
/// Per block of 64: scores q·k (k order) times scale; new max; alpha = exp(max - new max);
/// den = den·alpha + Σ p (torch's sum order over the block, masked entries 0);
/// acc = acc·alpha + Σ bf16(p)·v (index order); exps on torch's vector path (torch.exp is VML).
DS41_HD void sparse_attn_head(const float* q, const float* kv, long kv_stride, const int* idx, int n,
                              int D, float sink, float scale, float* out) {
  // Each score and each output element keeps its own sum in the reference's order; on the host the
  // loops run 8 of those sums side by side (8 scores: transposed rows, simd_avx2.hpp; 8 output
  // elements: one vector), as one 512-long dependent chain at a time is latency-bound, and keep
  // several such vectors in flight (16 scores, 32 output elements): a vector of sums is still
  // one chain of dependent adds.
  constexpr int kScoreRows = 16;
  for (int d = 0; d < D; ++d) out[d] = 0.0f;  // the f32 accumulator
  float m = -1e30f, den = 0.0f;
  float p[kAttnBlock];
  for (int b0 = 0; b0 < n; b0 += kAttnBlock) {
    const int bn = n - b0 < kAttnBlock ? n - b0 : kAttnBlock;
    for (int t0 = 0; t0 < bn; t0 += kScoreRows) {
      const int tn = bn - t0 < kScoreRows ? bn - t0 : kScoreRows;
      float dot[kScoreRows];
#if defined(DS41_HOST_AVX2)
      const float* k[kScoreRows];
      for (int j = 0; j < kScoreRows; ++j) {
        const int r = j < tn ? idx[b0 + t0 + j] : -1;
        k[j] = r < 0 ? q : kv + static_cast<long>(r) * kv_stride;  // masked: any readable row, result unused
      }
      if (tn > 8) avx2::dot_rows_in_order<2>(q, k, D, dot);  // one group of 8 rows, or two
      else avx2::dot_rows_in_order<1>(q, k, D, dot);
#else
      for (int j = 0; j < tn; ++j) {
        const int r = idx[b0 + t0 + j];
        const float* k = kv + static_cast<long>(r < 0 ? 0 : r) * kv_stride;
        dot[j] = 0.0f;
        if (r >= 0)
          for (int d = 0; d < D; ++d) dot[j] += q[d] * k[d];
      }
#endif
      for (int j = 0; j < tn; ++j) p[t0 + j] = dot[j] * scale;  // masked: a dot that is never used
    }
    const float alpha = attn_block_softmax(p, idx + b0, bn, m, den);
    int d0 = 0;
#if defined(DS41_HOST_AVX2)
    // out[d0 .. d0 + 8V) = out·alpha + Σ_t bf16(p[t])·v[t], each element's sum over t in order,
    // V vectors (V add chains) at once
    const auto value_sum = [&]<int V>(std::integral_constant<int, V>, int d) {
      __m256 blk[V];
      for (int u = 0; u < V; ++u) blk[u] = _mm256_setzero_ps();
      for (int t = 0; t < bn; ++t) {
        const int r = idx[b0 + t];
        if (r < 0) continue;
        const __m256 pt = _mm256_set1_ps(p[t]);
        const float* v = kv + static_cast<long>(r) * kv_stride + d;
        for (int u = 0; u < V; ++u) blk[u] = _mm256_add_ps(blk[u], _mm256_mul_ps(pt, _mm256_loadu_ps(v + 8 * u)));
      }
      const __m256 a = _mm256_set1_ps(alpha);
      for (int u = 0; u < V; ++u)
        _mm256_storeu_ps(out + d + 8 * u, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(out + d + 8 * u), a), blk[u]));
    };
    for (; d0 + 32 <= D; d0 += 32) value_sum(std::integral_constant<int, 4>{}, d0);
    for (; d0 + 8 <= D; d0 += 8) value_sum(std::integral_constant<int, 1>{}, d0);
#endif
    for (; d0 < D; ++d0) {
      float blk = 0.0f;
      for (int t = 0; t < bn; ++t) {
        const int r = idx[b0 + t];
        if (r >= 0) blk += p[t] * kv[static_cast<long>(r) * kv_stride + d0];
      }
      out[d0] = out[d0] * alpha + blk;
    }
  }
  attn_finish(out, D, sink, m, den);
}

}  // namespace ds41
#include "fp_exact_end.hpp"
