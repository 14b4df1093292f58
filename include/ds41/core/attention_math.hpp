// ds41/core/attention_math.hpp — one query head of sparse attention with an attention sink
// (shim C6): online softmax over blocks of 64 gathered rows, probabilities rounded to bf16 before
// the value sum, the sink in the denominator only, -1 indices skipped, bf16 output.
#pragma once
#include "numeric.hpp"
#include "reduce.hpp"
#include "torch_math.hpp"

namespace ds41 {

constexpr int kAttnBlock = 64;

/// q: [D]; kv: rows of D (K = V); idx: [n] row indices or -1; out: [D] (bf16 values).
/// Per block of 64: scores q·k (k order) times scale; new max; alpha = exp(max - new max);
/// den = den·alpha + Σ p (torch's sum order over the block, masked entries 0);
/// acc = acc·alpha + Σ bf16(p)·v (index order); exps on torch's vector path (torch.exp is VML).
DS41_HD void sparse_attn_head(const float* q, const float* kv, long kv_stride, const int* idx, int n,
                              int D, float sink, float scale, float* out) {
  for (int d = 0; d < D; ++d) out[d] = 0.0f;  // the f32 accumulator
  float m = -1e30f, den = 0.0f;
  float p[kAttnBlock];
  for (int b0 = 0; b0 < n; b0 += kAttnBlock) {
    const int bn = n - b0 < kAttnBlock ? n - b0 : kAttnBlock;
    float bmax = -INFINITY;
    for (int t = 0; t < bn; ++t) {
      const int r = idx[b0 + t];
      if (r < 0) {
        p[t] = -INFINITY;
        continue;
      }
      const float* k = kv + static_cast<long>(r) * kv_stride;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += q[d] * k[d];
      p[t] = dot * scale;
      bmax = fmaxf(bmax, p[t]);
    }
    const float new_m = fmaxf(m, bmax);
    const float alpha = exp_sleef_u10(m - new_m);
    for (int t = 0; t < bn; ++t) p[t] = idx[b0 + t] < 0 ? 0.0f : exp_sleef_u10(p[t] - new_m);
    den = den * alpha + torch_order_sum(bn, [&](long t) { return p[t]; });
    for (int d = 0; d < D; ++d) {
      float blk = 0.0f;
      for (int t = 0; t < bn; ++t) {
        const int r = idx[b0 + t];
        if (r >= 0) blk += bf16_round(p[t]) * kv[static_cast<long>(r) * kv_stride + d];
      }
      out[d] = out[d] * alpha + blk;
    }
    m = new_m;
  }
  den = den + exp_sleef_u10(sink - m);
  for (int d = 0; d < D; ++d) out[d] = bf16_round(out[d] / den);
}

}  // namespace ds41
