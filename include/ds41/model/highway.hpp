// ds41/model/highway.hpp — HighwayT: the mHC residual highway of hc_mult parallel copies.
//
// hc_expand (embedding → hc identical copies), hc_mixes (one f32 projection of the flattened
// stream, scaled by its RMS, then Sinkhorn into pre / post / comb), hc_pre (collapse with a pre
// mix), hc_post (expand a sublayer output and mix the residual through comb). The *delayed pre*
// lives in Block: attention collapses with the previous layer's FFN pre, the FFN with this
// attention's pre.
#pragma once
#include <string>
#include "../core/activation.hpp"
#include "../core/sinkhorn.hpp"
#include "config.hpp"
#include "weights.hpp"

namespace ds41 {

template <class B>
class HighwayT {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  /// One set of mix weights: `fn` [(2+hc)·hc, hc·dim] (f32), `base` [(2+hc)·hc], `scale` [3].
  struct MixWeights {
    Matrix<B> fn;
    Buf<float> base, scale;
  };

  HighwayT() = default;
  HighwayT(const ModelConfig& c, const WeightSource& w, const std::string& p)
      : hc_(c.hc_mult), dim_(c.dim), iters_(c.hc_sinkhorn_iters),
        hc_eps_(static_cast<float>(c.hc_eps)), norm_eps_(static_cast<float>(c.norm_eps)) {
    attn_ = load(c, w, p, "attn");
    ffn_ = load(c, w, p, "ffn");
  }

  int hc() const { return hc_; }
  const MixWeights& attn() const { return attn_; }
  const MixWeights& ffn() const { return ffn_; }

  /// Mixes of a stream h [T, hc, dim]: pre [T, hc], post [T, hc], comb [T, hc, hc].
  /// `tensor_rows`: rows of the reference's tensor each row was computed in, which decides each
  /// sigmoid's exp path (torch_math.hpp): T (0) for one sequence's step, 1 for a batched decode
  /// step whose rows are different sequences' one-token steps.
  void mixes(const MixWeights& m, const float* h, long T, float* pre, float* post, float* comb,
             long tensor_rows = 0) const {
    const long tr = tensor_rows > 0 ? tensor_rows : T;
    const int mix = (2 + hc_) * hc_;
    const long hd = static_cast<long>(hc_) * dim_;
    auto raw = B::template alloc<float>(static_cast<size_t>(T) * mix);
    B::linear(h, T, hd, m.fn.view(), raw.data(), mix, OutRound::kF32);
    float* r = raw.data();
    const float *base = m.base.data(), *scale = m.scale.data();
    const int hc = hc_, iters = iters_;
    const float heps = hc_eps_, neps = norm_eps_;
    B::for_each(T, [=] DS41_LAMBDA(long t) {
      // rsqrt(mean(x²) + eps) over the whole flattened hc·dim stream, one statistic per token
      float rs = rsqrt_ref(sum_squares(h + t * hd, static_cast<int>(hd)) / static_cast<float>(hd) + neps);
      float* row = r + t * mix;
      for (int i = 0; i < mix; ++i) row[i] = row[i] * rs;
      hc_split_sinkhorn(row, scale, base, hc, iters, heps, pre + t * hc, post + t * hc, comb + t * hc * hc, t % tr, tr);
    });
    B::sync();
  }

  /// y[t, d] = bf16(Σ_i pre[t, i] · h[t, i, d]) — the collapse of hc copies into one row.
  void collapse(const float* h, const float* pre, long T, float* y) const { collapse(h, pre, T, hc_, dim_, y); }
  static void collapse(const float* h, const float* pre, long T, int hc, int dim, float* y) {
    B::for_each(T * dim, [=] DS41_LAMBDA(long e) {
      long t = e / dim, d = e % dim;
      float acc = 0.0f;
      for (int i = 0; i < hc; ++i) acc += pre[t * hc + i] * h[(t * hc + i) * dim + d];
      y[e] = bf16_round(acc);
    });
  }

  /// out[t, j, d] = bf16(post[t, j]·x[t, d] + Σ_i comb[t, i, j]·res[t, i, d]) (sum over the FIRST
  /// comb index: the reference's transposition).
  void expand_post(const float* x, const float* res, const float* post, const float* comb, long T,
                   float* out) const {
    expand_post(x, res, post, comb, T, hc_, dim_, out);
  }
  static void expand_post(const float* x, const float* res, const float* post, const float* comb, long T, int hc,
                          int dim, float* out) {
    if constexpr (B::kIsDevice) {  // one thread per element
      B::for_each(T * hc * dim, [=] DS41_LAMBDA(long e) {
        long t = e / (static_cast<long>(hc) * dim);
        int j = static_cast<int>((e / dim) % hc);
        long d = e % dim;
        float acc = 0.0f;
        for (int i = 0; i < hc; ++i) acc += comb[(t * hc + i) * hc + j] * res[(t * hc + i) * dim + d];
        out[e] = bf16_round(post[t * hc + j] * x[t * dim + d] + acc);
      });
    } else {
      // One item = a stretch of at most kPostChunk elements of one output row (t, j) — or, when
      // dim < kPostChunk, whole rows, kPostChunk / dim of them — so that the index math is done
      // once per item, a small call stays on the calling thread, and the per-element formula
      // splits into loops over d that vectorise. Each element still sees acc = 0, acc += comb·res
      // for i = 0..hc-1 in order, then bf16(post·x + acc): the same bits.
      if (dim <= 0) return;
      const long rows = T * hc;
      const long chunks = dim >= kPostChunk ? (dim + kPostChunk - 1) / kPostChunk : 1;
      const long per_item = dim >= kPostChunk ? 1 : kPostChunk / dim;
      B::for_each((rows + per_item - 1) / per_item * chunks, [=](long item) {
        const long group = item / chunks;
        const long d0 = (item - group * chunks) * kPostChunk;
        const int n = static_cast<int>(dim - d0 < kPostChunk ? dim - d0 : kPostChunk);
        const long row1 = (group + 1) * per_item < rows ? (group + 1) * per_item : rows;
        for (long row = group * per_item; row < row1; ++row) {  // row = t·hc + j
          const long t = row / hc;
          const int j = static_cast<int>(row - t * hc);
          float acc[kPostChunk];
          for (int d = 0; d < n; ++d) acc[d] = 0.0f;
          for (int i = 0; i < hc; ++i) {
            const float ci = comb[(t * hc + i) * hc + j];
            const float* ri = res + (t * hc + i) * dim + d0;
            for (int d = 0; d < n; ++d) acc[d] += ci * ri[d];
          }
          const float p = post[t * hc + j];
          const float* xt = x + t * dim + d0;
          float* o = out + row * dim + d0;
          for (int d = 0; d < n; ++d) o[d] = bf16_round(p * xt[d] + acc[d]);
        }
      });
    }
  }

  /// hc identical copies of each row: [T, dim] -> [T, hc, dim].
  static void expand_copies(const float* x, long T, int hc, int dim, float* out) {
    B::for_each(T * hc * dim, [=] DS41_LAMBDA(long e) {
      long t = e / (static_cast<long>(hc) * dim);
      out[e] = x[t * dim + e % dim];
    });
  }
  /// The initial one-hot pre mix (copy 0).
  static void identity_pre(long T, int hc, float* pre) {
    B::for_each(T * hc, [=] DS41_LAMBDA(long e) { pre[e] = (e % hc) == 0 ? 1.0f : 0.0f; });
  }

 private:
  static MixWeights load(const ModelConfig& c, const WeightSource& w, const std::string& p, const char* which) {
    const long mix = c.mix_hc();
    MixWeights m;
    m.fn = load_matrix<B>(w, p + "hc_" + which + "_fn", mix, static_cast<long>(c.hc_mult) * c.dim);
    m.base = upload_vector<B>(w, p + "hc_" + which + "_base", mix);
    m.scale = upload_vector<B>(w, p + "hc_" + which + "_scale", 3);
    return m;
  }
  static constexpr int kPostChunk = 512;  // host expand_post: elements of one output row per item
  int hc_ = 1, dim_ = 0, iters_ = 1;
  float hc_eps_ = 0, norm_eps_ = 0;
  MixWeights attn_, ffn_;
};

}  // namespace ds41
