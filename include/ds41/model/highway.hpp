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

#include "../core/fp_exact_begin.hpp"
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
    B::for_each_in_rows(T, dim, [=] DS41_LAMBDA(long t, long d) {
      float acc = 0.0f;
      for (int i = 0; i < hc; ++i) acc += pre[t * hc + i] * h[(t * hc + i) * dim + d];
      y[t * dim + d] = bf16_round(acc);
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
    B::expand_post(x, res, post, comb, T, hc, dim, out);
  }

  /// out[t, d] = bf16(bf16(Σ_i h[t, i, d]) / hc): torch's bf16 mean over the copies (a float32
  /// sum in copy order rounded to bf16, then the division rounded again), into rows of `out`
  /// `out_stride` apart (a DSpark target layer's part of main_hidden).
  static void copies_mean(const float* h, long T, int hc, int dim, float* out, long out_stride) {
    B::for_each_in_rows(T, dim, [=] DS41_LAMBDA(long t, long d) {
      float acc = 0.0f;
      for (int i = 0; i < hc; ++i) acc += h[(t * hc + i) * dim + d];
      out[t * out_stride + d] = bf16_round(bf16_round(acc) / static_cast<float>(hc));
    });
  }

  /// hc identical copies of each row: [T, dim] -> [T, hc, dim].
  static void expand_copies(const float* x, long T, int hc, int dim, float* out) {
    B::for_each_in_rows(T * hc, dim, [=] DS41_LAMBDA(long r, long d) { out[r * dim + d] = x[r / hc * dim + d]; });
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
  int hc_ = 1, dim_ = 0, iters_ = 1;
  float hc_eps_ = 0, norm_eps_ = 0;
  MixWeights attn_, ffn_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
