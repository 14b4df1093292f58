// ds41/model/sequence_bytes.hpp — a sequence's whole state as bytes and back (prefix caching,
// moving a sequence between processes): Model::snapshot / Model::restore call these.
//
// Layout (little-endian, this machine's float32): "DS41SEQ1", a fingerprint of the config the
// state's shapes come from, the length and prompt length; per layer the window ring, and on kv
// sources the compressed rows valid at that length, the compressor's open group (ratio > 1) and
// the index keys (index sources); the shared slots (publishers by layer, top-k, candidates); the
// engram history. A restored sequence continues with the same bits as the one that was saved; an
// open checkpoint is not saved.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>
#include "../core/fnv1a.hpp"
#include "sequence.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B>
struct SequenceBytes {
  static constexpr char kMagic[8] = {'D', 'S', '4', '1', 'S', 'E', 'Q', '1'};

  /// What a snapshot's shapes depend on.
  static uint64_t fingerprint(const ModelConfig& c) {
    std::string s;
    auto add = [&](long v) { s += std::to_string(v) + ","; };
    for (long v : {static_cast<long>(c.n_layers), static_cast<long>(c.dim), static_cast<long>(c.head_dim),
                   static_cast<long>(c.window_size), c.max_seq_len, c.vocab_size, static_cast<long>(c.index_head_dim),
                   static_cast<long>(c.hc_mult), static_cast<long>(c.n_engram_layers())})
      add(v);
    for (int v : c.compress_ratios) add(v);
    s += "|";
    for (int v : c.kv_source_layers) add(v);
    s += "|";
    for (int v : c.index_source_layers) add(v);
    return fnv1a64(s);
  }

  static std::vector<uint8_t> write(const ModelConfig& c, const SequenceT<B>& s) {
    std::vector<uint8_t> out;
    auto put = [&](const void* p, size_t n) {
      if (n == 0) return;  // p may be null (an empty vector's data())
      const auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + n);
    };
    auto put_i64 = [&](int64_t v) { put(&v, 8); };
    auto put_dev_f32 = [&](const float* p, size_t n) {
      std::vector<float> h(n);
      if (n) B::download(h.data(), p, n);
      put(h.data(), n * 4);
    };
    auto put_dev_i32 = [&](const int32_t* p, size_t n) {
      std::vector<int32_t> h(n);
      if (n) B::download(h.data(), p, n);
      put(h.data(), n * 4);
    };
    put(kMagic, 8);
    put_i64(static_cast<int64_t>(fingerprint(c)));
    put_i64(s.pos_);
    put_i64(s.prompt_len_);
    const long D = c.head_dim, W = c.window_size;
    for (int l = 0; l < c.n_layers; ++l) {
      const auto& st = s.layers_[l];
      put_dev_f32(st.window.data(), static_cast<size_t>(W) * D);
      if (!c.is_kv_source(l)) continue;
      const long r = c.ratio(l), rows = s.pos_ / r;
      put_dev_f32(st.compressed.data(), static_cast<size_t>(rows) * D);
      if (r > 1) {
        put_dev_f32(st.comp.kv.data(), static_cast<size_t>(r) * D);
        put_dev_f32(st.comp.score.data(), static_cast<size_t>(r) * D);
      }
      if (c.is_index_source(l)) put_dev_f32(st.index.keys.data(), static_cast<size_t>(rows) * c.index_head_dim);
    }
    const SharedSlots<B>& sh = s.shared_;
    put_i64(sh.compress_kv_layer);
    put_i64(sh.index_k_layer);
    put_i64(sh.has_topk ? 1 : 0);
    put_i64(sh.topk_rows);
    put_i64(sh.topk_cols);
    put_dev_i32(sh.topk.data(), sh.has_topk ? static_cast<size_t>(sh.topk_rows * sh.topk_cols) : 0);
    put_i64(sh.has_candidates ? 1 : 0);
    put_i64(sh.cand_rows);
    put_i64(sh.cand_cols);
    put_dev_i32(sh.candidates.data(), sh.has_candidates ? static_cast<size_t>(sh.cand_rows * sh.cand_cols) : 0);
    put(s.hasher_.history().data(), static_cast<size_t>(c.n_engram_layers() ? s.pos_ : 0) * 8);
    // a model with a draft head: the DSpark stages' rings (absent otherwise, so a snapshot of a
    // model without one is what it always was)
    if (!s.dspark_.empty()) put_i64(static_cast<int64_t>(s.dspark_.size()));
    for (const auto& st : s.dspark_) put_dev_f32(st.window.data(), static_cast<size_t>(W) * D);
    return out;
  }

  /// Fill `s`, a fresh sequence of a model with config `c`, from `bytes`; throws ds41::Error naming
  /// what does not fit (another model's snapshot, a truncated or corrupted one).
  static void read(const ModelConfig& c, SequenceT<B>& s, const uint8_t* bytes, size_t n) {
    size_t at = 0;
    auto take = [&](void* p, size_t k, const char* what) {
      DS41_CHECK(k <= n - at, "sequence snapshot: truncated at byte ", at, " (", what, ": ", k, " bytes, ", n - at,
                 " left)");
      if (k == 0) return;  // p may be null (an empty vector's data())
      std::memcpy(p, bytes + at, k);
      at += k;
    };
    auto take_i64 = [&](const char* what) {
      int64_t v = 0;
      take(&v, 8, what);
      return v;
    };
    auto take_dev_f32 = [&](float* p, size_t k, const char* what) {
      std::vector<float> h(k);
      take(h.data(), k * 4, what);
      if (k) B::upload(p, h.data(), k);
    };
    char magic[8];
    take(magic, 8, "magic");
    DS41_CHECK(std::memcmp(magic, kMagic, 8) == 0, "sequence snapshot: not a ds41 sequence snapshot (bad magic)");
    DS41_CHECK(static_cast<uint64_t>(take_i64("fingerprint")) == fingerprint(c),
               "sequence snapshot: made by a model of another configuration (fingerprint differs)");
    const int64_t pos = take_i64("length"), prompt = take_i64("prompt length");
    DS41_CHECK(pos >= 0 && pos <= c.max_seq_len && prompt >= 0 && prompt <= pos, "sequence snapshot: length ", pos,
               " / prompt length ", prompt, " out of range (max_seq_len ", c.max_seq_len, ")");
    const long D = c.head_dim, W = c.window_size;
    for (int l = 0; l < c.n_layers; ++l) {
      auto& st = s.layers_[l];
      take_dev_f32(st.window.data(), static_cast<size_t>(W) * D, "window ring");
      if (!c.is_kv_source(l)) continue;
      const long r = c.ratio(l), rows = pos / r;
      take_dev_f32(st.compressed.data(), static_cast<size_t>(rows) * D, "compressed KV");
      if (r > 1) {
        take_dev_f32(st.comp.kv.data(), static_cast<size_t>(r) * D, "compressor group");
        take_dev_f32(st.comp.score.data(), static_cast<size_t>(r) * D, "compressor group");
      }
      if (c.is_index_source(l))
        take_dev_f32(st.index.keys.data(), static_cast<size_t>(rows) * c.index_head_dim, "index keys");
    }
    SharedSlots<B>& sh = s.shared_;
    sh.reset();
    auto layer_ref = [&](int64_t v, bool (ModelConfig::*role)(int) const, const char* what) {
      DS41_CHECK(v == -1 || (v >= 0 && v < c.n_layers && (c.*role)(static_cast<int>(v))), "sequence snapshot: ",
                 what, " publisher ", v, " is not such a layer of this model");
      return static_cast<int>(v);
    };
    sh.compress_kv_layer = layer_ref(take_i64("publisher"), &ModelConfig::is_kv_source, "compressed KV");
    sh.index_k_layer = layer_ref(take_i64("publisher"), &ModelConfig::is_index_source, "index key");
    DS41_CHECK(sh.index_k_layer < 0 || c.is_kv_source(sh.index_k_layer), "sequence snapshot: index key publisher ",
               sh.index_k_layer, " holds no keys");
    if (sh.compress_kv_layer >= 0) {
      sh.compress_kv = s.layers_[sh.compress_kv_layer].compressed.data();
      sh.compress_kv_rows = c.max_seq_len / c.ratio(sh.compress_kv_layer);
    }
    if (sh.index_k_layer >= 0) {
      sh.index_k = s.layers_[sh.index_k_layer].index.keys.data();
      sh.index_k_rows = c.max_seq_len / c.ratio(sh.index_k_layer);
    }
    auto take_table = [&](Buf<int32_t>& buf, long& rows, long& cols, bool& has, const char* what) {
      has = take_i64(what) != 0;
      rows = take_i64(what);
      cols = take_i64(what);
      DS41_CHECK(rows >= 0 && cols >= 0 && rows <= (1L << 24) && cols <= (1L << 24), "sequence snapshot: ", what,
                 " has shape [", rows, ", ", cols, "]");
      if (!has) return;
      std::vector<int32_t> h(static_cast<size_t>(rows * cols));
      take(h.data(), h.size() * 4, what);
      buf = B::template alloc<int32_t>(h.size() ? h.size() : 1);
      if (!h.empty()) B::upload(buf.data(), h.data(), h.size());
    };
    take_table(sh.topk, sh.topk_rows, sh.topk_cols, sh.has_topk, "top-k");
    take_table(sh.candidates, sh.cand_rows, sh.cand_cols, sh.has_candidates, "candidates");
    if (c.n_engram_layers()) take(s.hasher_.history().data(), static_cast<size_t>(pos) * 8, "engram history");
    if (!s.dspark_.empty()) {
      DS41_CHECK(at < n, "sequence snapshot: it holds no DSpark rings (made by a model without the draft head), ",
                 "but this model has one");
      const int64_t stages = take_i64("DSpark stages");
      DS41_CHECK(stages == static_cast<int64_t>(s.dspark_.size()), "sequence snapshot: ", stages,
                 " DSpark rings for a draft head of ", s.dspark_.size(), " stages");
      for (auto& st : s.dspark_) take_dev_f32(st.window.data(), static_cast<size_t>(W) * D, "DSpark ring");
    }
    DS41_CHECK(at == n, "sequence snapshot: ", n - at, " bytes left over after the state (corrupted)");
    s.pos_ = pos;
    s.prompt_len_ = prompt;
  }

 private:
  template <class T>
  using Buf = typename B::template Buffer<T>;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
