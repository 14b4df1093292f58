// ds41/model/model.hpp — Model: embed → hc copies → [engram] + Block per layer → final collapse
// with the last FFN pre → RMSNorm → head (logits of the last position), and the per-sequence
// Runtime every layer shares (window rings, compressor groups, caches, shared slots, engram
// history). One sequence in flight at a time; release() frees it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "block.hpp"

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
  }

  const ModelConfig& config() const { return cfg_; }
  BlockT& layer(int l) { return *layers_.at(l); }
  /// Next position of the sequence in flight (0 when none).
  long position() const { return seq_ ? seq_->pos : 0; }
  bool active() const { return seq_ != nullptr; }

  /// Start a sequence with its prompt (positions 0..T-1).
  StepResult prefill(const std::vector<int32_t>& tokens, CaptureSink* sink = nullptr) {
    DS41_CHECK(!seq_, "prefill: a sequence is already in flight on this runtime (it serves one); call release() first");
    DS41_CHECK(!tokens.empty(), "prefill: empty prompt");
    check_tokens(tokens, 0);
    B::release_graphs();  // graphs kept from the previous sequence are not reused across sequences
    seq_ = std::make_unique<Sequence>();
    seq_->hasher = EngramHasher(cfg_);
    for (auto& l : layers_) seq_->layers.push_back(l->make_state());
    try {
      return step(tokens, sink);
    } catch (...) {
      seq_.reset();  // a failed prefill leaves no half-started sequence behind
      throw;
    }
  }

  /// One token at the next position of the sequence in flight.
  StepResult decode(int32_t token, CaptureSink* sink = nullptr) {
    DS41_CHECK(seq_, "decode: no sequence in flight (decode before prefill, or after release)");
    std::vector<int32_t> t{token};
    check_tokens(t, seq_->pos);
    try {
      return step(t, sink);
    } catch (...) {
      seq_.reset();  // inputs were checked first; a failure inside leaves a state nobody may reuse
      throw;
    }
  }

  /// Free everything the sequence in flight holds.
  void release() {
    B::release_graphs();  // captured graphs first: they reference the sequence's buffers
    seq_.reset();
  }

  /// Rows of the embedding table for token ids (on the backend): out[t, :] = E[ids[t], :].
  static void embed_rows(const MatrixView ev, const int32_t* ids, long T, int dim, float* out) {
    DS41_CHECK(ev.format == WeightFormat::kBF16 || ev.format == WeightFormat::kF32, "embedding table has format ",
               format_name(ev.format), ", expected bf16 or f32");
    B::for_each(T * dim, [=] DS41_LAMBDA(long e) {
      long t = e / dim, d = e % dim;
      long off = static_cast<long>(ids[t]) * dim + d;
      out[e] = ev.format == WeightFormat::kBF16 ? bf16_to_f32(static_cast<const uint16_t*>(ev.data)[off])
                                                : static_cast<const float*>(ev.data)[off];
    });
  }

 private:
  struct Sequence {
    long pos = 0;
    std::vector<typename BlockT::Attn::State> layers;
    SharedSlots<B> shared;
    EngramHasher hasher;
  };

  void check_tokens(const std::vector<int32_t>& tokens, long start) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      DS41_CHECK(tokens[i] >= 0 && tokens[i] < cfg_.vocab_size, "token id ", tokens[i], " at index ", i,
                 " is out of range [0, ", cfg_.vocab_size, ")");
    DS41_CHECK(start + static_cast<long>(tokens.size()) <= cfg_.max_seq_len, "sequence too long: positions ", start,
               "..", start + static_cast<long>(tokens.size()) - 1, " exceed max_seq_len ", cfg_.max_seq_len);
  }

  StepResult step(const std::vector<int32_t>& tokens, CaptureSink* sink) {
    Tap<B> tap{sink, ""};
    Sequence& s = *seq_;
    const long T = static_cast<long>(tokens.size()), start = s.pos;
    const int hc = cfg_.hc_mult, dim = cfg_.dim;
    if (start == 0) s.shared.reset();  // layer 0 at position 0: a new sequence
    tap.i32_host("tokens", tokens, {T});

    Buf<int32_t> hash;
    if (cfg_.n_engram_layers()) {
      std::vector<int32_t> hh = s.hasher.hash(tokens.data(), T, start);
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

    for (int l = 0; l < cfg_.n_layers; ++l)
      layers_[l]->forward(h.data(), pre.data(), hash.data(), T, start, s.layers[l], s.shared,
                          tap.sub("layers." + std::to_string(l) + "."));

    // final collapse with the last FFN pre, norm, head on the last position
    HighwayT<B>::collapse(h.data(), pre.data(), T, hc, dim, x.data());
    tap.f32("h_final", x.data(), {T, dim});
    Ops<B>::rmsnorm(x.data(), T, dim, norm_.data(), static_cast<float>(cfg_.norm_eps));
    tap.f32("head_in", x.data(), {T, dim});
    auto logits = B::template alloc<float>(cfg_.vocab_size);
    B::linear(x.data() + (T - 1) * dim, 1, dim, head_.view(), logits.data(), cfg_.vocab_size, OutRound::kF32);
    tap.f32("logits", logits.data(), {cfg_.vocab_size}, CapType::kF32);

    StepResult r;
    r.logits.resize(cfg_.vocab_size);
    B::download(r.logits.data(), logits.data(), r.logits.size());
    r.argmax = 0;
    for (long v = 1; v < cfg_.vocab_size; ++v)
      if (r.logits[v] > r.logits[r.argmax]) r.argmax = static_cast<int32_t>(v);
    s.pos = start + T;
    return r;
  }

  ModelConfig cfg_;
  Matrix<B> embed_, head_;
  Buf<float> norm_;
  std::vector<std::unique_ptr<BlockT>> layers_;
  std::unique_ptr<Sequence> seq_;
};

}  // namespace ds41
