// ds41/model/shared_slots.hpp — what attention layers hand down the stack (the reference's
// SharedAttentionRuntime): the compressed KV and index keys last published by a kv source, the
// latest index top-k, the candidate mask. One slot each; sources write before consumers read.
#pragma once
#include <cstdint>

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

template <class B>
struct SharedSlots {
  template <class T>
  using Buf = typename B::template Buffer<T>;

  const float* compress_kv = nullptr;  // [max_seq / r, D] of the publishing layer
  int compress_kv_layer = -1;
  long compress_kv_rows = 0;           // max_seq_len / r of the publisher: what a slice of it can hold
  const float* index_k = nullptr;      // [max_seq / r, Di] of the publishing layer
  int index_k_layer = -1;
  long index_k_rows = 0;               // max_seq_len / r of the publisher: what a slice of it can hold

  Buf<int32_t> topk;                   // [rows, cols]
  long topk_rows = 0, topk_cols = 0;
  bool has_topk = false;

  Buf<int32_t> candidates;             // [rows, cols], 0/1
  long cand_rows = 0, cand_cols = 0;
  bool has_candidates = false;

  /// Layer 0 at position 0: a new sequence starts and nothing published before may leak into it.
  void reset() {
    compress_kv = nullptr;
    compress_kv_layer = -1;
    compress_kv_rows = 0;
    index_k = nullptr;
    index_k_layer = -1;
    index_k_rows = 0;
    topk = Buf<int32_t>();
    candidates = Buf<int32_t>();
    topk_rows = topk_cols = cand_rows = cand_cols = 0;
    has_topk = has_candidates = false;
  }
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
