// ds41/backend/cuda/fast_attention_plan.hpp — the tiling plans and the per-thread arithmetic of
// the fast-numerics device kernels for sparse attention and the indexer's scores
// (cuda/fast_attention.hpp). Plain C++ with DS41_HD functions, no CUDA headers: the host test
// (tests/test_fast_attention_plan.cpp) checks the plans' coverage and limits and emulates the
// kernels' split and merge order with these same functions.
//
// What "fast" keeps and what it gives up (the exact path, CudaBackend's one thread per head or per
// entry, has the reference's bits): every rounding point of the reference stays (scores and
// probabilities in float32, the probabilities rounded to bf16 before the value sum, the sink in the
// denominator only, the bf16 output; the indexer's bf16 dot, relu, bf16 weighted term, bf16 total),
// and so does the online softmax's step of 64 keys in index order where the tile fits (the reference's
// block). What changes: sums run in other orders and with fmaf (a lane's slice of q·k, then a
// warp's tree; value sums fused), and a split index list is merged from partial softmax states,
// whose maxima differ from the reference's running maxima, so a probability may round to bf16 from
// another scale.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include "../../core/attention_math.hpp"
#include "../../core/compress_math.hpp"
#include "../../core/macros.hpp"
#include "../../core/numeric.hpp"
#include "../../core/torch_math.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::fast_attn {

// ------------------------------------------------------------------ the device's limits, as plans see them
struct DeviceLimits {
  int sm_count = 132;                  // H100/H200
  size_t smem_per_block = 227 * 1024;  // dynamic shared memory one block may opt in to
  size_t smem_per_sm = 228 * 1024;
};

constexpr int kThreads = 256;           // every tiled kernel: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kMaxHeadsPerBlock = 8;    // one warp per head in the softmax step
constexpr int kMaxTileKeys = kAttnBlock;  // 64: a warp's two keys per lane in the softmax step
constexpr int kMaxSplits = 64;          // partial states a combine block merges (its shared arrays)
constexpr int kSmemPerBlockReserved = 1024;  // what the device keeps per resident block

/// D rounded up to whole 4-float chunks: shared rows are padded with zeros to it, so every lane
/// reads whole chunks (fmaf(0, 0, acc) = acc: the padding adds nothing).
DS41_HD constexpr int padded_dim(int d) { return (d + 3) / 4 * 4; }

// ------------------------------------------------------------------ per-thread arithmetic
struct Vec4 {
  float x, y, z, w;
};
/// acc + q·k over one chunk, in chunk order, each step one fused multiply-add.
DS41_HD float fma_dot4(Vec4 q, Vec4 k, float acc) {
  acc = fmaf(q.x, k.x, acc);
  acc = fmaf(q.y, k.y, acc);
  acc = fmaf(q.z, k.z, acc);
  return fmaf(q.w, k.w, acc);
}
DS41_HD Vec4 load_vec4(const float* p) { return Vec4{p[0], p[1], p[2], p[3]}; }

/// A lane's share of q·k in the attention kernel's score step: the chunks at 4·lane + 128·i (i
/// ascending) of rows padded to padded_dim(D); a warp then adds the 32 lanes' shares as a
/// butterfly (xor 16, 8, 4, 2, 1).
DS41_HD float lane_score_share(const float* q, const float* k, int D4, int lane) {
  float acc = 0.0f;
  for (int d0 = 4 * lane; d0 < D4; d0 += 128) acc = fma_dot4(load_vec4(q + d0), load_vec4(k + d0), acc);
  return acc;
}

/// The running state of one head's online softmax over the part of the index list a block has
/// seen: max m (starts at the reference's -1e30, so an all-masked part leaves m and den as the
/// reference's do) and the denominator sum of exp(s - m).
struct SoftmaxState {
  float m = -1e30f;
  float den = 0.0f;
};
/// One tile's step: m moves to max(m, tile max) and the old sums are rescaled by the returned
/// alpha = exp(old m - new m) (exp_sleef_u10: the reference's exp).
DS41_HD float softmax_advance(SoftmaxState& st, float tile_max) {
  const float new_m = fmaxf(st.m, tile_max);
  const float alpha = exp_sleef_u10(st.m - new_m);
  st.m = new_m;
  return alpha;
}
/// A key's probability relative to the state's current max (unrounded: the denominator's term;
/// the value sum takes bf16_round of it, the reference's rounding point).
DS41_HD float softmax_prob(float s, const SoftmaxState& st) { return exp_sleef_u10(s - st.m); }
/// den = den·alpha + the tile's sum of probabilities.
DS41_HD void softmax_accumulate(SoftmaxState& st, float alpha, float tile_sum) { st.den = fmaf(st.den, alpha, tile_sum); }
/// acc·alpha + bf16(p)·v: a value accumulator's step per key (alpha applied once per tile).
DS41_HD float value_step(float acc, float p_bf16, float v) { return fmaf(p_bf16, v, acc); }

/// Merge two partial states of the same head (two splits of its index list): the merged max, and
/// the factor each side's sums are scaled by; sums merge as merge_sums(a, fa, b, fb).
DS41_HD SoftmaxState softmax_merge(SoftmaxState a, SoftmaxState b, float& fa, float& fb) {
  SoftmaxState r;
  r.m = fmaxf(a.m, b.m);
  fa = exp_sleef_u10(a.m - r.m);
  fb = exp_sleef_u10(b.m - r.m);
  r.den = fmaf(a.den, fa, b.den * fb);
  return r;
}
DS41_HD float merge_sums(float a, float fa, float b, float fb) { return fmaf(a, fa, b * fb); }

/// The reference's finish (core/attention_math.hpp's attn_denominator and attn_output, per element):
/// the sink joins the denominator only, out = bf16(acc/den).
DS41_HD float denominator_with_sink(const SoftmaxState& st, float sink) { return attn_denominator(st.den, st.m, sink); }

/// q·k of one (row, head) and one key in the index kernel: chunks in d order, fused.
DS41_HD float index_dot(const float* q, const float* k, int Di4) {
  float acc = 0.0f;
  for (int d0 = 0; d0 < Di4; d0 += 4) acc = fma_dot4(load_vec4(q + d0), load_vec4(k + d0), acc);
  return acc;
}

// ------------------------------------------------------------------ sparse attention's plan
/// How fast_sparse_attention tiles q [T, H, D] x idx [T, ncols] over kv: a block takes one query
/// row, heads_per_block of its heads and one split (a run of tiles of tile_keys index slots); per
/// tile it gathers the unmasked rows into shared memory once for all of its heads. With splits > 1
/// every block leaves a partial state and a combine kernel merges a head's splits.
struct SparseAttnPlan {
  bool tiled = false;  // false: one thread per (row, head) running sparse_attn_head (exact bits)
  int heads_per_block = 0, head_groups = 0;
  int tile_keys = 0, tiles = 0;
  int splits = 1, tiles_per_split = 0;
  int threads = kThreads;
  size_t shared_bytes = 0;
  long blocks = 0;  // T · head_groups · splits

  /// Block b's query row, head group and split (the kernel decodes blockIdx.x the same way).
  DS41_HD long row_of(long b) const { return b / (static_cast<long>(splits) * head_groups); }
  DS41_HD int group_of(long b) const { return static_cast<int>((b / splits) % head_groups); }
  DS41_HD int split_of(long b) const { return static_cast<int>(b % splits); }
  DS41_HD int first_head(int g) const { return g * heads_per_block; }
  DS41_HD int heads_in(int g, int H) const {
    return H - g * heads_per_block < heads_per_block ? H - g * heads_per_block : heads_per_block;
  }
  DS41_HD int first_tile(int s) const { return s * tiles_per_split; }
  DS41_HD int end_tile(int s) const { return (s + 1) * tiles_per_split < tiles ? (s + 1) * tiles_per_split : tiles; }
};

/// Shared bytes of a sparse-attention block: q and the value accumulators [hb][D4] each, the
/// tile's rows [tile][D4], scores [8][tile] and bf16 probabilities [tile][8], the heads' m, den,
/// alpha, and the tile's row list and count.
inline size_t sparse_attn_shared_bytes(int hb, int D, int tile_keys) {
  const size_t D4 = static_cast<size_t>(padded_dim(D));
  const size_t floats = 2 * hb * D4 + tile_keys * D4 + 2 * static_cast<size_t>(kMaxHeadsPerBlock) * tile_keys +
                        3 * kMaxHeadsPerBlock;
  return floats * 4 + static_cast<size_t>(tile_keys) * 4 + 16;
}

/// The plan for T query rows of H heads of D over ncols index slots. Heads: up to 8 per block,
/// spread evenly over the groups (H = 64: 8 groups of 8). Tile: 64 keys (the reference's block)
/// when the block fits the device's shared memory, else 32 or 16; a D too large for 16 falls back
/// to the untiled kernel. Splits: enough to fill one wave of resident blocks when T · groups does
/// not (decode), never more than the tiles, at most kMaxSplits; a split is whole tiles.
inline SparseAttnPlan plan_sparse_attention(long T, int H, int D, int ncols, const DeviceLimits& lim) {
  SparseAttnPlan p;
  if (T <= 0 || H <= 0 || D <= 0 || ncols <= 0) return p;  // nothing to tile (ncols 0: the untiled kernel)
  p.head_groups = (H + kMaxHeadsPerBlock - 1) / kMaxHeadsPerBlock;
  p.heads_per_block = (H + p.head_groups - 1) / p.head_groups;
  for (int tk = kMaxTileKeys; tk >= 16 && !p.tile_keys; tk /= 2)
    if (sparse_attn_shared_bytes(p.heads_per_block, D, tk) <= lim.smem_per_block) p.tile_keys = tk;
  if (!p.tile_keys) return SparseAttnPlan{};
  p.shared_bytes = sparse_attn_shared_bytes(p.heads_per_block, D, p.tile_keys);
  p.tiles = (ncols + p.tile_keys - 1) / p.tile_keys;
  const long per_sm = std::clamp<long>(static_cast<long>(lim.smem_per_sm / (p.shared_bytes + kSmemPerBlockReserved)),
                                       1, 2048 / kThreads);
  const long wave = static_cast<long>(std::max(lim.sm_count, 1)) * per_sm;
  const long base = T * p.head_groups;
  const long want = std::clamp<long>(wave / base, 1, std::min(p.tiles, kMaxSplits));
  p.tiles_per_split = static_cast<int>((p.tiles + want - 1) / want);
  p.splits = (p.tiles + p.tiles_per_split - 1) / p.tiles_per_split;
  p.blocks = base * p.splits;
  if (p.blocks > 0x7fffffffL) return SparseAttnPlan{};
  p.tiled = true;
  return p;
}

// ------------------------------------------------------------------ index scores' plan
/// How fast_index_scores tiles score[T, nk]: a block takes rows_per_block query rows and
/// keys_per_block keys, stages their q [rows·H][stride], w and keys [keys][stride] in shared memory
/// (stride ≡ 4 mod 32 floats: lanes reading consecutive (row, head) rows as 16-byte chunks hit
/// distinct banks), gives a thread one (row, head) and four keys at a time, parks the heads' terms
/// [rows·H][keys + 1] and sums each score's terms over h in order.
struct IndexScoresPlan {
  bool tiled = false;  // false: one thread per entry running index_score_entry (exact bits)
  int rows_per_block = 0, keys_per_block = 0;
  int stride = 0;  // floats per staged q or key row
  int threads = kThreads;
  size_t shared_bytes = 0;
  long row_blocks = 0, key_blocks = 0, blocks = 0;

  DS41_HD long row_block_of(long b) const { return b / key_blocks; }
  DS41_HD long key_block_of(long b) const { return b % key_blocks; }
};

DS41_HD constexpr int index_stride(int Di) { return padded_dim(Di) + (36 - padded_dim(Di) % 32) % 32; }
inline size_t index_scores_shared_bytes(int rows, int keys, int H, int Di) {
  const size_t S = static_cast<size_t>(index_stride(Di)), items = static_cast<size_t>(rows) * H;
  return 4 * (items * S + items + keys * S + items * (keys + 1));
}

/// The plan for T rows of H heads of Di against nk keys. small_bmm (the reference's bf16-running
/// tiny bmm, contraction · rows · cols < 400) keeps the untiled exact kernel: such a problem is a
/// few hundred multiply-adds, and the bf16 running sum is a rounding point of the reference, not a
/// summation order. Else the largest tile (rows 8..1 up to T, keys 64..16) that fits and gives a
/// wave of blocks; when none gives a wave (decode), the one with the most blocks.
inline IndexScoresPlan plan_index_scores(long T, int H, int Di, long nk, bool small_bmm, const DeviceLimits& lim) {
  IndexScoresPlan p;
  if (T <= 0 || H <= 0 || Di <= 0 || nk <= 0 || small_bmm) return p;
  const long wave = std::max(lim.sm_count, 1);
  long best_blocks = 0;
  for (int rows = 8; rows >= 1; rows /= 2) {
    if (rows > 1 && rows / 2 >= T) continue;  // no more rows per block than T needs
    for (int keys = 64; keys >= 16; keys /= 2) {
      const size_t bytes = index_scores_shared_bytes(rows, keys, H, Di);
      if (bytes > lim.smem_per_block) continue;
      const long rb = (T + rows - 1) / rows, kb = (nk + keys - 1) / keys;
      const bool better = best_blocks < wave ? rb * kb > best_blocks : false;
      if (!p.tiled || better) {
        p.tiled = true;
        p.rows_per_block = rows;
        p.keys_per_block = keys;
        p.shared_bytes = bytes;
        p.row_blocks = rb;
        p.key_blocks = kb;
        p.blocks = rb * kb;
        best_blocks = p.blocks;
      }
    }
  }
  if (!p.tiled || p.blocks > 0x7fffffffL) return IndexScoresPlan{};
  p.stride = index_stride(Di);
  return p;
}

}  // namespace ds41::fast_attn
#include "../../core/fp_exact_end.hpp"
