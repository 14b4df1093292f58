// ds41/model/indexer.hpp — the indexer of index-source layers (M:500-578): fp4 query heads against
// one fp4 key per compressed position, ReLU scores combined by weights_proj, optional candidate
// prefilter (level one on the candidate source, a mask on later index sources), top-k re-sorted
// into position order.
#pragma once
#include <string>
#include "../core/compress_math.hpp"
#include "config.hpp"
#include "ops.hpp"
#include "shared_slots.hpp"
#include "tap.hpp"
#include "weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B>
class IndexerT {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  struct State {
    Buf<float> keys;  // [max_seq / r, Di] (owners of keys only)
  };

  IndexerT() = default;
  IndexerT(const ModelConfig& c, const WeightSource& w, const std::string& p, int layer)
      : layer_(layer), owns_k_(c.is_kv_source(layer)), ratio_(c.ratio(layer)), dim_(c.dim), hd_(c.head_dim),
        heads_(c.index_n_heads), idim_(c.index_head_dim), rd_(c.rope_head_dim), topk_(c.index_topk),
        is_cand_src_(c.is_candidate_source(layer)), uses_cand_(c.uses_candidates(layer)),
        cand_blocks_(c.candidate_topk_blocks), cand_bs_(c.candidate_block_size),
        eps_(static_cast<float>(c.norm_eps)), max_seq_(c.max_seq_len) {
    wq_b_ = load_matrix<B>(w, p + "wq_b.weight", static_cast<long>(heads_) * idim_, c.q_lora_rank);
    weights_proj_ = load_matrix<B>(w, p + "weights_proj.weight", heads_, dim_);
    if (owns_k_) {
      wk_ = load_matrix<B>(w, p + "wk.weight", idim_, hd_);
      k_norm_ = upload_vector<B>(w, p + "k_norm.weight", idim_);
    }
    // torch multiplies a bf16 tensor by the Python constant rounded to bf16 (via float32)
    w_scale_ = bf16_round(static_cast<float>(std::pow(idim_, -0.5) * std::pow(heads_, -0.5)));
  }

  State make_state() const {
    State s;
    if (owns_k_) s.keys = B::template alloc<float>(static_cast<size_t>(max_seq_ / ratio_ + 1) * idim_);
    return s;
  }

  /// Index keys of new latents [n, D] (pre-RoPE): k_norm(wk(latent)), RoPE at the group positions,
  /// fp4 round trip; written at rows start/r.. and published to the shared slot.
  void publish_keys(const float* latent, long n, long start, long latent_pos0, long latent_step, State& st,
                    SharedSlots<B>& shared, const RopeTables<B>& rope, const Tap<B>& tap) const {
    if (!owns_k_ || n == 0) return;
    float* k = st.keys.data() + (start / ratio_) * idim_;
    B::linear(latent, n, hd_, wk_.view(), k, idim_, OutRound::kBF16);
    Ops<B>::rmsnorm(k, n, idim_, k_norm_.data(), eps_);
    Ops<B>::rope(k, n, idim_, rd_, 1, latent_pos0, latent_step, rope.cos_t.data(), rope.sin_t.data(), false);
    Ops<B>::roundtrip(k, n, idim_, kFp4IndexBlock, RoundTrip::kFp4Pow2);
    shared.index_k = st.keys.data();
    shared.index_k_layer = layer_;
    shared.index_k_rows = max_seq_ / ratio_;  // the reference's k_cache holds max_seq_len // ratio rows
    tap.f32("index_key", k, {n, idim_});
  }

  /// The row-wise half of select(): each query row's index heads (wq_b on qr, RoPE at its
  /// position, fp4 round trip) and head weights (weights_proj on x, times the softmax scale), for
  /// any rows (a batched step makes every sequence's at once).
  struct Queries {
    Buf<float> q, w;  // [T, H, Di], [T, H]
  };
  Queries queries(const float* x, const float* qr, long T, const RowPositions<B>& pos, const RopeTables<B>& rope) const {
    const int H = heads_, Di = idim_;
    Queries r;
    r.q = B::template alloc<float>(static_cast<size_t>(T) * H * Di);
    B::linear(qr, T, wq_b_.cols(), wq_b_.view(), r.q.data(), static_cast<long>(H) * Di, OutRound::kBF16);
    pos.rope(r.q.data(), T, H, Di, rd_, rope, false);
    Ops<B>::roundtrip(r.q.data(), T * H, Di, kFp4IndexBlock, RoundTrip::kFp4Pow2);
    r.w = B::template alloc<float>(static_cast<size_t>(T) * H);
    B::linear(x, T, dim_, weights_proj_.view(), r.w.data(), H, OutRound::kBF16);
    float* pw = r.w.data();
    const float ws = w_scale_;
    B::for_each(T * H, [=] DS41_LAMBDA(long e) { pw[e] = bf16_round(pw[e] * ws); });
    return r;
  }

  /// Top-k compressed positions of one sequence's T queries at start..start+T-1 (rows r0.. of
  /// `qs`): returns k and fills `out` [T, k].
  long select(const Queries& qs, long r0, long T, long start, long offset, SharedSlots<B>& shared, const Tap<B>& tap,
              Buf<int32_t>& out) const {
    const int H = heads_, Di = idim_;
    DS41_CHECK(shared.index_k != nullptr, "indexer of layer ", layer_,
               ": no index keys have been published by a kv source yet");
    // The reference scores shared_attn.index_k[:, :end // ratio]: the keys published last, which on
    // a decode step where this layer completes no group may be another layer's, of another ratio.
    // A slice of a smaller cache (a larger ratio) stops at its max_seq_len // ratio rows: fewer
    // positions are scored, the rest never chosen. Where that leaves fewer than the top-k it must
    // pick (or, in a prefill, fewer than the visibility mask covers), the reference itself fails.
    const long end = start + T, visible = end / ratio_;
    const long nk = visible < shared.index_k_rows ? visible : shared.index_k_rows;
    DS41_CHECK(start > 0 || nk == visible, "indexer of layer ", layer_, ": a prompt of ", T, " tokens needs ",
               visible, " index keys, but the keys published last (layer ", shared.index_k_layer, ") hold only ",
               shared.index_k_rows, " (max_seq_len / its ratio); the reference fails here too");
    DS41_CHECK((topk_ < visible ? topk_ : visible) <= nk, "indexer of layer ", layer_, ": the top-",
               (topk_ < visible ? topk_ : visible), " of the index scores is asked for, but the keys published last (layer ",
               shared.index_k_layer, ") hold only ", nk, " rows (max_seq_len / its ratio); the reference's "
               "torch.topk fails here too (selected index k out of range)");
    auto score = B::template alloc<float>(static_cast<size_t>(T) * nk);
    {
      const float *pq = qs.q.data() + r0 * H * Di, *keys = shared.index_k;
      const float* pw = qs.w.data() + r0 * H;
      float* ps = score.data();
      // einsum("bshd,btd->bsht") is one bmm of [T·H, Di] x [Di, nk]
      const bool small = torch_small_bmm(Di, T * H, nk);
      B::index_scores(pq, pw, keys, T, H, Di, nk, small, ps);
    }
    tap.f32("index_score", score.data(), {T, nk});

    // visibility: in the prefill query t sees (t+1)/r positions; a decode query sees them all
    const bool prefill = start == 0;
    const int r = ratio_;
    float* ps = score.data();
    if (prefill)
      B::for_each(T * nk, [=] DS41_LAMBDA(long e) {
        long t = e / nk, j = e % nk;
        if (j >= (t + 1) / r) ps[e] = -INFINITY;
      });

    if (is_cand_src_) {
      const int nb = static_cast<int>((nk + cand_bs_ - 1) / cand_bs_);
      const int kb = cand_blocks_ < nb ? cand_blocks_ : nb;
      auto blocks = B::template alloc<float>(static_cast<size_t>(T) * nb);
      auto bidx = B::template alloc<int>(static_cast<size_t>(T) * (kb > 0 ? kb : 1));
      auto bsel = B::template alloc<TopkEntry>(static_cast<size_t>(T) * nb);
      shared.candidates = B::template alloc<int32_t>(static_cast<size_t>(T) * nk);
      shared.cand_rows = T;
      shared.cand_cols = nk;
      shared.has_candidates = true;
      float* pb = blocks.data();
      int* pi = bidx.data();
      TopkEntry* pe = bsel.data();
      int32_t* pm = shared.candidates.data();
      const int cb = cand_blocks_, bs = cand_bs_;
      const long kbs = kb > 0 ? kb : 1;
      B::for_each(T, [=] DS41_LAMBDA(long t) {
        long cl = prefill ? (t + 1) / r : end / r;
        candidate_blocks_row(ps + t * nk, static_cast<int>(nk), cl, cb, bs, pb + t * nb, pi + t * kbs, pe + t * nb,
                             pm + t * nk);
      });
      tap.i32("candidates", pm, {T, nk}, CapType::kBool);
    } else if (uses_cand_) {
      DS41_CHECK(shared.has_candidates && shared.cand_rows == T && shared.cand_cols == nk, "indexer of layer ",
                 layer_, ": candidate mask of the candidate source has shape [", shared.cand_rows, ", ",
                 shared.cand_cols, "], this layer scores [", T, ", ", nk, "]");
      const int32_t* pm = shared.candidates.data();
      B::for_each(T * nk, [=] DS41_LAMBDA(long e) {
        if (!pm[e]) ps[e] = -INFINITY;
      });
    }

    const long k = topk_ < visible ? topk_ : visible;  // min(index_topk, end // ratio), <= nk (checked above)
    out = B::template alloc<int32_t>(static_cast<size_t>(T) * (k > 0 ? k : 1));
    int32_t* po = out.data();
    if (k > 0) B::topk_rows(ps, T, static_cast<int>(nk), static_cast<int>(k), po);
    B::for_each(T, [=] DS41_LAMBDA(long t) {
      long cl = prefill ? (t + 1) / r : end / r;
      index_topk_finish(po + t * k, static_cast<int>(k), cl, offset);
    });
    return k;
  }

 private:
  int layer_ = 0;
  bool owns_k_ = false;
  int ratio_ = 1, dim_ = 0, hd_ = 0, heads_ = 0, idim_ = 0, rd_ = 0, topk_ = 0;
  bool is_cand_src_ = false, uses_cand_ = false;
  int cand_blocks_ = 0, cand_bs_ = 1;
  float eps_ = 0, w_scale_ = 0;
  long max_seq_ = 0;
  Matrix<B> wq_b_, weights_proj_, wk_;
  Buf<float> k_norm_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
