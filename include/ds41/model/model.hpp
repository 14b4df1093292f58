// ds41/model/model.hpp — Model: embed → hc copies → [engram] + Block per layer → final collapse
// with the last FFN pre → RMSNorm → head (logits of the last position), run on a sequence's state
// (sequence.hpp: window rings, compressor groups, caches, shared slots, engram history).
//
// Sequences are the caller's: make_sequence() makes any number, extend() continues one (a prompt
// on an empty sequence, else exactly what one decode step per token gives), step() takes a batch
// of segments of different sequences, snapshot()/restore() save and load one; checkpoint /
// rollback / truncate live on the sequence. prefill/decode/release drive one sequence the model
// keeps itself, as before.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include "block.hpp"
#include "chunk_plan.hpp"
#include "dspark.hpp"
#include "sequence.hpp"
#include "sequence_bytes.hpp"
#include "../core/fp_exact.hpp"
#include "../backend/concept.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

struct StepResult {
  std::vector<float> logits;  // [vocab] for the last position of the step
  int32_t argmax = -1;
};

template <class B, class ExpertStore = ResidentExperts<B>, class Table = ResidentTable<B>>
class Model {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;
  using BlockT = Block<B, ExpertStore, Table>;

  /// `shared...`: what the ExpertStore shares across layers, e.g. a StreamedExperts<B>::Cache
  /// (none for ResidentExperts).
  template <class... Shared>
  Model(const ModelConfig& c, const WeightSource& w, Shared&... shared) : cfg_(c) {
    require_exact_host_fp("Model");  // the consumer's flags must not change ds41's bits
    if constexpr (ExactNumericsProbe<B>) B::require_exact_numerics();  // the device's
    cfg_.validate();
    const HostTensor emb = w.load("embed.weight", {c.vocab_size, c.dim});
    DS41_CHECK(emb.format == WeightFormat::kBF16 || emb.format == WeightFormat::kF32, "weights: 'embed.weight' has format ",
               format_name(emb.format), ", expected bf16 or f32");
    embed_ = Matrix<B>(emb, MatrixUse::kTable);  // embed_rows reads its rows directly
    for (int l = 0; l < c.n_layers; ++l) layers_.push_back(std::make_unique<BlockT>(c, w, l, shared...));
    // layer l's MoE predicts layer l+1's experts (used by stores that prefetch)
    for (int l = 0; l + 1 < c.n_layers; ++l) layers_[l]->moe().set_next(&layers_[l + 1]->moe());
    norm_ = upload_vector<B>(w, "norm.weight", c.dim);
    head_ = load_matrix<B>(w, "head.weight", c.vocab_size, c.dim);
    // the draft head where the configuration has one and the weights carry it (a file without
    // mtp.* serves the backbone alone; draft() then says why it cannot)
    if (c.has_dspark() && w.has("mtp.0.main_proj.weight")) dspark_ = std::make_unique<DSparkHead<B>>(c, w);
  }

  const ModelConfig& config() const { return cfg_; }
  BlockT& layer(int l) { return *layers_.at(l); }

  using Sequence = SequenceT<B>;
  /// A new, empty sequence of this model. Any number may be alive at once; each frees everything it
  /// holds when destroyed.
  Sequence make_sequence() const {
    Sequence s;
    s.owner_ = this;
    s.hasher_ = EngramHasher(cfg_);
    for (const auto& l : layers_) s.layers_.push_back(l->make_state());
    if (dspark_) s.dspark_ = dspark_->make_state();
    return s;
  }

  /// Whether the model has DSpark's draft head (draft() works).
  bool has_draft_head() const { return dspark_ != nullptr; }
  DSparkHead<B>& draft_head() {
    DS41_CHECK(dspark_, "DSpark: this model has no draft head (",
               cfg_.has_dspark() ? "the weights carry no mtp.* tensors" : "its configuration has no DSpark stages",
               ")");
    return *dspark_;
  }

  /// DSpark's draft at the end of `s` (forward_spec, M:1270-1282): `anchor` is the token for the
  /// next position (the target's own prediction there); returns [anchor, d1..dB] with the draft
  /// logits and confidences. Changes nothing in `s`: its rings already hold every position.
  /// `pick`: how each draft token is chosen from its logits row (default argmax, the reference's
  /// temperature 0).
  DraftResult draft(const Sequence& s, int32_t anchor, CaptureSink* sink = nullptr, const DraftPick& pick = {}) {
    DSparkHead<B>& head = draft_head();
    DS41_CHECK(s.owner_ == this, "draft: the sequence was not made by this model (use model.make_sequence())");
    DS41_CHECK(!s.broken_, "draft: the sequence's last step failed half-way; reset() it",
               s.undo_ ? " or rollback() to its checkpoint" : "");
    DS41_CHECK(s.pos_ > 0, "draft: the sequence is empty (a draft continues a sequence: extend it with a prompt first)");
    DS41_CHECK(anchor >= 0 && anchor < cfg_.vocab_size, "draft: anchor token ", anchor, " is out of range [0, ",
               cfg_.vocab_size, ")");
    return head.draft(s.dspark_, anchor, s.pos_ - 1, embed_.view(), head_.view(), Tap<B>{sink, "dspark."}, pick);
  }

  /// Extend `s` by `tokens`: on an empty sequence they are its prompt (the reference's prefill);
  /// later they continue it and give exactly what one decode step per token gives (the
  /// reference's only definition of positions after the prompt). Returns the last row's logits.
  StepResult extend(Sequence& s, const std::vector<int32_t>& tokens, CaptureSink* sink = nullptr) {
    check_segment(s, tokens, "extend");
    if (s.pos_ == 0) return run_guarded(s, tokens, sink);
    std::vector<Segment> one(1);
    one[0].seq = &s;
    one[0].tokens = tokens;
    const long last = static_cast<long>(tokens.size()) - 1;
    one[0].sinks = [sink, last](long row) { return row == last ? sink : nullptr; };
    return std::move(step(one).at(0).at(0));
  }
  /// The sink for a row of a segment (row i of its tokens), or null; a prompt is one row here,
  /// its last: a prefill's captures hold all its positions at once.
  using RowSinks = std::function<CaptureSink*(long row)>;
  /// extend() returning every row's logits (what verifying a speculative draft needs): for a
  /// prompt, the head on each of its positions; for a continuation, each decode step's.
  std::vector<StepResult> extend_rows(Sequence& s, const std::vector<int32_t>& tokens, const RowSinks& sinks = {}) {
    check_segment(s, tokens, "extend_rows");
    if (s.pos_ == 0) return run_guarded_rows(s, tokens, sinks ? sinks(static_cast<long>(tokens.size()) - 1) : nullptr);
    std::vector<Segment> one(1);
    one[0].seq = &s;
    one[0].tokens = tokens;
    one[0].all_logits = true;
    one[0].sinks = sinks;
    return std::move(step(one).at(0));
  }

  /// One segment of a batched step: a sequence and the tokens that continue it (a new sequence's
  /// first segment is its prompt).
  struct Segment {
    Sequence* seq = nullptr;
    std::vector<int32_t> tokens;
    bool all_logits = false;  // every row's logits, else the last row's
    RowSinks sinks;
  };
  /// One step over a ragged batch: each segment continues its own sequence, with the bits it
  /// would give alone. Every segment is checked before any work: a bad one (a sequence of another
  /// model or broken, the same sequence twice, a token out of range, past max_seq_len) is refused
  /// and no sequence changes. Returns, per segment, its rows' logits (all or the last).
  ///
  /// How it runs: a prompt (a segment on an empty sequence) is the reference's prefill, one pass
  /// of its own. The continuations run as batched decode steps (waves): every weight pass,
  /// experts grouped by expert, runs once over the wave's rows; the window, compressor, indexer
  /// and attention per row, a sequence's rows in order. Each continuation is cut into runs of
  /// consecutive tokens (ChunkPlan) that give, layer by layer, what one decode step per token
  /// gives; wave w takes run w of every segment. A chunk is one run unless a compressed group a
  /// later layer completes on one row would be read by an earlier layer on a later row (the
  /// reference's stale index keys), and the like (chunk_plan.hpp).
  std::vector<std::vector<StepResult>> step(std::vector<Segment>& batch) {
    for (size_t i = 0; i < batch.size(); ++i) {
      DS41_CHECK(batch[i].seq != nullptr, "step: segment ", i, " has no sequence");
      check_segment(*batch[i].seq, batch[i].tokens, "step");
      for (size_t j = 0; j < i; ++j)
        DS41_CHECK(batch[j].seq != batch[i].seq, "step: segments ", j, " and ", i,
                   " continue the same sequence (one segment per sequence in a step)");
    }
    std::vector<std::vector<StepResult>> out(batch.size());
    std::vector<size_t> decoding;
    std::vector<std::vector<long>> runs(batch.size());
    size_t waves = 0;
    const ChunkPlan plan(cfg_);
    for (size_t i = 0; i < batch.size(); ++i) {
      Segment& g = batch[i];
      if (g.seq->pos_ == 0) {
        if (g.all_logits) out[i] = extend_rows(*g.seq, g.tokens, g.sinks);
        else out[i].push_back(extend(*g.seq, g.tokens, g.sinks ? g.sinks(static_cast<long>(g.tokens.size()) - 1) : nullptr));
      } else {
        decoding.push_back(i);
        runs[i] = plan.split(g.seq->pos_, static_cast<long>(g.tokens.size()), entering(*g.seq), kMaxRunRows);
        waves = std::max(waves, runs[i].size());
      }
    }
    std::vector<long> done(batch.size(), 0);  // tokens of each segment run so far
    for (size_t w = 0; w < waves; ++w) {
      std::vector<Row> rows;
      std::vector<std::pair<size_t, long>> of;  // (segment, its row) of each row
      for (size_t i : decoding) {
        if (w >= runs[i].size()) continue;
        Segment& g = batch[i];
        const long n = static_cast<long>(g.tokens.size());
        for (long t = done[i]; t < done[i] + runs[i][w]; ++t) {
          const bool keep = g.all_logits || t + 1 == n;
          rows.push_back({g.seq, g.tokens[t], g.sinks && keep ? g.sinks(t) : nullptr, keep});
          of.push_back({i, t});
        }
        done[i] += runs[i][w];
      }
      std::vector<StepResult> r = run_rows(rows);
      for (size_t j = 0; j < rows.size(); ++j)
        if (rows[j].logits) out[of[j].first].push_back(std::move(r[j]));
    }
    return out;
  }

  /// The whole state of `s` as bytes (sequence_bytes.hpp); restore() makes a sequence of them
  /// that continues with the same bits. An open checkpoint is not part of it.
  std::vector<uint8_t> snapshot(const Sequence& s) const {
    DS41_CHECK(s.owner_ == this, "snapshot: the sequence was not made by this model");
    DS41_CHECK(!s.broken_, "snapshot: the sequence's last step failed half-way");
    return SequenceBytes<B>::write(cfg_, s);
  }
  Sequence restore(const std::vector<uint8_t>& bytes) const {
    Sequence s = make_sequence();
    SequenceBytes<B>::read(cfg_, s, bytes.data(), bytes.size());
    return s;
  }

  // ---------------------------------------------------------------- one sequence, as before
  /// Next position of the model's own sequence (0 when none).
  long position() const { return seq_ ? seq_->pos_ : 0; }
  bool active() const { return seq_ != nullptr; }

  /// Start the model's own sequence with its prompt (positions 0..T-1).
  StepResult prefill(const std::vector<int32_t>& tokens, CaptureSink* sink = nullptr) {
    DS41_CHECK(!seq_, "prefill: a sequence is already in flight on this runtime (it serves one); call release() first");
    DS41_CHECK(!tokens.empty(), "prefill: empty prompt");
    check_tokens(tokens, 0);
    B::release_graphs();  // graphs kept from the previous sequence are not reused across sequences
    seq_ = std::make_unique<Sequence>(make_sequence());
    try {
      return run(*seq_, tokens, sink);
    } catch (...) {
      seq_.reset();  // a failed prefill leaves no half-started sequence behind
      throw;
    }
  }

  /// One token at the next position of the model's own sequence.
  StepResult decode(int32_t token, CaptureSink* sink = nullptr) {
    DS41_CHECK(seq_, "decode: no sequence in flight (decode before prefill, or after release)");
    std::vector<int32_t> t{token};
    check_tokens(t, seq_->pos_);
    try {
      return run(*seq_, t, sink);
    } catch (...) {
      seq_.reset();  // inputs were checked first; a failure inside leaves a state nobody may reuse
      throw;
    }
  }

  /// Free everything the model's own sequence holds.
  void release() {
    B::release_graphs();  // captured graphs first: they reference the sequence's buffers
    seq_.reset();
  }

  /// Rows of the embedding table for token ids (on the backend): out[t, :] = E[ids[t], :].
  static void embed_rows(const MatrixView ev, const int32_t* ids, long T, int dim, float* out) {
    table_rows<B>(ev, ids, T, dim, out);
  }

 private:
  void check_segment(const Sequence& s, const std::vector<int32_t>& tokens, const char* what) const {
    DS41_CHECK(s.owner_ == this, what, ": the sequence was not made by this model (use model.make_sequence())");
    DS41_CHECK(!s.broken_, what, ": the sequence's last step failed half-way; reset() it",
               s.undo_ ? " or rollback() to its checkpoint" : "");
    DS41_CHECK(!tokens.empty(), what, ": no tokens");
    check_tokens(tokens, s.pos_);
  }

  /// run() on a caller's sequence: a failure half-way marks it broken (its state is then partly
  /// written), so nothing silently continues from it.
  StepResult run_guarded(Sequence& s, const std::vector<int32_t>& tokens, CaptureSink* sink) {
    try {
      return run(s, tokens, sink);
    } catch (...) {
      s.broken_ = true;
      throw;
    }
  }
  std::vector<StepResult> run_guarded_rows(Sequence& s, const std::vector<int32_t>& tokens, CaptureSink* sink) {
    try {
      std::vector<StepResult> rows;
      run(s, tokens, sink, &rows);
      return rows;
    } catch (...) {
      s.broken_ = true;
      throw;
    }
  }

  void check_tokens(const std::vector<int32_t>& tokens, long start) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      DS41_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "token id ", tokens[i], " at index ", i,
                 " is out of range [0, ", cfg_.vocab_size, ")");
    DS41_CHECK(start + static_cast<long>(tokens.size()) <= cfg_.max_seq_len, "sequence too long: positions ", start,
               "..", start + static_cast<long>(tokens.size()) - 1, " exceed max_seq_len ", cfg_.max_seq_len);
  }

  /// Rows a continuation's run may hold at once: bounds a wave's activations (a long chunk at a
  /// position > 0 runs as several waves).
  static constexpr long kMaxRunRows = 256;

  /// One row of a batched decode step: the next token of `seq` (a sequence's rows come together,
  /// in order); `logits`: whether the head runs on it.
  struct Row {
    Sequence* seq = nullptr;
    int32_t token = 0;
    CaptureSink* sink = nullptr;
    bool logits = true;
  };

  /// The publishers the sequence's shared slots hold now (ChunkPlan's view of them).
  static ChunkPlan::Entering entering(const Sequence& s) { return {s.shared_.compress_kv_layer, s.shared_.index_k_layer}; }
  /// Slots pointing where row `e` finds them: the caches of the layers that published last.
  void point_slots(Sequence& s, ChunkPlan::Entering e, SharedSlots<B>& slots) const {
    if (e.kv >= 0) {
      slots.compress_kv = s.layers_[e.kv].compressed.data();
      slots.compress_kv_layer = e.kv;
      slots.compress_kv_rows = cfg_.max_seq_len / cfg_.ratio(e.kv);
    }
    if (e.keys >= 0) {
      slots.index_k = s.layers_[e.keys].index.keys.data();
      slots.index_k_layer = e.keys;
      slots.index_k_rows = cfg_.max_seq_len / cfg_.ratio(e.keys);
    }
  }

  /// One batched decode step (see Row). A failure marks every sequence of the step broken.
  std::vector<StepResult> run_rows(const std::vector<Row>& rows) {
    if (rows.size() == 1) {
      StepResult r = run_guarded(*rows[0].seq, {rows[0].token}, rows[0].sink);
      return {r};
    }
    try {
      return run_rows_unguarded(rows);
    } catch (...) {
      for (const Row& r : rows) r.seq->broken_ = true;
      throw;
    }
  }
  std::vector<StepResult> run_rows_unguarded(const std::vector<Row>& in) {
    const long N = static_cast<long>(in.size());
    const int hc = cfg_.hc_mult, dim = cfg_.dim;
    RowTaps<B> taps;
    std::vector<long> pos(N);
    // A sequence's first row works on its own shared slots; its later rows on slots of their
    // own, pointing where that row finds the published caches (ChunkPlan); the last row's become
    // the sequence's afterwards.
    std::vector<SharedSlots<B>> own(N);
    std::vector<SharedSlots<B>*> slots(N);
    const ChunkPlan plan(cfg_);
    ChunkPlan::Entering found;  // the publishers the current row finds
    for (long r = 0; r < N; ++r) {
      Sequence& s = *in[r].seq;
      const bool first = r == 0 || in[r - 1].seq != &s;
      DS41_CHECK(s.pos_ > 0, "internal: a batched step continues sequences");
      pos[r] = first ? s.pos_ : pos[r - 1] + 1;
      if (first) {
        found = entering(s);
        slots[r] = &s.shared_;
        if (s.undo_) s.undo_->save_shared(s.pos_, s.shared_);
        for (auto& l : s.layers_) l.undo = s.undo_.get();
        for (auto& l : s.dspark_) l.undo = s.undo_.get();
      } else {
        found = plan.after(pos[r - 1], found);
        point_slots(s, found, own[r]);
        slots[r] = &own[r];
      }
      taps.rows.push_back(Tap<B>{in[r].sink, ""});
      taps.rows[r].i32_host("tokens", {in[r].token}, {1});
    }

    Buf<int32_t> hash;
    if (cfg_.n_engram_layers()) {
      std::vector<int32_t> all;
      for (long r = 0; r < N; ++r) {
        std::vector<int32_t> hh = in[r].seq->hasher_.hash(&in[r].token, 1, pos[r]);
        taps.rows[r].i32_host("engram_hash", hh, {1, cfg_.n_engram_layers(), cfg_.engram_cols()});
        all.insert(all.end(), hh.begin(), hh.end());
      }
      hash = B::template alloc<int32_t>(all.size());
      B::upload(hash.data(), all.data(), all.size());
    }

    std::vector<int32_t> toks(N);
    for (long r = 0; r < N; ++r) toks[r] = in[r].token;
    auto ids = B::template alloc<int32_t>(N);
    B::upload(ids.data(), toks.data(), N);
    auto x = B::template alloc<float>(static_cast<size_t>(N) * dim);
    embed_rows(embed_.view(), ids.data(), N, dim, x.data());
    taps.f32("embed", x.data(), {N, dim});
    auto h = B::template alloc<float>(static_cast<size_t>(N) * hc * dim);
    HighwayT<B>::expand_copies(x.data(), N, hc, dim, h.data());
    auto pre = B::template alloc<float>(static_cast<size_t>(N) * hc);
    HighwayT<B>::identity_pre(N, hc, pre.data());

    Buf<float> main_hidden = alloc_main_hidden(N);
    std::vector<typename BlockT::Attn::Row> rows(N);
    for (int l = 0; l < cfg_.n_layers; ++l) {
      const std::string prefix = "layers." + std::to_string(l) + ".";
      for (long r = 0; r < N; ++r) rows[r] = {pos[r], &in[r].seq->layers_[l], slots[r], taps.rows[r].sub(prefix)};
      layers_[l]->forward_rows(h.data(), pre.data(), hash.data(), rows, taps.sub(prefix), main_hidden_part(main_hidden, l),
                               main_hidden_stride());
    }
    if (dspark_) {
      std::vector<typename DSparkHead<B>::State*> st(N);
      for (long r = 0; r < N; ++r) st[r] = &in[r].seq->dspark_;
      dspark_->absorb_rows(main_hidden.data(), pos, st, taps.sub("dspark."));
    }

    HighwayT<B>::collapse(h.data(), pre.data(), N, hc, dim, x.data());
    taps.f32("h_final", x.data(), {N, dim});
    Ops<B>::rmsnorm(x.data(), N, dim, norm_.data(), static_cast<float>(cfg_.norm_eps));
    taps.f32("head_in", x.data(), {N, dim});
    // the head on the rows whose logits are wanted only (a chunk's inner rows need none)
    std::vector<long> want;
    for (long r = 0; r < N; ++r)
      if (in[r].logits) want.push_back(r);
    const long V = cfg_.vocab_size, M = static_cast<long>(want.size());
    std::vector<StepResult> out(N);
    if (M) {
      auto xs = B::template alloc<float>(static_cast<size_t>(M) * dim);
      for (long m = 0; m < M; ++m) B::copy(xs.data() + m * dim, x.data() + want[m] * dim, dim);
      auto logits = B::template alloc<float>(static_cast<size_t>(M) * V);
      B::linear(xs.data(), M, dim, head_.view(), logits.data(), V, OutRound::kF32);
      for (long m = 0; m < M; ++m) taps.rows[want[m]].f32("logits", logits.data() + m * V, {V}, CapType::kF32);
      std::vector<float> all(static_cast<size_t>(M) * V);
      B::download(all.data(), logits.data(), all.size());
      for (long m = 0; m < M; ++m) out[want[m]] = logits_row(all.data() + m * V, V);
    }
    // a sequence's later rows: the undo record keeps the slots each found (the row before's),
    // in order; then the last row's slots are the sequence's
    for (long r = 0; r < N; ++r) {
      Sequence& s = *in[r].seq;
      const bool last = r + 1 == N || in[r + 1].seq != &s;
      if (!last) {
        if (s.undo_) s.undo_->save_shared(pos[r + 1], *slots[r]);
        continue;
      }
      if (slots[r] != &s.shared_) s.shared_ = std::move(*slots[r]);
      s.pos_ = pos[r] + 1;
    }
    return out;
  }

  /// DSpark's main_hidden of a step's rows [T, n_t·dim] (none without a draft head), and where
  /// layer l writes its part (null unless l is a target layer).
  Buf<float> alloc_main_hidden(long T) const {
    return dspark_ ? B::template alloc<float>(static_cast<size_t>(T) * dspark_->hidden_width()) : Buf<float>{};
  }
  float* main_hidden_part(Buf<float>& mh, int l) const {
    const int j = dspark_ ? dspark_->target_slot(l) : -1;
    return j < 0 ? nullptr : mh.data() + static_cast<long>(j) * cfg_.dim;
  }
  long main_hidden_stride() const { return dspark_ ? dspark_->hidden_width() : 0; }

  static StepResult logits_row(const float* row, long V) {
    StepResult r;
    r.logits.assign(row, row + V);
    r.argmax = 0;
    for (long v = 1; v < V; ++v)
      if (r.logits[v] > r.logits[r.argmax]) r.argmax = static_cast<int32_t>(v);
    return r;
  }

  /// One step of the reference on `s`: a prefill of every token at position 0, else one decode
  /// step of one token. `rows` (prefill only): every position's logits, not just the last's.
  StepResult run(Sequence& s, const std::vector<int32_t>& tokens, CaptureSink* sink,
                 std::vector<StepResult>* rows = nullptr) {
    Tap<B> tap{sink, ""};
    const long T = static_cast<long>(tokens.size()), start = s.pos_;
    DS41_CHECK(start == 0 || T == 1, "internal: a step past the prompt takes one token");
    const int hc = cfg_.hc_mult, dim = cfg_.dim;
    if (start == 0) s.shared_.reset();  // layer 0 at position 0: a new sequence
    if (s.undo_) s.undo_->save_shared(start, s.shared_);
    for (auto& l : s.layers_) l.undo = s.undo_.get();
    for (auto& l : s.dspark_) l.undo = s.undo_.get();
    tap.i32_host("tokens", tokens, {T});

    Buf<int32_t> hash;
    if (cfg_.n_engram_layers()) {
      std::vector<int32_t> hh = s.hasher_.hash(tokens.data(), T, start);
      tap.i32_host("engram_hash", hh, {T, cfg_.n_engram_layers(), cfg_.engram_cols()});
      hash = B::template alloc<int32_t>(hh.size());
      B::upload(hash.data(), hh.data(), hh.size());
    }

    auto ids = B::template alloc<int32_t>(T);
    B::upload(ids.data(), tokens.data(), T);
    auto x = B::template alloc<float>(static_cast<size_t>(T) * dim);
    embed_rows(embed_.view(), ids.data(), T, dim, x.data());
    tap.f32("embed", x.data(), {T, dim});
    auto h = B::template alloc<float>(static_cast<size_t>(T) * hc * dim);
    HighwayT<B>::expand_copies(x.data(), T, hc, dim, h.data());
    auto pre = B::template alloc<float>(static_cast<size_t>(T) * hc);
    HighwayT<B>::identity_pre(T, hc, pre.data());

    Buf<float> main_hidden = alloc_main_hidden(T);
    for (int l = 0; l < cfg_.n_layers; ++l)
      layers_[l]->forward(h.data(), pre.data(), hash.data(), T, start, s.layers_[l], s.shared_,
                          tap.sub("layers." + std::to_string(l) + "."), main_hidden_part(main_hidden, l),
                          main_hidden_stride());
    if (dspark_) dspark_->absorb(main_hidden.data(), T, start, s.dspark_, tap.sub("dspark."));

    // final collapse with the last FFN pre, norm, head on the last position
    HighwayT<B>::collapse(h.data(), pre.data(), T, hc, dim, x.data());
    tap.f32("h_final", x.data(), {T, dim});
    Ops<B>::rmsnorm(x.data(), T, dim, norm_.data(), static_cast<float>(cfg_.norm_eps));
    tap.f32("head_in", x.data(), {T, dim});
    const long V = cfg_.vocab_size, n_out = rows ? T : 1;
    auto logits = B::template alloc<float>(static_cast<size_t>(n_out) * V);
    B::linear(x.data() + (T - n_out) * dim, n_out, dim, head_.view(), logits.data(), V, OutRound::kF32);
    tap.f32("logits", logits.data() + (n_out - 1) * V, {V}, CapType::kF32);

    std::vector<float> all(static_cast<size_t>(n_out) * V);
    B::download(all.data(), logits.data(), all.size());
    auto result = [&](long row) { return logits_row(all.data() + row * V, V); };
    s.pos_ = start + T;
    if (start == 0) s.prompt_len_ = T;
    if (rows)
      for (long t = 0; t < T; ++t) rows->push_back(result(t));
    return result(n_out - 1);
  }

  /// Declared first, destroyed last: once every buffer of the model is back with the backend,
  /// the memory it keeps for reuse goes back to the system (MemoryCache, backend/concept.hpp).
  struct TrimOnDestroy {
    ~TrimOnDestroy() {
      if constexpr (MemoryCache<B>) {
        try {
          B::trim_memory();
        } catch (...) {  // a destructor cannot report (a device already in error); the memory stays kept
        }
      }
    }
  } trim_on_destroy_;
  ModelConfig cfg_;
  Matrix<B> embed_, head_;
  Buf<float> norm_;
  std::vector<std::unique_ptr<BlockT>> layers_;
  std::unique_ptr<DSparkHead<B>> dspark_;  // DSpark's draft head, where the model has one
  std::unique_ptr<Sequence> seq_;  // the one prefill/decode/release serve
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
