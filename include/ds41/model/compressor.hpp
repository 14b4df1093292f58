// ds41/model/compressor.hpp — the KV compressor of kv-source layers (M:438-485).
//
// ratio 1: latent = norm(wkv(x)) (bf16 Linear), one per token. ratio r > 1: in float32,
// kv = wkv(x), s = wgate(x), each group of r consecutive tokens pooled per channel with
// softmax(s); the trailing partial group is carried in the sequence state and completed during
// decode. Returns latents BEFORE RoPE (the indexer needs them unrotated).
#pragma once
#include <string>
#include "../core/compress_math.hpp"
#include "config.hpp"
#include "ops.hpp"
#include "undo_record.hpp"
#include "weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B>
class CompressorT {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  /// Per-sequence partial group (ratio > 1).
  struct State {
    Buf<float> kv, score;  // [r, D]
  };

  CompressorT() = default;
  CompressorT(const ModelConfig& c, const WeightSource& w, const std::string& p, int ratio)
      : ratio_(ratio), dim_(c.dim), hd_(c.head_dim), eps_(static_cast<float>(c.norm_eps)) {
    wkv_ = load_matrix<B>(w, p + "wkv.weight", hd_, dim_);
    if (ratio_ > 1) wgate_ = load_matrix<B>(w, p + "wgate.weight", hd_, dim_);
    norm_ = upload_vector<B>(w, p + "norm.weight", hd_);
  }

  State make_state() const {
    State s;
    if (ratio_ > 1) {
      s.kv = B::template alloc<float>(static_cast<size_t>(ratio_) * hd_);
      s.score = B::template alloc<float>(static_cast<size_t>(ratio_) * hd_);
      B::fill(s.score.data(), s.score.size(), -INFINITY);
    }
    return s;
  }

  /// Max latents one call can yield for T tokens.
  long max_new(long T) const { return ratio_ == 1 ? T : T / ratio_ + 1; }

  /// x: [T, dim] attention input at positions start..start+T-1. Writes latents [n, D] to `out`
  /// and returns n (0 while a group is still filling).
  /// `undo` (an open checkpoint) keeps the open-group slot a decode step overwrites.
  long forward(const float* x, long T, long start, State& st, float* out, UndoRecord<B>* undo = nullptr) const {
    Projection p = project(x, T);
    return absorb(p, 0, T, start, st, out, undo);
  }

  /// The row-wise half of forward(): what the weights make of each input row, for any rows (a
  /// batched step projects every sequence's rows at once). ratio 1: the latents, normed; ratio
  /// r > 1: the float32 kv and gate scores the groups pool.
  struct Projection {
    Buf<float> kv, score;  // [T, D] each (score: ratio > 1 only)
  };
  Projection project(const float* x, long T) const {
    const int D = hd_;
    Projection p;
    p.kv = B::template alloc<float>(static_cast<size_t>(T) * D);
    if (ratio_ == 1) {
      B::linear(x, T, dim_, wkv_.view(), p.kv.data(), D, OutRound::kBF16);
      Ops<B>::rmsnorm(p.kv.data(), T, D, norm_.data(), eps_);
      return p;
    }
    p.score = B::template alloc<float>(static_cast<size_t>(T) * D);
    B::linear(x, T, dim_, wkv_.view(), p.kv.data(), D, OutRound::kF32);
    B::linear(x, T, dim_, wgate_.view(), p.score.data(), D, OutRound::kF32);
    return p;
  }

  /// The per-sequence half: rows r0..r0+T-1 of a projection, one sequence's tokens at positions
  /// start..start+T-1, pooled into its groups (see forward()).
  long absorb(const Projection& p, long r0, long T, long start, State& st, float* out, UndoRecord<B>* undo = nullptr) const {
    const int D = hd_;
    if (ratio_ == 1) {
      B::copy(out, p.kv.data() + r0 * D, static_cast<size_t>(T) * D);
      return T;
    }
    const int r = ratio_;
    float *skv = st.kv.data(), *ssc = st.score.data();
    const float *pkv = p.kv.data() + r0 * D, *psc = p.score.data() + r0 * D;
    long n = 0;
    if (start == 0) {
      const long groups = T / r, cutoff = groups * r;
      // the trailing partial group waits in the state, slot = position % r
      B::copy(skv, pkv + cutoff * D, static_cast<size_t>(T - cutoff) * D);
      B::copy(ssc, psc + cutoff * D, static_cast<size_t>(T - cutoff) * D);
      B::for_each(groups * D, [=] DS41_LAMBDA(long e) {
        long g = e / D, d = e % D;
        out[e] = bf16_round(pool_group_channel(pkv + g * r * D + d, psc + g * r * D + d, D, r, d, D));
      });
      n = groups;
    } else {
      DS41_CHECK(T == 1, "internal: a compressor step past the prompt takes one token");
      const long slot = start % r;
      if (undo) {
        undo->save(start, skv + slot * D, D);
        undo->save(start, ssc + slot * D, D);
      }
      B::copy(skv + slot * D, pkv, D);
      B::copy(ssc + slot * D, psc, D);
      if ((start + 1) % r == 0) {
        B::for_each(D, [=] DS41_LAMBDA(long d) { out[d] = bf16_round(pool_group_channel(skv + d, ssc + d, D, r, d, D)); });
        n = 1;
      }
    }
    if (n) Ops<B>::rmsnorm(out, n, D, norm_.data(), eps_);
    return n;
  }

  int ratio() const { return ratio_; }

 private:
  int ratio_ = 0, dim_ = 0, hd_ = 0;
  float eps_ = 0;
  Matrix<B> wkv_, wgate_;
  Buf<float> norm_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
