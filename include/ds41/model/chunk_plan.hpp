// ds41/model/chunk_plan.hpp — ChunkPlan: which consecutive tokens of one sequence's continuation
// may run as rows of one batched decode step, and what each such row finds in the shared slots.
//
// The reference defines positions after the prompt by one decode step per token, each running
// layer 0..n-1 before the next token starts. A batched step runs layer by layer over all its
// rows instead (every weight read once), so row i at layer L runs after every row at layers < L
// and before every row at layers > L. For a sequence's own consecutive rows that changes what
// the shared slots hold only through two things layers hand each other across rows:
//   * the compressed KV and the index keys a kv source publishes: a pointer to its cache, and a
//     row of that cache each time its compressor completes a group ((pos + 1) % ratio == 0);
//     a reader sees the pointer set last and reads rows [0, n) of that cache;
//   * the candidate mask, when the candidate source selects nothing on a row (its ratio has no
//     complete group yet) and a later layer would read the mask of an earlier row.
// The pointers are a function of the schedule (ratios, sources, positions), so each row's slots
// are given the pointers that row finds sequentially (`keys_in`, `kv_in`). A cache row is a
// problem only when the layer-major order and the sequential one differ on whether a publication
// precedes a read whose range holds its row: a later layer's group completed on an earlier row
// of the chunk (the reference's stale keys) or an earlier layer's completed on a later row that
// a smaller-ratio reader's range covers. split() cuts the chunk before any row where that
// happens (or where the candidate mask would cross rows), so every run gives the sequential bits;
// where nothing crosses, a chunk of any length is one run.
#pragma once
#include <algorithm>
#include <vector>
#include "config.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

class ChunkPlan {
 public:
  explicit ChunkPlan(const ModelConfig& c) : c_(c) {}

  /// Publishers a row finds on entering layer 0: the layer whose compressed KV and whose index
  /// keys were published last (-1: none yet).
  struct Entering {
    int kv = -1, keys = -1;
  };

  /// What row at `pos` leaves for the next one, having found `in`.
  Entering after(long pos, Entering in) const {
    for (int l = 0; l < c_.n_layers; ++l) {
      if (publishes_kv(l)) in.kv = l;
      if (publishes_keys(l, pos)) in.keys = l;
    }
    return in;
  }

  /// Lengths of the runs (in order, summing to S) that continue a sequence at `start` by S tokens,
  /// the sequence's slots as it stands holding `in`; no run longer than `max_rows`.
  std::vector<long> split(long start, long S, Entering in, long max_rows) const {
    std::vector<long> runs;
    std::vector<Entering> ins(static_cast<size_t>(S));
    for (long i = 0; i < S; ++i) {
      ins[i] = in;
      in = after(start + i, in);
    }
    long a = 0;
    while (a < S) {
      long b = a + 1;  // a run of one row is one decode step: always what the reference does
      while (b < S && b - a < max_rows && joins(start, a, b, ins)) ++b;
      runs.push_back(b - a);
      a = b;
    }
    return runs;
  }

 private:
  bool publishes_kv(int l) const { return c_.ratio(l) > 0 && c_.is_kv_source(l); }  // its pointer, every step
  /// A kv source's cache gains a row at the step whose position completes a group.
  bool writes_row(int l, long pos) const { return publishes_kv(l) && (pos + 1) % c_.ratio(l) == 0; }
  bool publishes_keys(int l, long pos) const { return c_.is_index_source(l) && writes_row(l, pos); }
  /// Rows of publisher P's cache a reader at layer L and position pos may read.
  long readable(int L, int P, long pos) const {
    return std::min((pos + 1) / c_.ratio(L), c_.max_seq_len / c_.ratio(P));
  }

  /// Whether row b can join the run [a, b) (rows at positions start + i): the reads of rows
  /// a..b see the same cache rows as sequentially, given the publications of rows a..b.
  bool joins(long start, long a, long b, const std::vector<Entering>& ins) const {
    // row b's reads against every publication of the run, row b's own included
    for (long j = a; j <= b; ++j)
      if (!reads_agree(start, b, ins[b], start + j, j)) return false;
    // the earlier rows' reads against row b's publications
    for (long i = a; i < b; ++i)
      if (!reads_agree(start, i, ins[i], start + b, b)) return false;
    // a candidate mask read on row b must be made on row b
    const int cs = c_.candidate_source_layer;
    if (cs >= 0 && (start + b + 1) / c_.ratio(cs) == 0)
      for (int L = cs + 1; L < c_.n_layers; ++L)
        if (c_.is_index_source(L) && (start + b + 1) / c_.ratio(L) > 0) return false;
    return true;
  }

  /// Row i's reads (found `in`) against the cache row that row j (position pj) writes.
  bool reads_agree(long start, long i, Entering in, long pj, long j) const {
    const long pi = start + i;
    Entering at = in;  // the publishers as row i reaches layer L
    int topk_by = -1;  // the index source whose top-k row i's attention reads at layer L
    for (int L = 0; L < c_.n_layers; ++L) {
      if (publishes_kv(L)) at.kv = L;
      if (publishes_keys(L, pi)) at.keys = L;
      if (c_.ratio(L) == 0) continue;
      if (c_.is_index_source(L)) topk_by = L;
      // the indexer scores every visible key; attention reads the compressed rows its top-k
      // names, which lie below the index source's own visible count
      const bool selects = c_.is_index_source(L) && (pi + 1) / c_.ratio(L) > 0;
      if (selects && at.keys >= 0 && publishes_keys(at.keys, pj) &&
          !agree(at.keys, L, i, j, pj, readable(L, at.keys, pi)))
        return false;
      if (topk_by >= 0 && at.kv >= 0 && writes_row(at.kv, pj) &&
          !agree(at.kv, L, i, j, pj, readable(topk_by, at.kv, pi)))
        return false;
    }
    return true;
  }

  /// Publisher P's row written on row j (position pj) and a read at (row i, layer L) of rows
  /// [0, n): the same whether it precedes the read sequentially (row j before row i, or the same
  /// row at a layer <= L) and layer by layer (a layer < L, or layer L itself on a row <= i).
  bool agree(int P, int L, long i, long j, long pj, long n) const {
    const long row = (pj + 1) / c_.ratio(P) - 1;
    if (row >= n) return true;  // outside what the read covers
    const bool sequential = j < i || (j == i && P <= L);
    const bool layer_major = P < L || (P == L && j <= i);
    return sequential == layer_major;
  }

  const ModelConfig& c_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
