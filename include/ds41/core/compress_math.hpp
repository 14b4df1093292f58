// ds41/core/compress_math.hpp — per-row math of the compressor, the indexer and the candidate
// prefilter (M:464-485, M:550-578 of the reference), shared by all backends.
#pragma once
#include "macros.hpp"  // DS41_HOST_AVX2
#include <cstdint>
#include "linear_math.hpp"
#include "simd_avx2.hpp"
#include "topk.hpp"
#include "torch_math.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

/// Softmax-gated pooling of channel d (of D) over a group of r rows (float32):
/// Σ_i kv_i · softmax(s)_i. torch's softmax over a non-last dim takes 8 channels at a time
/// through the vector exp and the last D mod 8 through the scalar one.
DS41_HD float pool_group_channel(const float* kv, const float* s, long stride, int r, long d, long D) {
  const bool vec = d < D / 8 * 8;
  float mx = -INFINITY;
  for (int i = 0; i < r; ++i) mx = fmaxf(mx, s[i * stride]);
  float sum = 0.0f;
  for (int i = 0; i < r; ++i) sum += vec ? exp_sleef_u10(s[i * stride] - mx) : exp_scalar(s[i * stride] - mx);
  float acc = 0.0f;
  for (int i = 0; i < r; ++i)
    acc += kv[i * stride] * ((vec ? exp_sleef_u10(s[i * stride] - mx) : exp_scalar(s[i * stride] - mx)) / sum);
  return acc;
}

/// One head's term of an index score from its q·k already rounded to bf16: bf16(relu(s) · w).
DS41_HD float index_head_term(float s, float w) {
  s = s > 0.0f ? s : 0.0f;
  return bf16_round(s * w);
}

/// One index score: bf16(Σ_h bf16(relu(bf16(q_h · k)) · w_h)), float32 sums; `small_bmm`: the
/// q·k einsum took torch's tiny-bmm path (bf16 running sum, linear_math.hpp).
DS41_HD float index_score_entry(const float* q, const float* w, const float* k, int heads, int hd,
                                bool small_bmm = false) {
  float total = 0.0f;
  for (int h = 0; h < heads; ++h) {
    const float* qh = q + static_cast<long>(h) * hd;
    float s;
    if (small_bmm) {
      s = dot_bf16_running(qh, [=](int d) { return k[d]; }, hd);
    } else {
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qh[d] * k[d];
      s = bf16_round(dot);
    }
    total += index_head_term(s, w[h]);
  }
  return bf16_round(total);
}

/// Scores of keys [j0, min(j0 + 8, nk)) for one query row into out[j], on the host:
/// index_score_entry for each, 8 keys side by side where AVX2 is there (simd_avx2.hpp: the same
/// sums in the same order per key; a 128-long dot product one at a time is latency-bound).
inline void index_scores_host(const float* q, const float* w, const float* keys, long j0, long nk, int heads, int hd,
                              bool small_bmm, float* out) {
#if defined(DS41_HOST_AVX2)
  if (!small_bmm && j0 + 8 <= nk && hd <= avx2::kIndexScoresMaxDim) {
    const float* k[8];
    for (int j = 0; j < 8; ++j) k[j] = keys + (j0 + j) * hd;
    avx2::index_scores8(q, w, k, heads, hd, out + j0);
    return;
  }
#endif
  for (long j = j0; j < nk && j < j0 + 8; ++j) out[j] = index_score_entry(q, w, keys + j * hd, heads, hd, small_bmm);
}

/// select_candidate_blocks for one query row: score each block of `bs` positions by its maximum,
/// pin the block holding the newest reachable position (compress_len-1) to +inf, keep the top
/// `topk_blocks` blocks whose score is not -inf, and expand back to a per-position 0/1 mask.
/// Scratch: blocks[ceil(n/bs)] floats, idx[min(topk_blocks, nb)] ints, sel[ceil(n/bs)] entries
/// (null on the host: the calling thread's).
DS41_HD void candidate_blocks_row(const float* score, int n, long compress_len, int topk_blocks, int bs,
                                  float* blocks, int* idx, TopkEntry* sel, int32_t* mask) {
  const int nb = (n + bs - 1) / bs;
  for (int b = 0; b < nb; ++b) {
    float m = -INFINITY;
    for (int j = b * bs; j < (b + 1) * bs && j < n; ++j) m = fmaxf(m, score[j]);
    blocks[b] = m;
  }
  // floor division: compress_len 0 pins nothing (block -1)
  long last = compress_len > 0 ? (compress_len - 1) / bs : -1;
  if (last >= 0 && last < nb) blocks[last] = INFINITY;
  const int k = topk_blocks < nb ? topk_blocks : nb;
  // scores.topk(k): torch's choice among tied blocks (core/topk.hpp); the set is what counts
  reference_topk_row(blocks, nb, k, true, idx, sel);
  for (int j = 0; j < n; ++j) mask[j] = 0;
  for (int i = 0; i < k; ++i) {
    if (!(blocks[idx[i]] > -INFINITY)) continue;
    for (int j = idx[i] * bs; j < (idx[i] + 1) * bs && j < n; ++j) mask[j] = 1;
  }
}

/// The second half of the indexer's selection, given the top-k positions of a row (any order):
/// re-sort into position order, positions at or beyond compress_len → -1, the rest + offset.
DS41_HD void index_topk_finish(int32_t* sel, int k, long compress_len, long offset) {
  int* idx = reinterpret_cast<int*>(sel);
  sort_ascending(idx, k);
  for (int i = 0; i < k; ++i) sel[i] = idx[i] < compress_len ? static_cast<int32_t>(idx[i] + offset) : -1;
}

/// The indexer's selection for one query row: top-k of `score` (k <= n), re-sorted into position
/// order, positions at or beyond compress_len → -1, the rest shifted by `offset` (window rows).
/// A host function (the model calls B::topk_rows, then index_topk_finish).
inline void index_topk_row(const float* score, int n, int k, long compress_len, long offset, int32_t* out) {
  // index_score.topk(k, sorted=False): torch's choice among tied positions (core/topk.hpp)
  torch_topk_row(score, n, k, false, reinterpret_cast<int*>(out), nullptr, topk_thread_scratch(n));
  index_topk_finish(out, k, compress_len, offset);
}

}  // namespace ds41
#include "fp_exact_end.hpp"
