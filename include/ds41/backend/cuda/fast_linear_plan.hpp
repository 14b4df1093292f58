// ds41/backend/cuda/fast_linear_plan.hpp — the fast policy's decode Linear (cuda/fast_linear.hpp):
// its tiling plan and its per-thread arithmetic, as host-callable code, so that tests without a
// GPU check the plan's coverage and limits and emulate the kernel's sums (tests/test_fast_plan.cpp).
//
// The kernel streams the weights once per call: a block of kFastWarps warps owns rows_per_block
// output rows (rows_per_warp per warp) and one K slice (`splits` slices along grid.y); each lane
// takes the 16-byte weight chunks lane, lane + 32, ... of its warp's rows in the slice, decodes
// them in registers and multiplies them with the input rows' values staged once per block in
// shared memory (act_quant's q for fp8/fp4, the raw rows for bf16), fusing the multiply-adds.
// The warp's lanes are added by an xor butterfly, the splits (when the plan has more than one)
// by a second pass in split order, then the output is rounded per OutRound. fp8/fp4 keep the
// reference's rounding points: the input's act_quant codes (the exact path's warp_act_quant),
// one float32 partial per (32-column block, or half of it for fp8) times s_x·s_w.
#pragma once
#include <cstddef>
#include <cstdint>
#include "../../core/linear_math.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {

constexpr int kFastWarps = 8;                       // warps per block
constexpr int kFastThreads = kFastWarps * 32;       // threads per block
constexpr int kFastMaxRows = 16;                    // input rows the fast kernel takes (decode, small batches)
constexpr size_t kFastSharedBudget = 96 * 1024;     // dynamic shared memory a block may ask for (two blocks per SM)
constexpr int kFastMaxGridY = 65535;

/// Columns of one 16-byte weight chunk: fp8 16 (half a scale block), fp4 32 (one block), bf16 8;
/// 0 for formats the fast kernel does not take.
DS41_HD constexpr int fast_chunk_cols(WeightFormat f) {
  return f == WeightFormat::kFp8Block32 ? 16 : f == WeightFormat::kFp4Block32 ? 32 : f == WeightFormat::kBF16 ? 8 : 0;
}
/// Shared floats per chunk of staged input: 4 more than its columns (20, 36, 12), so that the 8
/// lanes of one phase of a warp's 128-bit shared loads (consecutive chunks, the same offset in
/// each) cover 8 distinct groups of 4 banks.
DS41_HD constexpr int fast_q_pitch(WeightFormat f) { return fast_chunk_cols(f) + 4; }
/// Input rows a kernel is compiled for: the smallest of 1, 2, 4, 8, 16 holding T (the staged rows
/// past T are zeros).
DS41_HD constexpr int fast_t_tile(int T) { return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : T <= 8 ? 8 : 16; }
/// Output rows per warp: 4 while T is small (more weight loads in flight per lane), 2 for 8 and
/// 16 input rows (the R x T accumulators and partials stay in registers).
DS41_HD constexpr int fast_rows_per_warp(int t_tile) { return t_tile <= 4 ? 4 : 2; }

struct FastLinearPlan {
  bool ok = false;
  const char* reason = "";  // why the plan rejects the shape (ok == false): the exact kernels run
  WeightFormat format = WeightFormat::kBF16;
  int rows_out = 0, cols = 0, T = 0;
  int t_tile = 0;          // the kernel's compiled input rows (>= T)
  int rows_per_warp = 0;
  int warps = kFastWarps;
  int threads = kFastThreads;
  int rows_per_block = 0;  // warps · rows_per_warp
  int chunk_cols = 0;      // columns per 16-byte chunk
  int q_pitch = 0;         // shared floats per chunk of one staged input row
  int k_slice = 0;         // columns per split (a multiple of chunk_cols · 32, or all of cols)
  int splits = 0;          // K slices (grid.y); > 1: partial sums in a workspace, added by a second pass
  long grid_x = 0, grid_y = 0;
  size_t shared_bytes = 0;      // dynamic shared memory per block
  size_t workspace_floats = 0;  // device workspace: q [T][cols] and s_x [T][cols/32] (fp8/fp4), partials [splits][T][rows_out]

  /// Columns [k0, k1) of split s.
  DS41_HD int slice_begin(int s) const { return s * k_slice; }
  DS41_HD int slice_end(int s) const { return (s + 1) * k_slice < cols ? (s + 1) * k_slice : cols; }
  /// Offsets into the workspace (floats).
  DS41_HD size_t ws_scales() const { return block_scaled() ? static_cast<size_t>(T) * cols : 0; }
  DS41_HD size_t ws_partials() const { return block_scaled() ? ws_scales() + static_cast<size_t>(T) * (cols / 32) : 0; }
  DS41_HD bool block_scaled() const { return format_block_scaled(format); }
};

/// Shared bytes a block needs for a K slice of `k_slice` columns and t_tile staged input rows: the
/// rows' values at q_pitch floats per chunk, and (fp8/fp4) their act_quant scale per 32 columns.
DS41_HD constexpr size_t fast_shared_bytes(WeightFormat f, int t_tile, int k_slice) {
  const size_t chunks = static_cast<size_t>((k_slice + fast_chunk_cols(f) - 1) / fast_chunk_cols(f));
  const bool scaled = f == WeightFormat::kFp8Block32 || f == WeightFormat::kFp4Block32;
  return static_cast<size_t>(t_tile) * (chunks * fast_q_pitch(f) + (scaled ? static_cast<size_t>((k_slice + 31) / 32) : 0)) * sizeof(float);
}

/// The tiling of y = x·Wᵀ for T input rows on a device with sm_count multiprocessors, or a
/// rejection (plan.ok == false, plan.reason) for what the fast kernel does not take: f32, more than
/// kFastMaxRows input rows (prefill), fp8/fp4 with cols % 32 != 0, bf16 with cols % 8 != 0.
/// Splits: only where the row blocks alone fill fewer than two blocks per multiprocessor, or where
/// one slice's staged input would exceed shared_limit; slices are whole warp spans (32 chunks).
inline FastLinearPlan plan_fast_linear(int rows_out, int cols, int T, WeightFormat format, int sm_count,
                                       size_t shared_limit = kFastSharedBudget) {
  FastLinearPlan p;
  p.format = format;
  p.rows_out = rows_out;
  p.cols = cols;
  p.T = T;
  if (rows_out <= 0 || cols <= 0 || T <= 0) return p.reason = "empty Linear", p;
  if (T > kFastMaxRows) return p.reason = "more than 16 input rows (prefill: the exact tiled kernel)", p;
  if (fast_chunk_cols(format) == 0) return p.reason = "format without a fast kernel (f32, GGUF blocks)", p;
  if (p.block_scaled() && cols % 32 != 0) return p.reason = "fp8/fp4 with a short last scale block", p;
  if (cols % fast_chunk_cols(format) != 0) return p.reason = "cols not a whole number of 16-byte chunks", p;
  p.t_tile = fast_t_tile(T);
  p.rows_per_warp = fast_rows_per_warp(p.t_tile);
  p.rows_per_block = p.warps * p.rows_per_warp;
  p.chunk_cols = fast_chunk_cols(format);
  p.q_pitch = fast_q_pitch(format);
  const int span = 32 * p.chunk_cols;  // one warp step: a chunk per lane
  const size_t per_span = fast_shared_bytes(format, p.t_tile, span);
  if (per_span > shared_limit) return p.reason = "one warp span of staged input exceeds the shared memory limit", p;
  const long max_slice = static_cast<long>(shared_limit / per_span) * span;  // whole spans that fit
  const long row_blocks = (static_cast<long>(rows_out) + p.rows_per_block - 1) / p.rows_per_block;
  const long spans = (static_cast<long>(cols) + span - 1) / span;
  // what shared memory forces: none when the whole row's staged input fits, else whole spans
  const long min_splits = fast_shared_bytes(format, p.t_tile, cols) <= shared_limit ? 1 : (cols + max_slice - 1) / max_slice;
  const long target_blocks = 2L * (sm_count > 0 ? sm_count : 1);
  long want = row_blocks >= target_blocks ? 1 : (target_blocks + row_blocks - 1) / row_blocks;
  if (want > spans) want = spans;
  long splits = want > min_splits ? want : min_splits;
  long slice = ((cols + splits - 1) / splits + span - 1) / span * span;
  if (slice >= cols) slice = cols;
  splits = (cols + slice - 1) / slice;
  if (splits > kFastMaxGridY) return p.reason = "too many K splits", p;
  p.k_slice = static_cast<int>(slice);
  p.splits = static_cast<int>(splits);
  p.grid_x = row_blocks;
  p.grid_y = splits;
  p.shared_bytes = fast_shared_bytes(format, p.t_tile, p.k_slice);
  if (p.shared_bytes > shared_limit) return p.reason = "staged input exceeds the shared memory limit", p;
  p.workspace_floats = p.ws_partials() + (p.splits > 1 ? static_cast<size_t>(p.splits) * T * rows_out : 0);
  p.ok = true;
  return p;
}

// ------------------------------------------------------------------ per-thread arithmetic (atoms)
/// One 16-byte weight chunk as four little-endian 32-bit words (a uint4 on the device).
struct FastChunk {
  uint32_t w[4];
};

/// e2m1 nibble → float by bit placement: the 3 magnitude bits at float bits 24..22 read as
/// 2^(e-127)·(1 + m/2) (e > 0) or the subnormal m·2^-127 (e = 0); times 2^126 that is the e2m1
/// value. The same bits as e2m1_decode for all 16 codes (test_fast_plan); needs subnormals kept.
DS41_HD float e2m1_decode_shift(uint32_t code) {
  const float a = bits_f32((code & 7u) << 22) * 0x1p126f;
  return bits_f32(f32_bits(a) | ((code & 8u) << 28));
}

/// Column j of a chunk, decoded: fp8 byte j (e4m3_decode_shift), fp4 nibble j (low first), bf16
/// half j. Only the value, before any block scale.
template <WeightFormat F>
DS41_HD float fast_chunk_value(const FastChunk& c, int j) {
  if constexpr (F == WeightFormat::kFp8Block32) {
    return e4m3_decode_shift((c.w[j / 4] >> (8 * (j % 4))) & 0xFFu);
  } else if constexpr (F == WeightFormat::kFp4Block32) {
    return e2m1_decode_shift((c.w[j / 8] >> (4 * (j % 8))) & 0xFu);
  } else {
    return bf16_to_f32(static_cast<uint16_t>((c.w[j / 2] >> (16 * (j % 2))) & 0xFFFFu));
  }
}

/// acc + Σ q[j]·w[j] for four columns, each product fused into the running sum (one rounding per
/// column instead of the reference's two).
DS41_HD float fast_fma4(float acc, const float* q4, const float* w4) {
  acc = fmaf(q4[0], w4[0], acc);
  acc = fmaf(q4[1], w4[1], acc);
  acc = fmaf(q4[2], w4[2], acc);
  acc = fmaf(q4[3], w4[3], acc);
  return acc;
}

/// A block-scaled partial's contribution: acc + part·(s_x·s_w), one rounding (s_x is a power of
/// two, so s_x·s_w is exact unless it leaves float32's range, as (part·s_x)·s_w would too).
DS41_HD float fast_scaled_term(float acc, float part, float sx, float sw) { return fmaf(part, sx * sw, acc); }

/// The warp's xor butterfly on 32 lane values (host emulation of the shuffles: at each offset lane
/// l adds lane l ^ o's value; a + b and b + a are the same float, so every lane ends with v[0]).
DS41_HD float fast_butterfly_sum(float* v) {
  for (int o = 16; o > 0; o >>= 1) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ o];
    for (int l = 0; l < 32; ++l) v[l] = next[l];
  }
  return v[0];
}

/// The splits' partial sums of one output, added in split order (the second pass).
DS41_HD float fast_split_sum(const float* part, int splits, long stride) {
  float acc = part[0];
  for (int s = 1; s < splits; ++s) acc += part[s * stride];
  return acc;
}

}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
