// ds41/model/undo_record.hpp — UndoRecord: what the steps taken since a sequence's checkpoint
// overwrote (rows of backend memory with their old content, and the shared slots as each step
// found them), so that a rollback restores the state exactly instead of replaying tokens.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>
#include "../core/error.hpp"
#include "shared_slots.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// What steps overwrote in one sequence since its checkpoint: rows of backend memory with the
/// content they had, in the order they were overwritten.
template <class B>
class UndoRecord {
 public:
  template <class T>
  using Buf = typename B::template Buffer<T>;

  /// Keep `n` floats at `dst` (backend memory) as they are now, before step `pos` overwrites them.
  void save(long pos, float* dst, size_t n) {
    Saved s{pos, dst, B::template alloc<float>(n)};
    B::copy(s.data.data(), dst, n);
    saved_.push_back(std::move(s));
  }
  /// The shared slots as step `pos` found them.
  void save_shared(long pos, const SharedSlots<B>& shared) { shared_.push_back({pos, copy_slots(shared)}); }

  /// Put back everything steps at positions >= `from` overwrote (newest first) and return the
  /// shared slots as the step at `from` found them; drops those entries.
  SharedSlots<B> undo_from(long from) {
    bool boundary = false;  // a step must have started at `from` (not inside a prefill)
    for (const auto& r : shared_) boundary = boundary || r.first == from;
    DS41_CHECK(boundary, "sequence: length ", from, " is inside a step taken since the checkpoint (a prefill), not at ",
               "the start of one; it cannot be restored");
    // A batched step saves layer by layer over its rows, so the entries of positions >= `from`
    // need not be the last ones: every such entry is restored, newest first (a row of one
    // layer's memory is saved in position order, so it ends with its oldest content).
    for (size_t i = saved_.size(); i-- > 0;)
      if (saved_[i].pos >= from) B::copy(saved_[i].dst, saved_[i].data.data(), saved_[i].data.size());
    std::erase_if(saved_, [from](const Saved& s) { return s.pos >= from; });
    SharedSlots<B> at;
    while (!shared_.empty() && shared_.back().first >= from) {
      at = std::move(shared_.back().second);
      shared_.pop_back();
    }
    return at;
  }
  bool empty() const { return shared_.empty(); }

  /// A deep copy of the shared slots (the top-k and candidate buffers too).
  static SharedSlots<B> copy_slots(const SharedSlots<B>& s) {
    SharedSlots<B> c;
    c.compress_kv = s.compress_kv;
    c.compress_kv_layer = s.compress_kv_layer;
    c.compress_kv_rows = s.compress_kv_rows;
    c.index_k = s.index_k;
    c.index_k_layer = s.index_k_layer;
    c.index_k_rows = s.index_k_rows;
    c.topk_rows = s.topk_rows;
    c.topk_cols = s.topk_cols;
    c.has_topk = s.has_topk;
    c.cand_rows = s.cand_rows;
    c.cand_cols = s.cand_cols;
    c.has_candidates = s.has_candidates;
    if (s.topk.size()) {
      c.topk = B::template alloc<int32_t>(s.topk.size());
      B::copy(c.topk.data(), s.topk.data(), s.topk.size());
    }
    if (s.candidates.size()) {
      c.candidates = B::template alloc<int32_t>(s.candidates.size());
      B::copy(c.candidates.data(), s.candidates.data(), s.candidates.size());
    }
    return c;
  }

 private:
  struct Saved {
    long pos;
    float* dst;
    Buf<float> data;
  };
  std::vector<Saved> saved_;
  std::vector<std::pair<long, SharedSlots<B>>> shared_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
