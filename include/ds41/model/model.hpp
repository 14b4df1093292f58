// ds41/model/model.hpp — Model: embed → hc copies → [engram] + Block per layer → final collapse
// with the last FFN pre → RMSNorm → head (logits of the last position), run on a sequence's state
// (sequence.hpp: window rings, compressor groups, caches, shared slots, engram history).
//
// Sequences are the caller's: make_sequence() makes any number, extend() continues one (a prompt
// on an empty sequence, else exactly what one decode step per token gives), step() takes a batch
// of segments of different sequences, snapshot()/restore() save and load one; checkpoint /
// rollback / truncate live on the sequence. One engine: every call is a step() (a plan checked
// up front, then passes through one pipeline); prefill/decode/release (own_sequence.hpp) drive
// one sequence the model keeps itself.
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
#include "own_sequence.hpp"
#include "sequence.hpp"
#include "sequence_bytes.hpp"
#include "../core/fp_exact.hpp"
#include "../backend/concept.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B, class ExpertStore = ResidentExperts<B>, class Table = ResidentTable<B>>
class Model : public OwnSequence<Model<B, ExpertStore, Table>, SequenceT<B>, B> {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;
  using BlockT = Block<B, ExpertStore, Table>;

  /// `shared...`: what the ExpertStore shares across layers, e.g. a StreamedExperts<B>::Cache
  /// (none for ResidentExperts).
  template <class... Shared>
  Model(const ModelConfig& c, const WeightSource& w, Shared&... shared);

  const ModelConfig& config() const { return cfg_; }
  BlockT& layer(int l) { return *layers_.at(l); }

  using Sequence = SequenceT<B>;
  /// A new, empty sequence of this model. Any number may be alive at once; each frees everything it
  /// holds when destroyed.
  Sequence make_sequence() const;

  /// Whether the model has DSpark's draft head (draft() works).
  bool has_draft_head() const { return dspark_ != nullptr; }
  DSparkHead<B, ExpertStore>& draft_head() {
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
  DraftResult draft(const Sequence& s, int32_t anchor, CaptureSink* sink = nullptr, const DraftPick& pick = {});

  /// Extend `s` by `tokens`: on an empty sequence they are its prompt (the reference's prefill);
  /// later they continue it and give exactly what one decode step per token gives (the
  /// reference's only definition of positions after the prompt). Returns the last row's logits.
  StepResult extend(Sequence& s, const std::vector<int32_t>& tokens, CaptureSink* sink = nullptr) {
    std::vector<Segment> one(1);
    one[0].seq = &s;
    one[0].tokens = tokens;
    const long last = static_cast<long>(tokens.size()) - 1;
    if (sink) one[0].sinks = [sink, last](long row) { return row == last ? sink : nullptr; };
    return std::move(run_step(one, "extend").at(0).back());
  }
  /// The sink for a row of a segment (row i of its tokens), or null; a prompt is one row here,
  /// its last: a prefill's captures hold all its positions at once.
  using RowSinks = std::function<CaptureSink*(long row)>;
  /// extend() returning every row's logits (what verifying a speculative draft needs): for a
  /// prompt, the head on each of its positions; for a continuation, each decode step's.
  std::vector<StepResult> extend_rows(Sequence& s, const std::vector<int32_t>& tokens, const RowSinks& sinks = {}) {
    std::vector<Segment> one(1);
    one[0].seq = &s;
    one[0].tokens = tokens;
    one[0].all_logits = true;
    one[0].sinks = sinks;
    return std::move(run_step(one, "extend_rows").at(0));
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
  /// would give alone. Every segment is checked before any work (the step's plan): a bad one (a
  /// sequence of another model or broken, the same sequence twice, no tokens, a token out of
  /// range, past max_seq_len) is refused and no sequence changes. Returns, per segment, its
  /// rows' logits (all or the last). extend(), extend_rows(), prefill() and decode() are this
  /// call on one segment: the model has one engine.
  ///
  /// How it runs: the rows of a step go through one pipeline (pass()). A prompt (a segment on
  /// an empty sequence) is the reference's prefill: a pass of its own, its rows one tensor. The
  /// continuations run as batched decode steps (waves): every weight pass,
  /// experts grouped by expert, runs once over the wave's rows; the window, compressor, indexer
  /// and attention per row, a sequence's rows in order. Each continuation is cut into runs of
  /// consecutive tokens (ChunkPlan) that give, layer by layer, what one decode step per token
  /// gives; wave w takes run w of every segment. A chunk is one run unless a compressed group a
  /// later layer completes on one row would be read by an earlier layer on a later row (the
  /// reference's stale index keys), and the like (chunk_plan.hpp).
  std::vector<std::vector<StepResult>> step(std::vector<Segment>& batch) { return run_step(batch, "step"); }

  /// The whole state of `s` as bytes (sequence_bytes.hpp); restore() makes a sequence of them
  /// that continues with the same bits. An open checkpoint is not part of it.
  std::vector<uint8_t> snapshot(const Sequence& s) const;
  Sequence restore(const std::vector<uint8_t>& bytes) const;

  /// Rows of the embedding table for token ids (on the backend): out[t, :] = E[ids[t], :].
  static void embed_rows(const MatrixView ev, const int32_t* ids, long T, int dim, float* out) {
    table_rows<B>(ev, ids, T, dim, out);
  }

  ~Model();

 private:
  // ------------------------------------------------------------------------------- the plan
  /// What a step will do, decided (and every input checked) before any work.
  struct StepPlan {
    std::vector<size_t> prompts;          // segments on empty sequences, in order
    std::vector<size_t> continuing;       // the others
    std::vector<std::vector<long>> runs;  // per continuing segment: its tokens cut into runs (ChunkPlan)
    size_t waves = 0;                     // the longest list of runs
  };

  StepPlan make_plan(const std::vector<Segment>& batch, const char* what) const;

  void check_segment(const Sequence& s, const std::vector<int32_t>& tokens, const char* what) const {
    DS41_CHECK(s.owner_ == this, what, ": the sequence was not made by this model (use model.make_sequence())");
    DS41_CHECK(!s.broken_, what, ": the sequence's last step failed half-way; reset() it",
               s.undo_ ? " or rollback() to its checkpoint" : "");
    DS41_CHECK(!tokens.empty(), what, ": no tokens");
    check_tokens(tokens, s.pos_);
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

  // ------------------------------------------------------------------------------- execution
  /// One row of a pass: a token of `seq` (a sequence's rows come together, in order); `logits`:
  /// whether the head runs on it.
  struct Row {
    Sequence* seq = nullptr;
    int32_t token = 0;
    CaptureSink* sink = nullptr;
    bool logits = true;
  };

  /// The plan, then its passes: each prompt alone, then the waves of the continuations.
  std::vector<std::vector<StepResult>> run_step(std::vector<Segment>& batch, const char* what);

  /// A pass that fails marks every sequence it touched broken (their state is partly written),
  /// so nothing silently continues from one.
  template <class F>
  std::vector<StepResult> guarded(const std::vector<Row>& rows, F&& f) {
    try {
      return f();
    } catch (...) {
      for (const Row& r : rows) r.seq->broken_ = true;
      throw;
    }
  }

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

  /// The model's one pipeline: embed → hc copies → [engram] + the layers → DSpark's ring rows →
  /// final collapse with the last FFN pre → RMSNorm → head on the rows that want logits. TapT
  /// says what the rows are:
  ///   Tap<B>      a prompt: one sequence's T rows at positions 0..T-1, one tensor of the
  ///               reference (its prefill: attention over the prompt; captures [T, ...])
  ///   RowTaps<B>  a wave: each row one decode step of its sequence at its position (a
  ///               sequence's rows consecutive), weight passes batched; captures [1, ...] per row
  /// Returns a StepResult per row (argmax -1 where no logits were wanted).
  template <class TapT>
  std::vector<StepResult> pass(const std::vector<Row>& in, const TapT& taps);

  static void set_undo(Sequence& s) {
    for (auto& l : s.layers_) l.undo = s.undo_.get();
    for (auto& l : s.dspark_) l.undo = s.undo_.get();
  }

  /// DSpark's main_hidden of a pass's rows [N, n_t·dim] (none without a draft head), and where
  /// layer l writes its part (null unless l is a target layer).
  Buf<float> alloc_main_hidden(long N) const {
    return dspark_ ? B::template alloc<float>(static_cast<size_t>(N) * dspark_->hidden_width()) : Buf<float>{};
  }
  float* main_hidden_part(Buf<float>& mh, int l) const {
    const int j = dspark_ ? dspark_->target_slot(l) : -1;
    return j < 0 ? nullptr : mh.data() + static_cast<long>(j) * cfg_.dim;
  }
  long main_hidden_stride() const { return dspark_ ? dspark_->hidden_width() : 0; }

  static StepResult logits_row(const float* row, long V) {
    StepResult r;
    r.logits.assign(row, row + V);
    r.argmax = first_argmax(row, V);
    return r;
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
  std::unique_ptr<DSparkHead<B, ExpertStore>> dspark_;  // DSpark's draft head, where the model has one
};

// ---- The members that run a model, defined out of the class: not inline, so that a translation
// unit that sees an explicit instantiation declaration of a Model does not compile them again
// (ds41's own binaries take the host models compiled once: model_instances.hpp).

template <class B, class ExpertStore, class Table>
template <class... Shared>
Model<B, ExpertStore, Table>::Model(const ModelConfig& c, const WeightSource& w, Shared&... shared) : cfg_(c) {
  require_exact_host_fp("Model");  // the consumer's flags must not change ds41's bits
  if constexpr (ExactNumericsProbe<B>) B::require_exact_numerics();  // the device's
  cfg_.validate();
  const HostTensor emb = w.load("embed.weight", {c.vocab_size, c.dim}).widened();
  DS41_CHECK(emb.format == WeightFormat::kBF16 || emb.format == WeightFormat::kF32, "weights: 'embed.weight' has format ",
             format_name(emb.format), ", expected bf16 or f32");
  embed_ = Matrix<B>(emb, MatrixUse::kTable);  // embed_rows reads its rows directly
  for (int l = 0; l < c.n_layers; ++l) layers_.push_back(std::make_unique<BlockT>(c, w, l, shared...));
  // layer l's MoE predicts layer l+1's experts (used by stores that prefetch)
  for (int l = 0; l + 1 < c.n_layers; ++l) layers_[l]->moe().set_next(&layers_[l + 1]->moe());
  norm_ = upload_vector<B>(w, "norm.weight", c.dim);
  head_ = load_matrix<B>(w, "head.weight", c.vocab_size, c.dim);
  // the draft head where the configuration has one and the weights carry it (a file without
  // mtp.* serves the backbone alone; draft() then says why it cannot); its stages' experts in
  // the backbone's store (streamed: through the same cache, as layers n_layers + s)
  if (dspark_stages(c, w) > 0) dspark_ = std::make_unique<DSparkHead<B, ExpertStore>>(c, w, shared...);
}

template <class B, class ExpertStore, class Table>
Model<B, ExpertStore, Table>::~Model() {
  this->drop_own_sequence();
}

template <class B, class ExpertStore, class Table>
auto Model<B, ExpertStore, Table>::make_sequence() const -> Sequence {
  Sequence s;
  s.owner_ = this;
  s.hasher_ = EngramHasher(cfg_);
  for (const auto& l : layers_) s.layers_.push_back(l->make_state());
  if (dspark_) s.dspark_ = dspark_->make_state();
  return s;
}

template <class B, class ExpertStore, class Table>
DraftResult Model<B, ExpertStore, Table>::draft(const Sequence& s, int32_t anchor, CaptureSink* sink,
                                                const DraftPick& pick) {
  DSparkHead<B, ExpertStore>& head = draft_head();
  DS41_CHECK(s.owner_ == this, "draft: the sequence was not made by this model (use model.make_sequence())");
  DS41_CHECK(!s.broken_, "draft: the sequence's last step failed half-way; reset() it",
             s.undo_ ? " or rollback() to its checkpoint" : "");
  DS41_CHECK(s.pos_ > 0, "draft: the sequence is empty (a draft continues a sequence: extend it with a prompt first)");
  DS41_CHECK(anchor >= 0 && anchor < cfg_.vocab_size, "draft: anchor token ", anchor, " is out of range [0, ",
             cfg_.vocab_size, ")");
  return head.draft(s.dspark_, anchor, s.pos_ - 1, embed_.view(), head_.view(), Tap<B>{sink, "dspark."}, pick);
}

template <class B, class ExpertStore, class Table>
std::vector<uint8_t> Model<B, ExpertStore, Table>::snapshot(const Sequence& s) const {
  DS41_CHECK(s.owner_ == this, "snapshot: the sequence was not made by this model");
  DS41_CHECK(!s.broken_, "snapshot: the sequence's last step failed half-way");
  return SequenceBytes<B>::write(cfg_, s);
}

template <class B, class ExpertStore, class Table>
auto Model<B, ExpertStore, Table>::restore(const std::vector<uint8_t>& bytes) const -> Sequence {
  Sequence s = make_sequence();
  SequenceBytes<B>::read(cfg_, s, bytes.data(), bytes.size());
  return s;
}

template <class B, class ExpertStore, class Table>
auto Model<B, ExpertStore, Table>::make_plan(const std::vector<Segment>& batch, const char* what) const -> StepPlan {
  StepPlan p;
  p.runs.resize(batch.size());
  const ChunkPlan chunks(cfg_);
  for (size_t i = 0; i < batch.size(); ++i) {
    DS41_CHECK(batch[i].seq != nullptr, what, ": segment ", i, " has no sequence");
    check_segment(*batch[i].seq, batch[i].tokens, what);
    for (size_t j = 0; j < i; ++j)
      DS41_CHECK(batch[j].seq != batch[i].seq, what, ": segments ", j, " and ", i,
                 " continue the same sequence (one segment per sequence in a step)");
  }
  for (size_t i = 0; i < batch.size(); ++i) {
    const Sequence& s = *batch[i].seq;
    if (s.pos_ == 0) {
      p.prompts.push_back(i);
      continue;
    }
    p.continuing.push_back(i);
    p.runs[i] = chunks.split(s.pos_, static_cast<long>(batch[i].tokens.size()), entering(s), kMaxRunRows);
    p.waves = std::max(p.waves, p.runs[i].size());
  }
  return p;
}

template <class B, class ExpertStore, class Table>
std::vector<std::vector<StepResult>> Model<B, ExpertStore, Table>::run_step(std::vector<Segment>& batch,
                                                                            const char* what) {
  const StepPlan plan = make_plan(batch, what);
  std::vector<std::vector<StepResult>> out(batch.size());
  for (size_t i : plan.prompts) {
    Segment& g = batch[i];
    const long T = static_cast<long>(g.tokens.size());
    std::vector<Row> rows(T);
    for (long t = 0; t < T; ++t) rows[t] = {g.seq, g.tokens[t], nullptr, g.all_logits || t + 1 == T};
    // a prompt's captures go to its last row's sink, holding all its positions at once
    const Tap<B> tap{g.sinks ? g.sinks(T - 1) : nullptr, ""};
    std::vector<StepResult> r = guarded(rows, [&] { return pass(rows, tap); });
    for (long t = 0; t < T; ++t)
      if (rows[t].logits) out[i].push_back(std::move(r[t]));
  }
  std::vector<long> done(batch.size(), 0);  // tokens of each segment run so far
  for (size_t w = 0; w < plan.waves; ++w) {
    std::vector<Row> rows;
    std::vector<size_t> of;  // the segment of each row
    for (size_t i : plan.continuing) {
      if (w >= plan.runs[i].size()) continue;
      Segment& g = batch[i];
      const long n = static_cast<long>(g.tokens.size());
      for (long t = done[i]; t < done[i] + plan.runs[i][w]; ++t) {
        const bool keep = g.all_logits || t + 1 == n;
        rows.push_back({g.seq, g.tokens[t], g.sinks && keep ? g.sinks(t) : nullptr, keep});
        of.push_back(i);
      }
      done[i] += plan.runs[i][w];
    }
    RowTaps<B> taps;
    for (const Row& r : rows) taps.rows.push_back(Tap<B>{r.sink, ""});
    std::vector<StepResult> r = guarded(rows, [&] { return pass(rows, taps); });
    for (size_t j = 0; j < rows.size(); ++j)
      if (rows[j].logits) out[of[j]].push_back(std::move(r[j]));
  }
  return out;
}

template <class B, class ExpertStore, class Table>
template <class TapT>
std::vector<StepResult> Model<B, ExpertStore, Table>::pass(const std::vector<Row>& in, const TapT& taps) {
  constexpr bool prompt = std::is_same_v<TapT, Tap<B>>;
  const long N = static_cast<long>(in.size());
  const int hc = cfg_.hc_mult, dim = cfg_.dim;
  std::vector<long> pos(N);
  std::vector<int32_t> toks(N);
  for (long r = 0; r < N; ++r) toks[r] = in[r].token;

  // positions, shared slots, undo records
  std::vector<SharedSlots<B>> own(prompt ? 0 : N);
  std::vector<SharedSlots<B>*> slots(N);
  if constexpr (prompt) {
    Sequence& s = *in[0].seq;
    s.shared_.reset();  // layer 0 at position 0: a new sequence
    if (s.undo_) s.undo_->save_shared(0, s.shared_);
    set_undo(s);
    for (long r = 0; r < N; ++r) pos[r] = r;
    taps.i32_host("tokens", toks, {N});
  } else {
    // A sequence's first row works on its own shared slots; its later rows on slots of their
    // own, pointing where that row finds the published caches (ChunkPlan); the last row's
    // become the sequence's afterwards.
    const ChunkPlan plan(cfg_);
    ChunkPlan::Entering found;  // the publishers the current row finds
    for (long r = 0; r < N; ++r) {
      Sequence& s = *in[r].seq;
      const bool first = r == 0 || in[r - 1].seq != &s;
      DS41_CHECK(s.pos_ > 0, "internal: a wave continues sequences");
      pos[r] = first ? s.pos_ : pos[r - 1] + 1;
      if (first) {
        found = entering(s);
        slots[r] = &s.shared_;
        if (s.undo_) s.undo_->save_shared(s.pos_, s.shared_);
        set_undo(s);
      } else {
        found = plan.after(pos[r - 1], found);
        point_slots(s, found, own[r]);
        slots[r] = &own[r];
      }
      taps.rows[r].i32_host("tokens", {in[r].token}, {1});
    }
  }

  // engram hash rows (computed on the host)
  Buf<int32_t> hash;
  if (cfg_.n_engram_layers()) {
    std::vector<int32_t> all;
    if constexpr (prompt) {
      all = in[0].seq->hasher_.hash(toks.data(), N, 0);
      taps.i32_host("engram_hash", all, {N, cfg_.n_engram_layers(), cfg_.engram_cols()});
    } else {
      for (long r = 0; r < N; ++r) {
        std::vector<int32_t> hh = in[r].seq->hasher_.hash(&in[r].token, 1, pos[r]);
        taps.rows[r].i32_host("engram_hash", hh, {1, cfg_.n_engram_layers(), cfg_.engram_cols()});
        all.insert(all.end(), hh.begin(), hh.end());
      }
    }
    hash = B::template alloc<int32_t>(all.size());
    B::upload(hash.data(), all.data(), all.size());
  }

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
  std::vector<typename BlockT::Attn::Row> rows(prompt ? 0 : N);
  for (int l = 0; l < cfg_.n_layers; ++l) {
    const std::string prefix = "layers." + std::to_string(l) + ".";
    if constexpr (prompt) {
      Sequence& s = *in[0].seq;
      layers_[l]->forward(h.data(), pre.data(), hash.data(), N, 0, s.layers_[l], s.shared_, taps.sub(prefix),
                          main_hidden_part(main_hidden, l), main_hidden_stride());
    } else {
      for (long r = 0; r < N; ++r) rows[r] = {pos[r], &in[r].seq->layers_[l], slots[r], taps.rows[r].sub(prefix)};
      layers_[l]->forward_rows(h.data(), pre.data(), hash.data(), rows, taps.sub(prefix),
                               main_hidden_part(main_hidden, l), main_hidden_stride());
    }
  }
  if (dspark_) {
    if constexpr (prompt) {
      dspark_->absorb(main_hidden.data(), N, 0, in[0].seq->dspark_, taps.sub("dspark."));
    } else {
      std::vector<typename DSparkHead<B, ExpertStore>::State*> st(N);
      for (long r = 0; r < N; ++r) st[r] = &in[r].seq->dspark_;
      dspark_->absorb_rows(main_hidden.data(), pos, st, taps.sub("dspark."));
    }
  }

  // final collapse with the last FFN pre, norm, the head on the rows whose logits are wanted
  // (a chunk's inner rows need none)
  HighwayT<B>::collapse(h.data(), pre.data(), N, hc, dim, x.data());
  taps.f32("h_final", x.data(), {N, dim});
  Ops<B>::rmsnorm(x.data(), N, dim, norm_.data(), static_cast<float>(cfg_.norm_eps));
  taps.f32("head_in", x.data(), {N, dim});
  std::vector<long> want;
  for (long r = 0; r < N; ++r)
    if (in[r].logits) want.push_back(r);
  const long V = cfg_.vocab_size, M = static_cast<long>(want.size());
  std::vector<StepResult> out(N);
  if (M) {
    auto logits = B::template alloc<float>(static_cast<size_t>(M) * V);
    if (want.back() - want.front() + 1 == M) {  // consecutive rows: the head reads them in place
      B::linear(x.data() + want.front() * dim, M, dim, head_.view(), logits.data(), V, OutRound::kF32);
    } else {
      auto xs = B::template alloc<float>(static_cast<size_t>(M) * dim);
      for (long m = 0; m < M; ++m) B::copy(xs.data() + m * dim, x.data() + want[m] * dim, dim);
      B::linear(xs.data(), M, dim, head_.view(), logits.data(), V, OutRound::kF32);
    }
    if constexpr (prompt) {
      taps.f32("logits", logits.data() + (M - 1) * V, {V}, CapType::kF32);  // the prompt's last position
    } else {
      for (long m = 0; m < M; ++m) taps.rows[want[m]].f32("logits", logits.data() + m * V, {V}, CapType::kF32);
    }
    std::vector<float> all(static_cast<size_t>(M) * V);
    B::download(all.data(), logits.data(), all.size());
    for (long m = 0; m < M; ++m) out[want[m]] = logits_row(all.data() + m * V, V);
  }

  // the sequences move on
  if constexpr (prompt) {
    Sequence& s = *in[0].seq;
    s.pos_ = N;
    s.prompt_len_ = N;
  } else {
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
  }
  return out;
}

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
#include "model_instances.hpp"
