// ds41/core/attention_math.hpp — one query head of sparse attention with an attention sink
// (shim C6): online softmax over blocks of 64 gathered rows, probabilities rounded to bf16 before
// the value sum, the sink in the denominator only, -1 indices skipped, bf16 output.
#pragma once
#include "numeric.hpp"
#include "torch_math.hpp"

namespace ds41 {

constexpr int kAttnBlock = 64;

/// q: [D]; kv: rows of D (K = V); idx: [n] row indices or -1; out: [D] (bf16 values).
DS41_HD void sparse_attn_head(const float* q, const float* kv, long kv_stride, const int* idx, int n,
                              int D, float sink, float scale, float* out) {
  for (int d = 0; d < D; ++d) out[d] = 0.0f;  // used as the f32 accumulator
  float m = -1e30f, sum = 0.0f;
  float s[kAttnBlock];
  for (int b0 = 0; b0 < n; b0 += kAttnBlock) {
    int bn = n - b0 < kAttnBlock ? n - b0 : kAttnBlock;
    float bmax = -INFINITY;
    for (int t = 0; t < bn; ++t) {
      int r = idx[b0 + t];
      if (r < 0) {
        s[t] = -INFINITY;
        continue;
      }
      const float* k = kv + static_cast<long>(r) * kv_stride;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += q[d] * k[d];
      s[t] = dot * scale;
      bmax = fmaxf(bmax, s[t]);
    }
    float new_m = fmaxf(m, bmax);
    float rescale = exp_scalar(m - new_m);
    sum *= rescale;
    for (int d = 0; d < D; ++d) out[d] *= rescale;
    for (int t = 0; t < bn; ++t) {
      int r = idx[b0 + t];
      if (r < 0) continue;
      float p = exp_scalar(s[t] - new_m);
      sum += p;
      float pb = bf16_round(p);
      const float* v = kv + static_cast<long>(r) * kv_stride;
      for (int d = 0; d < D; ++d) out[d] += pb * v[d];
    }
    m = new_m;
  }
  sum += exp_scalar(sink - m);
  for (int d = 0; d < D; ++d) out[d] = bf16_round(out[d] / sum);
}

}  // namespace ds41
