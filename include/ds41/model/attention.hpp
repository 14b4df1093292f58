// ds41/model/attention.hpp — CompressedAttnT: the attention sublayer (M:583-790).
//
// Low-rank Q (wq_a → q_norm → wq_b, RoPE on the tail), latent K=V (wkv → kv_norm → RoPE → fp8
// round trip) kept in a ring of `window` rows, and for ratio > 0 the shared compressed KV with the
// indexer's top-k; one sparse attention with a per-head sink over both, inverse RoPE on the
// output, grouped low-rank output projection (block-diagonal wo_a, then wo_b).
#pragma once
#include <string>
#include <type_traits>
#include <vector>
#include "../core/attention_math.hpp"
#include "compressor.hpp"
#include "indexer.hpp"
#include "undo_record.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B>
class CompressedAttnT {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  /// Per-sequence state of one layer.
  struct State {
    Buf<float> window;      // [W, D] ring, slot = position % W
    Buf<float> compressed;  // [max_seq / r, D] (kv sources)
    typename CompressorT<B>::State comp;
    typename IndexerT<B>::State index;
    UndoRecord<B>* undo = nullptr;  // set while the sequence has an open checkpoint
  };

  CompressedAttnT() = default;
  CompressedAttnT(const ModelConfig& c, const WeightSource& w, int layer)
      : layer_(layer), dim_(c.dim), H_(c.n_heads), D_(c.head_dim), rd_(c.rope_head_dim), qr_(c.q_lora_rank),
        G_(c.o_groups), R_(c.o_lora_rank), W_(c.window_size), ratio_(c.ratio(layer)),
        kv_source_(c.is_kv_source(layer)), index_source_(c.is_index_source(layer)),
        eps_(static_cast<float>(c.norm_eps)), scale_(static_cast<float>(std::pow(c.head_dim, -0.5))),
        max_seq_(c.max_seq_len) {
    const std::string p = "layers." + std::to_string(layer) + ".attn.";
    sink_ = upload_vector<B>(w, p + "attn_sink", H_);
    wq_a_ = load_matrix<B>(w, p + "wq_a.weight", qr_, dim_);
    q_norm_ = upload_vector<B>(w, p + "q_norm.weight", qr_);
    wq_b_ = load_matrix<B>(w, p + "wq_b.weight", static_cast<long>(H_) * D_, qr_);
    wkv_ = load_matrix<B>(w, p + "wkv.weight", D_, dim_);
    kv_norm_ = upload_vector<B>(w, p + "kv_norm.weight", D_);
    wo_a_ = load_matrix<B>(w, p + "wo_a.weight", static_cast<long>(G_) * R_, static_cast<long>(H_) * D_ / G_);
    wo_b_ = load_matrix<B>(w, p + "wo_b.weight", dim_, static_cast<long>(G_) * R_);
    if (ratio_ && G_ * R_ % 32 != 0 && wo_a_.view().format == WeightFormat::kFp8Block32)
      fail("attention layer ", layer, ": fp8 wo_a needs o_lora_rank on a 32-row boundary");
    RopeParams rp;
    rp.rope_dim = rd_;
    if (ratio_) {  // compressed layers: compress_rope_theta with YaRN
      rp.base = c.compress_rope_theta;
      rp.original_seq_len = c.original_seq_len;
    } else {  // pure sliding window: rope_theta, no YaRN
      rp.base = c.rope_theta;
      rp.original_seq_len = 0;
    }
    rp.factor = c.rope_factor;
    rp.beta_fast = c.beta_fast;
    rp.beta_slow = c.beta_slow;
    rope_ = RopeTables<B>(rp, c.max_seq_len);
    if (kv_source_) compressor_ = CompressorT<B>(c, w, p + "compressor.", ratio_);
    if (index_source_) indexer_ = IndexerT<B>(c, w, p + "indexer.", layer);
    for (int l : c.index_source_layers)  // the top-k this layer reads: its own, else the last one before it
      if (l <= layer && c.ratio(l) > 0 && (topk_layer_ < 0 || l > topk_layer_)) topk_layer_ = l;
    if (topk_layer_ >= 0) topk_ratio_ = c.ratio(topk_layer_);
  }

  State make_state() const {
    State s;
    s.window = B::template alloc<float>(static_cast<size_t>(W_) * D_);
    if (kv_source_) {
      s.compressed = B::template alloc<float>(static_cast<size_t>(max_seq_ / ratio_ + 1) * D_);
      s.comp = compressor_.make_state();
    }
    if (index_source_) s.index = indexer_.make_state();
    return s;
  }

  /// x: [T, dim] (attn_in) at positions start..start+T-1 → out [T, dim].
  void forward(const float* x, long T, long start, State& st, SharedSlots<B>& shared, const Tap<B>& tap,
               float* out) const {
    Projection p = project(x, T, RowPositions<B>{start, nullptr}, tap);
    auto o = B::template alloc<float>(static_cast<size_t>(T) * H_ * D_);
    attend(p, 0, T, start, st, shared, tap, o.data());
    output(o.data(), T, tap, out);
  }

  /// Row r of a batched decode step: a sequence's one token at its position, with this layer's
  /// state and the sequence's shared slots and taps.
  struct Row {
    long pos = 0;
    State* st = nullptr;
    SharedSlots<B>* shared = nullptr;
    Tap<B> tap;
  };
  /// A batched decode step: x [N, dim] (attn_in), row r one token of its own sequence → out
  /// [N, dim]. Every weight pass (the projections, the compressor's and the indexer's, the
  /// output) runs once over all rows; the window, compressor, indexer and attention per row.
  /// Row for row the same bits as forward() with that sequence alone.
  void forward_rows(const float* x, const std::vector<Row>& rows, float* out) const {
    const long N = static_cast<long>(rows.size());
    std::vector<long> h_pos(N);
    RowTaps<B> taps;
    for (long r = 0; r < N; ++r) {
      h_pos[r] = rows[r].pos;
      DS41_CHECK(h_pos[r] > 0, "internal: a batched step's rows continue sequences (a prompt runs on its own)");
      taps.rows.push_back(rows[r].tap);
    }
    auto pos = B::template alloc<long>(N);
    B::upload(pos.data(), h_pos.data(), N);
    Projection p = project(x, N, RowPositions<B>{0, pos.data()}, taps);
    auto o = B::template alloc<float>(static_cast<size_t>(N) * H_ * D_);
    for (long r = 0; r < N; ++r)
      attend(p, r, 1, h_pos[r], *rows[r].st, *rows[r].shared, rows[r].tap, o.data() + r * H_ * D_);
    output(o.data(), N, taps, out);
  }

  /// What the weights make of each input row (any rows, any sequences): the queries, the window
  /// K=V row, and the compressor's and indexer's projections where this layer has them.
  struct Projection {
    Buf<float> qr, q, kv;  // [T, q_lora], [T, H, D] (RoPE'd), [T, D] (normed, RoPE'd, fp8 round trip)
    typename CompressorT<B>::Projection comp;
    typename IndexerT<B>::Queries index;
  };
  /// (Public, as the functions below: CUDA's extended lambdas may not live in private members.)
  /// The K=V rows of inputs x [T, dim] at their positions (M:722-726, 1039-1042): kv_norm(wkv(x)),
  /// RoPE on the tail, fp8 round trip; tapped as `name`.
  template <class TapT>
  Buf<float> window_kv(const float* x, long T, const RowPositions<B>& pos, const TapT& tap,
                       const char* name = "window_kv") const {
    const int D = D_;
    auto kv = B::template alloc<float>(static_cast<size_t>(T) * D);
    B::linear(x, T, dim_, wkv_.view(), kv.data(), D, OutRound::kBF16);
    Ops<B>::rmsnorm(kv.data(), T, D, kv_norm_.data(), eps_);
    pos.rope(kv.data(), T, 1, D, rd_, rope_, false);
    Ops<B>::roundtrip(kv.data(), T, D, kFp8Block, RoundTrip::kFp8Pow2);
    tap.f32(name, kv.data(), {T, D});
    return kv;
  }

  /// Rows kv [T, D] at positions start..start+T-1 into the window ring (slot = position % W): a
  /// prompt (start 0) keeps its last W rows; a row past the prompt overwrites its slot, saved
  /// first while the sequence has a checkpoint open.
  void write_window(State& st, const float* kv, long T, long start) const {
    const int D = D_;
    const long W = W_;
    float* ring = st.window.data();
    const bool prefill = start == 0;
    const long first = T > W ? T - W : 0;
    if (st.undo && !prefill)
      for (long t = first; t < T; ++t) st.undo->save(start + t, ring + ((start + t) % W) * D, D);
    const long n = T - first;
    B::for_each(n * D, [=] DS41_LAMBDA(long e) {
      long t = first + e / D, d = e % D;
      long pos = start + t;
      ring[(pos % W) * D + d] = kv[t * D + d];
    });
  }

  template <class TapT>
  Projection project(const float* x, long T, const RowPositions<B>& pos, const TapT& tap,
                     const char* kv_name = "window_kv") const {
    const int H = H_, D = D_, rd = rd_;
    Projection p;
    // low-rank Q
    p.qr = B::template alloc<float>(static_cast<size_t>(T) * qr_);
    B::linear(x, T, dim_, wq_a_.view(), p.qr.data(), qr_, OutRound::kBF16);
    Ops<B>::rmsnorm(p.qr.data(), T, qr_, q_norm_.data(), eps_);
    p.q = B::template alloc<float>(static_cast<size_t>(T) * H * D);
    B::linear(p.qr.data(), T, qr_, wq_b_.view(), p.q.data(), static_cast<long>(H) * D, OutRound::kBF16);
    pos.rope(p.q.data(), T, H, D, rd, rope_, false);

    p.kv = window_kv(x, T, pos, tap, kv_name);

    if (ratio_ && kv_source_) p.comp = compressor_.project(x, T);
    if (ratio_ && index_source_) p.index = indexer_.queries(x, p.qr.data(), T, pos, rope_);
    return p;
  }

  /// One sequence's part: rows r0..r0+T-1 of `p` at positions start..start+T-1 write its window
  /// ring, compressor group and index keys, pick their compressed rows, and attend → o [T, H, D]
  /// (inverse RoPE applied).
  void attend(const Projection& p, long r0, long T, long start, State& st, SharedSlots<B>& shared, const Tap<B>& tap,
              float* o) const {
    const int H = H_, D = D_, rd = rd_;
    const float* kv = p.kv.data() + r0 * D;
    const bool prefill = start == 0;
    const long W = W_;
    // prefill attends over this chunk's rows and seeds the ring with its last W rows; decode writes
    // one slot and attends over the whole ring, oldest first
    const long n_win_rows = prefill ? T : W;
    const long n_win_cols = prefill ? (T < W ? T : W) : W;
    write_window(st, kv, prefill ? T : 1, start);

    // compressed part: KV rows and top-k
    long comp_len = 0, k = 0;
    const float* comp_rows = nullptr;
    Buf<int32_t> comp_idx;
    if (ratio_) comp_rows = compressed(p, r0, T, start, n_win_rows, st, shared, tap, comp_len, k, comp_idx);

    // one KV tensor: window rows then compressed rows; one index list per query
    const long rows = n_win_rows + comp_len;
    auto all_kv = B::template alloc<float>(static_cast<size_t>(rows) * D);
    B::copy(all_kv.data(), prefill ? kv : st.window.data(), static_cast<size_t>(n_win_rows) * D);
    if (comp_len) B::copy(all_kv.data() + n_win_rows * D, comp_rows, static_cast<size_t>(comp_len) * D);
    const long ncols = n_win_cols + k;
    auto idx = B::template alloc<int32_t>(static_cast<size_t>(T) * (ncols > 0 ? ncols : 1));
    {
      int32_t* pi = idx.data();
      const int32_t* pc = comp_idx.data();
      B::for_each(T, [=] DS41_LAMBDA(long t) {
        int32_t* row = pi + t * ncols;
        if (prefill) {  // rows max(0, t-W+1) .. t
          long lo = t - W + 1 > 0 ? t - W + 1 : 0;
          for (long i = 0; i < n_win_cols; ++i) row[i] = lo + i > t ? -1 : static_cast<int32_t>(lo + i);
        } else {  // ring slots oldest first; slots not yet written are -1
          long oldest = start % W + 1;
          for (long i = 0; i < W; ++i) {
            long s = (oldest + i) % W;
            row[i] = s > start ? -1 : static_cast<int32_t>(s);
          }
        }
        for (long j = 0; j < k; ++j) row[n_win_cols + j] = pc[t * k + j];
      });
    }
    float* q = const_cast<float*>(p.q.data()) + r0 * H * D;  // a teacher-forcing tap may replace it
    tap.f32("q", q, {T, H, D});

    B::sparse_attention(q, all_kv.data(), D, idx.data(), static_cast<int>(ncols), T, H, sink_.data(), scale_, o);
    Ops<B>::rope(o, T * H, D, rd, H, start, 1, rope_.cos_t.data(), rope_.sin_t.data(), true);
    tap.f32("attn_o", o, {T, H, D});
  }

  /// A DSpark stage's attention (M:1053-1068): the T rows of `p` are one draft block at positions
  /// start..start+T-1 (the ring's newest row is at start-1); every block query attends, in this
  /// order, to ring slots 0..min(W, start)-1 (slot order; slots never written are left out while
  /// the ring fills) and to all T block rows (K=V = p.kv, not stored): non-causal within the
  /// block. → o [T, H, D] (inverse RoPE applied). `idx_tap` receives the index list once.
  void attend_block(const Projection& p, long T, long start, const State& st, const Tap<B>& tap, const Tap<B>& idx_tap,
                    float* o) const {
    const int H = H_, D = D_, rd = rd_;
    const long W = W_, n_ring = start < W ? start : W, ncols = n_ring + T;
    auto all_kv = B::template alloc<float>(static_cast<size_t>(W + T) * D);
    B::copy(all_kv.data(), st.window.data(), static_cast<size_t>(W) * D);
    B::copy(all_kv.data() + W * D, p.kv.data(), static_cast<size_t>(T) * D);
    auto idx = B::template alloc<int32_t>(static_cast<size_t>(T) * ncols);
    int32_t* pi = idx.data();
    B::for_each(T * ncols, [=] DS41_LAMBDA(long e) {
      const long i = e % ncols;
      pi[e] = static_cast<int32_t>(i < n_ring ? i : W + (i - n_ring));
    });
    idx_tap.i32("attn_topk", idx.data(), {T, ncols});
    float* q = const_cast<float*>(p.q.data());  // a teacher-forcing tap may replace it
    tap.f32("q", q, {T, H, D});
    tap.f32("attn_kv", all_kv.data(), {W + T, D});
    B::sparse_attention(q, all_kv.data(), D, idx.data(), static_cast<int>(ncols), T, H, sink_.data(), scale_, o);
    Ops<B>::rope(o, T * H, D, rd, H, start, 1, rope_.cos_t.data(), rope_.sin_t.data(), true);
    tap.f32("attn_o", o, {T, H, D});
  }

  /// The grouped low-rank output of o [T, H, D] → out [T, dim], for any rows: group g maps its
  /// heads' H·D/G values to R outputs (block-diagonal wo_a), then wo_b.
  template <class TapT>
  void output(const float* o, long T, const TapT& tap, float* out) const {
    const long hd = static_cast<long>(H_) * D_, gin = hd / G_;
    auto oa = B::template alloc<float>(static_cast<size_t>(T) * G_ * R_);
    // the reference's einsum sums in bf16 on a small problem (linear_math.hpp); the problem is
    // one sequence's step, so a batched step's rows (one token each) decide it as one token
    const long ref_rows = std::is_same_v<TapT, RowTaps<B>> ? 1 : T;
    if (torch_small_bmm(gin, ref_rows, R_)) {
      const MatrixView wa = wo_a_.view();
      float* pa = oa.data();
      const int G = G_, R = R_;
      B::for_each(T * G * R, [=] DS41_LAMBDA(long e) {
        long t = e / (static_cast<long>(G) * R);
        int gr = static_cast<int>(e % (static_cast<long>(G) * R)), g = gr / R;
        pa[e] = dot_bf16_running(o + t * hd + g * gin, [=](int k) { return wa.at(gr, k); }, static_cast<int>(gin));
      });
    } else {
      for (int g = 0; g < G_; ++g)
        B::linear(o + g * gin, T, hd, wo_a_.view().row_slice(g * R_, R_), oa.data() + g * R_,
                  static_cast<long>(G_) * R_, OutRound::kBF16);
    }
    B::linear(oa.data(), T, static_cast<long>(G_) * R_, wo_b_.view(), out, dim_, OutRound::kBF16);
    tap.f32("attn_out", out, {T, dim_});
  }

  int ratio() const { return ratio_; }
  int heads() const { return H_; }

 private:
  /// The shared compressed KV and this layer's top-k (M:728-762). Returns the compressed rows.
  const float* compressed(const Projection& p, long r0, long T, long start, long offset, State& st,
                          SharedSlots<B>& shared, const Tap<B>& tap, long& comp_len, long& k,
                          Buf<int32_t>& comp_idx) const {
    const int r = ratio_, D = D_;
    comp_len = (start + T) / r;
    long n_new = 0;
    Buf<float> latent;
    // latents stand for the first token of their group: group j of a prefill at j·r, the one
    // group a decode step completes at start+1-r
    const long lpos0 = start == 0 ? 0 : start + 1 - r;
    const long lstep = r;
    if (kv_source_) {
      latent = B::template alloc<float>(static_cast<size_t>(compressor_.max_new(T)) * D);
      n_new = compressor_.absorb(p.comp, r0, T, start, st.comp, latent.data(), st.undo);
      shared.compress_kv = st.compressed.data();
      shared.compress_kv_layer = layer_;
      shared.compress_kv_rows = max_seq_ / ratio_;  // the reference's cache: max_seq_len // ratio rows
      if (n_new) tap.f32("compress_latent", latent.data(), {n_new, D});
    }
    // the indexer needs the latent before RoPE, so it runs before the cache is written
    if (!index_source_) {
      DS41_CHECK(shared.has_topk, "attention layer ", layer_, ": no index source has published a top-k");
      DS41_CHECK(shared.topk_rows == T, "attention layer ", layer_, ": published top-k has ", shared.topk_rows,
                 " rows for ", T, " tokens");
      k = shared.topk_cols;
      comp_idx = B::template alloc<int32_t>(static_cast<size_t>(T) * (k > 0 ? k : 1));
      B::copy(comp_idx.data(), shared.topk.data(), static_cast<size_t>(T) * k);
    } else {
      if (comp_len == 0) {
        k = 0;
        comp_idx = B::template alloc<int32_t>(1);
      } else {
        indexer_.publish_keys(latent.data(), n_new, start, lpos0, lstep, st.index, shared, rope_, tap);
        k = indexer_.select(p.index, r0, T, start, offset, shared, tap, comp_idx);
      }
      shared.topk = B::template alloc<int32_t>(static_cast<size_t>(T) * (k > 0 ? k : 1));
      B::copy(shared.topk.data(), comp_idx.data(), static_cast<size_t>(T) * k);
      shared.topk_rows = T;
      shared.topk_cols = k;
      shared.has_topk = true;
    }
    tap.i32("index_topk", comp_idx.data(), {T, k});
    if (n_new) {
      float* lat = latent.data();
      Ops<B>::rope(lat, n_new, D, rd_, 1, lpos0, lstep, rope_.cos_t.data(), rope_.sin_t.data(), false);
      Ops<B>::roundtrip(lat, n_new, D, kFp4KvBlock, RoundTrip::kFp4E4m3);
      B::copy(st.compressed.data() + (start / r) * D, lat, static_cast<size_t>(n_new) * D);
      tap.f32("compress_kv", lat, {n_new, D});
    }
    DS41_CHECK(shared.compress_kv != nullptr, "attention layer ", layer_, ": no compressed KV published");
    // shared_attn.compress_kv[:, :end // ratio]: a consumer of a larger ratio's (smaller) cache reads
    // only the rows that cache holds
    const bool capped = comp_len > shared.compress_kv_rows;
    if (capped) comp_len = shared.compress_kv_rows;
    // The top-k of an index source of a smaller ratio than this layer's names positions up to its
    // own (start + T) / ratio, past the rows this layer's KV holds: the reference's gather then
    // fails (index out of range), so this is checked (a download) where it can happen.
    if (capped || (k > 0 && (start + T) / topk_ratio_ > comp_len)) {
      std::vector<int32_t> h(static_cast<size_t>(T * k));
      if (!h.empty()) B::download(h.data(), comp_idx.data(), h.size());
      for (int32_t i : h)  // window rows come first: compressed row j is index offset + j
        DS41_CHECK(i < offset + comp_len, "attention layer ", layer_, " (ratio ", ratio_, "): top-k position ", i - offset,
                   " (layer ", topk_layer_, "'s indexer, ratio ", topk_ratio_, ") lies past the ", comp_len,
                   " compressed rows this layer reads (", capped ? "layer " + std::to_string(shared.compress_kv_layer) +
                   "'s cache holds max_seq_len / its ratio" : "(position + 1) / its ratio", "); the reference fails here "
                   "too (index out of range in sparse_attn's gather)");
    }
    return shared.compress_kv;
  }

  int layer_ = 0, dim_ = 0, H_ = 0, D_ = 0, rd_ = 0, qr_ = 0, G_ = 1, R_ = 0, W_ = 0, ratio_ = 0;
  int topk_layer_ = -1, topk_ratio_ = 1;  // the index source whose top-k this layer reads
  bool kv_source_ = false, index_source_ = false;
  float eps_ = 0, scale_ = 0;
  long max_seq_ = 0;
  Buf<float> sink_, q_norm_, kv_norm_;
  Matrix<B> wq_a_, wq_b_, wkv_, wo_a_, wo_b_;
  RopeTables<B> rope_;
  CompressorT<B> compressor_;
  IndexerT<B> indexer_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
