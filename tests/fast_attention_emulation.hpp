// tests/fast_attention_emulation.hpp — the fast attention and index-score kernels
// (backend/cuda/fast_attention.hpp) replayed on the host from their plans and their DS41_HD
// arithmetic (fast_attention_plan.hpp), in the kernels' order: blocks, tiles, lanes' shares,
// warp butterflies, splits merged left to right. And the tolerances against the exact operations,
// with the reasons. Used by test_fast_attention_plan (host) and test_golden_cuda (device).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>
#include "ds41/backend/cuda/fast_attention_plan.hpp"
#include "ds41/core/attention_math.hpp"
#include "ds41/core/compress_math.hpp"

namespace ds41::testing {

/// The device's __shfl_xor butterfly (xor 16, 8, 4, 2, 1; each lane adds the other's value to
/// its own): the sum every lane ends with.
inline float butterfly_sum(float v[32]) {
  for (int o = 16; o > 0; o >>= 1) {
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = v[l] + v[l ^ o];
    std::copy(w, w + 32, v);
  }
  return v[0];
}

/// fast_sparse_attention as the kernels compute it, for the given plan (plan.tiled).
inline void emulate_fast_sparse_attention(const float* q, const float* kv, int D, const int32_t* idx, int ncols, long T,
                                          int H, const float* sink, float scale, const fast_attn::SparseAttnPlan& p,
                                          float* out) {
  using namespace fast_attn;
  const int D4 = padded_dim(D), TK = p.tile_keys;
  const auto padded = [&](const float* src) {
    std::vector<float> r(D4, 0.0f);
    std::copy(src, src + D, r.begin());
    return r;
  };
  std::vector<float> part_acc(static_cast<size_t>(T) * H * p.splits * D), part_state(static_cast<size_t>(T) * H * p.splits * 2);
  for (long b = 0; b < p.blocks; ++b) {
    const long t = p.row_of(b);
    const int g = p.group_of(b), split = p.split_of(b), h0 = p.first_head(g), hb = p.heads_in(g, H);
    std::vector<std::vector<float>> qs(hb), acc(hb, std::vector<float>(D4, 0.0f));
    for (int h = 0; h < hb; ++h) qs[h] = padded(q + (t * H + h0 + h) * D);
    std::vector<SoftmaxState> st(hb);
    for (int tile = p.first_tile(split); tile < p.end_tile(split); ++tile) {
      const int key0 = tile * TK, bn = std::min(TK, ncols - key0);
      std::vector<std::vector<float>> rows;
      for (int j = 0; j < bn; ++j)
        if (idx[t * ncols + key0 + j] >= 0) rows.push_back(padded(kv + static_cast<long>(idx[t * ncols + key0 + j]) * D));
      const int nu = static_cast<int>(rows.size());
      if (nu == 0) continue;
      for (int h = 0; h < hb; ++h) {
        std::vector<float> s(nu);
        for (int u = 0; u < nu; ++u) {
          float share[32];
          for (int l = 0; l < 32; ++l) share[l] = lane_score_share(qs[h].data(), rows[u].data(), D4, l);
          s[u] = butterfly_sum(share) * scale;
        }
        float tile_max = -INFINITY;
        for (int u = 0; u < nu; ++u) tile_max = std::fmax(tile_max, s[u]);
        const float alpha = softmax_advance(st[h], tile_max);
        float lanes[32];
        std::vector<float> pb(nu);
        for (int l = 0; l < 32; ++l) {
          const float p0 = l < nu ? softmax_prob(s[l], st[h]) : 0.0f;
          const float p1 = l + 32 < nu ? softmax_prob(s[l + 32], st[h]) : 0.0f;
          lanes[l] = p0 + p1;
          if (l < nu) pb[l] = bf16_round(p0);
          if (l + 32 < nu) pb[l + 32] = bf16_round(p1);
        }
        softmax_accumulate(st[h], alpha, butterfly_sum(lanes));
        for (int d = 0; d < D4; ++d) {
          float a = acc[h][d] * alpha;
          for (int u = 0; u < nu; ++u) a = value_step(a, pb[u], rows[u][d]);
          acc[h][d] = a;
        }
      }
    }
    for (int h = 0; h < hb; ++h) {
      const long e = t * H + h0 + h;
      if (p.splits == 1) {
        const float den = denominator_with_sink(st[h], sink[h0 + h]);
        for (int d = 0; d < D; ++d) out[e * D + d] = attn_output(acc[h][d], den);
      } else {
        const long ps = e * p.splits + split;
        std::copy(acc[h].begin(), acc[h].begin() + D, part_acc.begin() + ps * D);
        part_state[2 * ps] = st[h].m;
        part_state[2 * ps + 1] = st[h].den;
      }
    }
  }
  if (p.splits == 1) return;
  for (long e = 0; e < T * H; ++e) {  // the combine kernel
    std::vector<float> fa(p.splits), fb(p.splits);
    SoftmaxState r;
    for (int s = 0; s < p.splits; ++s)
      r = softmax_merge(r, SoftmaxState{part_state[2 * (e * p.splits + s)], part_state[2 * (e * p.splits + s) + 1]}, fa[s], fb[s]);
    const float den = denominator_with_sink(r, sink[e % H]);
    for (int d = 0; d < D; ++d) {
      float v = 0.0f;
      for (int s = 0; s < p.splits; ++s) v = merge_sums(v, fa[s], part_acc[(e * p.splits + s) * D + d], fb[s]);
      out[e * D + d] = attn_output(v, den);
    }
  }
}

/// fast_index_scores as the kernel computes it (plan.tiled; the untiled plan is index_score_entry).
inline void emulate_fast_index_scores(const float* q, const float* w, const float* keys, long T, int H, int Di, long nk,
                                      float* out) {
  using namespace fast_attn;
  const int Di4 = padded_dim(Di);
  std::vector<float> kp(static_cast<size_t>(nk) * Di4, 0.0f), qp(static_cast<size_t>(T) * H * Di4, 0.0f);
  for (long j = 0; j < nk; ++j) std::copy(keys + j * Di, keys + (j + 1) * Di, kp.begin() + j * Di4);
  for (long i = 0; i < T * H; ++i) std::copy(q + i * Di, q + (i + 1) * Di, qp.begin() + i * Di4);
  for (long t = 0; t < T; ++t)
    for (long j = 0; j < nk; ++j) {
      float total = 0.0f;
      for (int h = 0; h < H; ++h)
        total += index_head_term(bf16_round(index_dot(qp.data() + (t * H + h) * Di4, kp.data() + j * Di4, Di4)), w[t * H + h]);
      out[t * nk + j] = bf16_round(total);
    }
}

/// One bf16 ulp at |x| (the spacing of bf16 values there; the smallest normal's below it).
inline double bf16_ulp(double x) {
  x = std::fabs(x);
  if (!(x >= 1.17549435e-38)) x = 1.17549435e-38;
  return std::ldexp(1.0, std::ilogb(x) - 7);
}

/// How far fast sparse attention may be from the exact one, per output element d of a (row,
/// head): both are Σ_j bf16(p_j)·v_j / den with float32 sums. Each bf16(p_j) is within 2^-8
/// (relative) of the true p_j, whichever scale it was rounded from (the fast one's split-local
/// maximum, the exact one's running maximum), so the two value sums differ by at most
/// 2^-7 · Σ_j w_j·|v_j[d]| (w_j the true softmax weights with the sink in the denominator); the
/// float32 order differences (~ncols · 2^-24 of the same sum) are far below that and the
/// denominators' differences are float32-sized. Then each side rounds to bf16 once: one bf16 ulp
/// of the larger magnitude. Twice the 2^-7 term absorbs the float32 parts.
inline void sparse_attention_tolerance(const float* q, const float* kv, int D, const int32_t* idx, int ncols, int h,
                                       int H, long t, const float* sink, float scale, double* weighted_abs) {
  const float* qh = q + (t * H + h) * D;
  std::vector<double> s;
  std::vector<int> rows;
  double mx = -INFINITY;
  for (int j = 0; j < ncols; ++j) {
    const int r = idx[t * ncols + j];
    if (r < 0) continue;
    double dot = 0.0;
    for (int d = 0; d < D; ++d) dot += static_cast<double>(qh[d]) * kv[static_cast<long>(r) * D + d];
    s.push_back(dot * scale);
    rows.push_back(r);
    mx = std::max(mx, dot * scale);
  }
  double den = 0.0;
  for (double v : s) den += std::exp(v - mx);
  if (!s.empty()) den += std::exp(static_cast<double>(sink[h]) - mx);
  for (int d = 0; d < D; ++d) {
    double a = 0.0;
    for (size_t u = 0; u < s.size(); ++u) a += std::exp(s[u] - mx) / den * std::fabs(kv[static_cast<long>(rows[u]) * D + d]);
    weighted_abs[d] = a;
  }
}
inline bool within_attention_tolerance(float fast, float exact, double weighted_abs) {
  if (std::isnan(fast) || std::isnan(exact)) return std::isnan(fast) && std::isnan(exact);
  const double bound = 2.0 * std::ldexp(weighted_abs, -7) + bf16_ulp(std::max(std::fabs(fast), std::fabs(exact)));
  return std::fabs(static_cast<double>(fast) - exact) <= bound;
}

/// How far a fast index score may be from the exact one: the dot products differ only by fused
/// rounding (float32-sized), which can move bf16(dot) by one bf16 ulp (2^-7 relative) when it
/// sits at a rounding boundary, and the weighted term's own bf16 rounding can then move by one
/// more: per head at most 2^-6 · |dot_h·w_h|. The head sums run in the same order, then each side
/// rounds once: one bf16 ulp of the larger. Bound: 2^-6 · Σ_h |dot_h·w_h| + that ulp.
inline bool within_index_tolerance(float fast, float exact, const float* q, const float* w, const float* k, int H,
                                   int Di) {
  if (std::isnan(fast) || std::isnan(exact)) return std::isnan(fast) && std::isnan(exact);
  double sum = 0.0;
  for (int h = 0; h < H; ++h) {
    double dot = 0.0;
    for (int d = 0; d < Di; ++d) dot += static_cast<double>(q[h * Di + d]) * k[d];
    sum += std::fabs(dot * w[h]);
  }
  const double bound = std::ldexp(sum, -6) + bf16_ulp(std::max(std::fabs(fast), std::fabs(exact)));
  return std::fabs(static_cast<double>(fast) - exact) <= bound;
}

}  // namespace ds41::testing
