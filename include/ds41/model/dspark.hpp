// ds41/model/dspark.hpp — DSparkHead: DeepSeek's draft head (SCHEMA §11; M:1020-1160, 1270-1282).
//
//   target rows   main_hidden = the copies' mean of the stream entering each target layer
//                 (Block::forward's input_mean), concatenated; main_x = main_norm(main_proj(·));
//                 each stage's ring row = kv_norm(wkv(main_x)), RoPE at the row's position, fp8
//                 round trip (absorb(): run by the model on every row of every step, so the rings
//                 follow the sequence through chunks, batches, rewinds and snapshots)
//   draft(P)      block [anchor, noise, …] at positions P+1..P+B through S stages — each a Block
//                 whose attention is the window-only, non-causal one of attend_block(), whose MoE
//                 has the draft's experts (in the backbone's ExpertStore: resident, or streamed
//                 through the model's ExpertCache as its layers n_layers + s) — then the stage's
//                 own norm, the backbone's head on every row, the Markov bias of the previous
//                 token added before each argmax, and the confidence of (pre-norm x, Markov
//                 embedding)
//
// The reference writes the ring row of position P inside the draft call (M:1065); here the
// target step at P has written it already, the same bits in the same slot before the same
// attention: a draft writes nothing, so a rejected one leaves no trace.
#pragma once
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>
#include "block.hpp"
#include "own_sequence.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// Stage s's tensors (mtp.s.…) under the names a Block of layer id n_layers + s asks for
/// (layers.{n_layers+s}.…), so the stage is built by the backbone's own components.
class StageWeights : public WeightSource {
 public:
  StageWeights(const WeightSource& w, int layer, int stage)
      : w_(w), from_("layers." + std::to_string(layer) + "."), to_("mtp." + std::to_string(stage) + ".") {}
  bool has(const std::string& name) const override { return w_.has(map(name)); }
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    return w_.load(map(name), shape);
  }

 private:
  std::string map(const std::string& n) const { return n.rfind(from_, 0) == 0 ? to_ + n.substr(from_.size()) : n; }
  const WeightSource& w_;
  std::string from_, to_;
};

/// How a draft chooses each next token from its logits row (with the Markov bias): null is
/// argmax (the reference at temperature 0); a sampler's draw for sampled speculation.
using DraftPick = std::function<int32_t(std::span<const float>)>;

/// What one draft call returns (forward_spec, M:1282): the block's tokens [anchor, d1..dB], the
/// draft logits [B, vocab] (Markov bias included) and the confidence per position [B] (raw).
struct DraftResult {
  long start = 0;  // sequence position of the anchor (P + 1); d_i is the token for start + i
  std::vector<int32_t> tokens;
  std::vector<float> logits;
  std::vector<float> confidence;
};

/// ExpertStore: the backbone's (Model's), so a model that streams its experts streams the stages'
/// too: StreamedExperts of layer n_layers + s, through the model's one ExpertCache, whose slice
/// map has the stages after the backbone's layers (ExpertSliceMap). A stage has no engram.
template <class B, class ExpertStore = ResidentExperts<B>>
class DSparkHead {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;
  using Stage = Block<B, ExpertStore, ResidentTable<B>>;
  using Attn = CompressedAttnT<B>;
  /// A sequence's draft state: each stage's window ring (SequenceT::dspark_).
  using State = std::vector<typename Attn::State>;

  /// The stages' configuration: the draft's expert counts, and RoPE tables reaching the last
  /// block position a draft at the sequence's end uses (max_seq_len - 1 + B).
  static ModelConfig stage_config(const ModelConfig& c) {
    ModelConfig s = c;
    s.n_routed_experts = c.dspark_experts();
    s.n_activated_experts = c.dspark_active_experts();
    s.max_seq_len = c.max_seq_len + c.dspark_block_size;
    return s;
  }

  /// `shared...`: what the ExpertStore shares across layers (StreamedExperts: the model's cache).
  template <class... Shared>
  DSparkHead(const ModelConfig& c, const WeightSource& w, Shared&... shared)
      : S_(c.n_mtp_layers), block_(c.dspark_block_size), nt_(static_cast<int>(c.dspark_target_layer_ids.size())),
        R_(c.dspark_markov_rank), dim_(c.dim), D_(c.head_dim), V_(c.vocab_size), hc_(c.hc_mult),
        noise_(static_cast<int32_t>(c.dspark_noise_token_id)), eps_(static_cast<float>(c.norm_eps)),
        targets_(c.dspark_target_layer_ids) {
    DS41_CHECK(c.has_dspark(), "DSpark: the configuration has no draft head (n_mtp_layers ", c.n_mtp_layers,
               ", dspark_block_size ", c.dspark_block_size, ")");
    const ModelConfig sc = stage_config(c);
    for (int s = 0; s < S_; ++s) {
      const StageWeights sw(w, c.n_layers + s, s);
      stages_.push_back(std::make_unique<Stage>(sc, sw, c.n_layers + s, shared...));
    }
    // stage s's MoE predicts stage s+1's experts, as a backbone layer predicts the next one's
    // (stores that prefetch; a draft runs the stages in order)
    for (int s = 0; s + 1 < S_; ++s) stages_[s]->moe().set_next(&stages_[s + 1]->moe());
    const std::string last = "mtp." + std::to_string(S_ - 1) + ".";
    main_proj_ = load_matrix<B>(w, "mtp.0.main_proj.weight", dim_, static_cast<long>(nt_) * dim_);
    main_norm_ = upload_vector<B>(w, "mtp.0.main_norm.weight", dim_);
    norm_ = upload_vector<B>(w, last + "norm.weight", dim_);
    const HostTensor me = w.load(last + "markov_head.embed.weight", {V_, R_}).widened();
    DS41_CHECK(me.format == WeightFormat::kBF16 || me.format == WeightFormat::kF32, "weights: '", last,
               "markov_head.embed.weight' has format ", format_name(me.format), ", expected bf16 or f32");
    markov_embed_ = Matrix<B>(me, MatrixUse::kTable);
    markov_head_ = load_matrix<B>(w, last + "markov_head.head.weight", V_, R_);
    confidence_ = load_matrix<B>(w, last + "confidence_head.proj.weight", 1, static_cast<long>(dim_) + R_);
  }

  int stages() const { return S_; }
  int block_size() const { return block_; }
  /// Index of backbone layer l among the target layers (its part of main_hidden), or -1.
  int target_slot(int l) const {
    for (int j = 0; j < nt_; ++j)
      if (targets_[j] == l) return j;
    return -1;
  }
  long hidden_width() const { return static_cast<long>(nt_) * dim_; }
  Stage& stage(int s) { return *stages_.at(s); }

  State make_state() const {
    State st;
    for (const auto& s : stages_) st.push_back(s->make_state());
    return st;
  }

  /// One sequence's rows at positions start..start+T-1 (main_hidden [T, n_t·dim], backend):
  /// each stage's ring rows (a prompt keeps its last W, as the reference's seeding call).
  void absorb(const float* main_hidden, long T, long start, State& st, const Tap<B>& tap) const {
    std::vector<Buf<float>> kv = ring_rows(main_hidden, T, RowPositions<B>{start, nullptr}, tap);
    for (int s = 0; s < S_; ++s) {
      // a prompt starts from the reference's zero-initialised ring (a reset sequence's old rows
      // would show in a draft's attn_kv and in snapshots)
      if (start == 0) B::fill(st.at(s).window.data(), st.at(s).window.size(), 0.0f);
      stages_[s]->attention().write_window(st.at(s), kv[s].data(), T, start);
    }
  }
  /// The rows of a batched step, row r one token of its own sequence at pos[r] (host) with its
  /// own state: one pass of the weights over all rows, then each row into its sequence's rings.
  void absorb_rows(const float* main_hidden, const std::vector<long>& pos, const std::vector<State*>& st,
                   const RowTaps<B>& taps) const {
    const long N = static_cast<long>(pos.size());
    auto dpos = B::template alloc<long>(N);
    B::upload(dpos.data(), pos.data(), N);
    std::vector<Buf<float>> kv = ring_rows(main_hidden, N, RowPositions<B>{0, dpos.data()}, taps);
    for (int s = 0; s < S_; ++s)
      for (long r = 0; r < N; ++r)
        stages_[s]->attention().write_window(st[r]->at(s), kv[s].data() + r * D_, 1, pos[r]);
  }

  /// One draft call at position P (the sequence's last; its ring rows written): the block
  /// [anchor, noise, …] at positions P+1..P+B through every stage, then the head (M:1130-1156).
  DraftResult draft(const State& st, int32_t anchor, long P, const MatrixView& embed, const MatrixView& head,
                    const Tap<B>& tap, const DraftPick& pick = {}) {
    const long T = block_, dim = dim_, V = V_, R = R_;
    const int hc = hc_;
    DraftResult out;
    out.start = P + 1;
    std::vector<int32_t> ids(T, noise_);
    ids[0] = anchor;
    tap.i32_host("block_ids", ids, {T});
    auto d_ids = B::template alloc<int32_t>(T);
    B::upload(d_ids.data(), ids.data(), T);
    auto x = B::template alloc<float>(static_cast<size_t>(T) * dim);
    table_rows<B>(embed, d_ids.data(), T, dim_, x.data());
    tap.f32("embed", x.data(), {T, dim});
    auto h = B::template alloc<float>(static_cast<size_t>(T) * hc * dim);
    HighwayT<B>::expand_copies(x.data(), T, hc, dim_, h.data());
    auto pre = B::template alloc<float>(static_cast<size_t>(T) * hc);
    HighwayT<B>::identity_pre(T, hc, pre.data());

    for (int s = 0; s < S_; ++s) {
      const Tap<B> stap = tap.sub("mtp." + std::to_string(s) + ".");
      const Attn& attn = stages_[s]->attention();
      const typename Attn::State& ring = st.at(s);
      stages_[s]->forward_with(h.data(), pre.data(), T, stap, [&](const float* xin, float* y) {
        typename Attn::Projection p = attn.project(xin, T, RowPositions<B>{P + 1, nullptr}, stap, "block_kv");
        auto o = B::template alloc<float>(static_cast<size_t>(T) * attn_width());
        attn.attend_block(p, T, P + 1, ring, stap, s == 0 ? tap : Tap<B>{}, o.data());
        attn.output(o.data(), T, stap, y);
      });
    }

    // the head: the last stage's collapse with its FFN pre, its own norm, the shared LM head on
    // every position (full_logits)
    HighwayT<B>::collapse(h.data(), pre.data(), T, hc, dim_, x.data());
    tap.f32("h_final", x.data(), {T, dim});
    auto xn = B::template alloc<float>(static_cast<size_t>(T) * dim);
    B::copy(xn.data(), x.data(), static_cast<size_t>(T) * dim);
    Ops<B>::rmsnorm(xn.data(), T, dim_, norm_.data(), eps_);
    tap.f32("head_in", xn.data(), {T, dim});
    auto logits = B::template alloc<float>(static_cast<size_t>(T) * V);
    B::linear(xn.data(), T, dim, head, logits.data(), V, OutRound::kF32);
    tap.f32("head_logits", logits.data(), {T, V}, CapType::kF32);

    // Markov bias, position by position: row i's bias comes from token i, which row i-1's argmax
    // (after its bias) decided; the bias is added in place before the argmax (M:1146-1153)
    auto me = B::template alloc<float>(static_cast<size_t>(T) * R);
    auto bias = B::template alloc<float>(static_cast<size_t>(T) * V);
    out.tokens.assign(T + 1, 0);
    out.tokens[0] = anchor;
    out.logits.resize(static_cast<size_t>(T) * V);
    for (long i = 0; i < T; ++i) {
      table_rows<B>(markov_embed_.view(), d_ids.data() + i, 1, R_, me.data() + i * R);
      B::linear(me.data() + i * R, 1, R, markov_head_.view(), bias.data() + i * V, V, OutRound::kF32);
      float* lg = logits.data() + i * V;
      const float* bs = bias.data() + i * V;
      B::for_each(V, [=] DS41_LAMBDA(long v) { lg[v] = lg[v] + bs[v]; });
      float* row = out.logits.data() + i * V;
      B::download(row, lg, V);
      const int32_t best = pick ? pick(std::span<const float>(row, static_cast<size_t>(V))) : first_argmax(row, V);
      DS41_CHECK(best >= 0 && best < V, "DSpark: the draft's token choice ", best, " is outside the vocabulary");
      out.tokens[i + 1] = best;
      if (i + 1 < T) B::upload(d_ids.data() + i + 1, &best, 1);  // the next row's Markov token
    }
    tap.f32("markov_embed", me.data(), {T, R});
    tap.f32("markov_bias", bias.data(), {T, V}, CapType::kF32);
    tap.f32("logits", logits.data(), {T, V}, CapType::kF32);

    // confidence: proj · f32(cat(pre-norm x, Markov embedding)), no sigmoid (M:1154-1155, 1095-1097)
    const long wide = dim + R;
    auto cat = B::template alloc<float>(static_cast<size_t>(T) * wide);
    const float *px = x.data(), *pm = me.data();
    float* pc = cat.data();
    B::for_each(T * wide, [=] DS41_LAMBDA(long e) {
      const long t = e / wide, k = e % wide;
      pc[e] = k < dim ? px[t * dim + k] : pm[t * R + (k - dim)];
    });
    auto conf = B::template alloc<float>(T);
    B::linear(cat.data(), T, wide, confidence_.view(), conf.data(), 1, OutRound::kF32);
    tap.f32("confidence", conf.data(), {T}, CapType::kF32);
    out.confidence.resize(T);
    B::download(out.confidence.data(), conf.data(), T);
    tap.i32_host("draft_tokens", out.tokens, {T + 1});
    return out;
  }

 private:
  long attn_width() const { return static_cast<long>(stages_[0]->attention().heads()) * D_; }

  /// main_x of the rows and each stage's ring rows of them (M:1130, 1039-1042).
  template <class TapT>
  std::vector<Buf<float>> ring_rows(const float* main_hidden, long T, const RowPositions<B>& pos,
                                    const TapT& tap) const {
    tap.f32("main_hidden", main_hidden, {T, hidden_width()});
    auto mx = B::template alloc<float>(static_cast<size_t>(T) * dim_);
    B::linear(main_hidden, T, hidden_width(), main_proj_.view(), mx.data(), dim_, OutRound::kBF16);
    Ops<B>::rmsnorm(mx.data(), T, dim_, main_norm_.data(), eps_);
    tap.f32("main_x", mx.data(), {T, dim_});
    std::vector<Buf<float>> kv;
    for (int s = 0; s < S_; ++s)
      kv.push_back(stages_[s]->attention().window_kv(mx.data(), T, pos, tap.sub("mtp." + std::to_string(s) + ".")));
    return kv;
  }

  int S_ = 0, block_ = 0, nt_ = 0, R_ = 0, dim_ = 0, D_ = 0;
  long V_ = 0;
  int hc_ = 1;
  int32_t noise_ = 0;
  float eps_ = 0;
  std::vector<int> targets_;
  std::vector<std::unique_ptr<Stage>> stages_;
  Matrix<B> main_proj_, markov_embed_, markov_head_, confidence_;
  Buf<float> main_norm_, norm_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
