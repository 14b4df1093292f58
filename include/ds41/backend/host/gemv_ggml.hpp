// ds41/backend/host/gemv_ggml.hpp — the host Linear over a GGUF file's blocks kept as stored
// (WeightFormat::kGgmlBlocks: F16 and every block type but MXFP4), bit-identical to MatrixView::dot,
// which is dot_f32 over the blocks' values (core/ggml_quants.hpp). Issue 39's oracle is "widen to
// f32, then the f32 Linear": the same products x[k]·v[k], added in K order into one float per
// output, so this kernel decodes the values and runs gemv.hpp's f32 arithmetic on them.
//
// Why lanes are rows (as gemv.hpp): each output is ONE chain of adds in K order; eight output rows
// side by side run eight chains with one vector add. A tile is kGroups vectors of 8 rows (32 rows:
// four independent chains for the decode GEMV).
//
// Two layouts. The host's upload repacks the types with per-element code fields (Q1_0..Q8_0, the
// K-quants, IQ4_NL, IQ4_XS, TQ2_0, NVFP4, F16) into 8-row panels of the same bytes
// (core/ggml_panels.hpp), where a column of 8 rows decodes straight into a vector (a broadcast, a
// variable shift and a mask, or a permute of the type's value table: ggml_panel_decoders.hpp; each
// type's decoder its own instantiation, visit_panel_type): the decode GEMV decodes the tile's four
// panels side by side into its four chains (Q2_K and TQ2_0 with AVX-512: two panels to a 16-lane
// vector, ggml_panel_pairs512.hpp); T > 1 decodes each 256-column segment once into a column buffer
// and applies it to up to kRowChunk input rows. The other types (the IQ grid types, TQ1_0) and any
// view left row-major are decoded row by row (ggml_row_decoders.hpp's vector decoders for the IQ
// grid types, else core/ggml_quants.hpp's scalar ones) and transposed to columns, 8 rows at a time;
// rows past the last whole 8-row vector go through MatrixView::dot. With AVX-512 VBMI the IQ grid
// types and TQ1_0 instead decode whole 32-row tiles 16 rows to a vector (ggml_grid_rows512.hpp,
// linear_rows_grid), 2.4-3.1x faster at T = 1 (docs/PERFORMANCE.md, session 35); without it the
// 2- and 3-bit grid types take whole 32-row tiles 8 rows to a vector, transposed as bytes
// (ggml_slot_rows.hpp, linear_rows_slots; session 39).
//
// Compiled for AVX2 (panels: AVX2 and F16C) when the translation unit has it; otherwise (and in
// nvcc's device pass, which never sees this) every row goes through MatrixView::dot. With
// AVX-512 (DS41_HOST_AVX512) T > 1 applies the decoded columns in 16-lane vectors, unless the call
// asks for the AVX2 kernels (VectorIsa::kAvx2, which the tests use to run both).
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include "../../core/ggml_quants.hpp"
#include "../../core/linear_math.hpp"
#include "../../core/simd_avx2.hpp"
#include "bf16_range512.hpp"  // DS41_HOST_AVX512
#include "ggml_grid_rows512.hpp"
#include "ggml_panel_decoders.hpp"  // DS41_HOST_GGML_PANELS
#include "ggml_panel_pairs512.hpp"   // DS41_HOST_GGML_PAIRS512
#include "ggml_row_decoders.hpp"
#include "ggml_slot_rows.hpp"  // DS41_HOST_GGML_SLOT_ROWS
#include "linear_call.hpp"
#include "prefetch_l2.hpp"
#include "unrolled.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml {

/// Whether this kernel serves the view: GGUF blocks, row-major or in panels (core/ggml_panels.hpp).
inline bool usable(const MatrixView& w) {
  return w.format == WeightFormat::kGgmlBlocks && ggml_linear_type(w.ggml_type) &&
         (w.layout == WeightLayout::kRowMajor || ggml_panel_type(w.ggml_type));
}

// ---------------------------------------------------------------- the panel repack
/// Whether pack() takes the view: row-major blocks of a type with panels, where the panel kernel
/// is compiled.
inline bool packable(const MatrixView& src) {
#if defined(DS41_HOST_GGML_PANELS)
  return src.format == WeightFormat::kGgmlBlocks && src.layout == WeightLayout::kRowMajor && src.rows > 0 &&
         src.cols > 0 && ggml_panel_type(src.ggml_type);
#else
  (void)src;
  return false;
#endif
}
/// Bytes pack() writes: every 8-row panel (the last one's missing rows as zero blocks).
inline size_t packed_bytes(const MatrixView& src) {
  const long panels = (src.rows + kPanelRows - 1) / kPanelRows, blocks = src.cols / ggml_block_elems(src.ggml_type);
  return static_cast<size_t>(panels * blocks * ggml_panel_block_bytes(src.ggml_type));
}
/// Repacks a packable view into panels at `out` (packed_bytes(src) bytes); returns the panel view.
inline MatrixView pack(const MatrixView& src, uint8_t* out) {
  const GgmlType t = src.ggml_type;
  const long blocks = src.cols / ggml_block_elems(t), bb = ggml_block_bytes(t), pbb = ggml_panel_block_bytes(t);
  const long rb = src.row_bytes(), panels = (src.rows + kPanelRows - 1) / kPanelRows;
  const auto* data = static_cast<const uint8_t*>(src.data);
  if (t == GgmlType::kF16) {  // a panel block is one column's 8 values: interleave the rows' f16s
    for (long p = 0; p < panels; ++p)
      for (int i = 0; i < kPanelRows; ++i) {
        const long r = p * kPanelRows + i;
        uint8_t* o = out + p * blocks * pbb + 2 * i;
        if (r >= src.rows) {
          for (long k = 0; k < blocks; ++k) o[k * pbb] = 0, o[k * pbb + 1] = 0;
          continue;
        }
        const uint8_t* row = data + r * rb;
        for (long k = 0; k < blocks; ++k) o[k * pbb] = row[2 * k], o[k * pbb + 1] = row[2 * k + 1];
      }
  }
  for (long p = 0; p < panels && t != GgmlType::kF16; ++p)
    for (long b = 0; b < blocks; ++b) {
      const uint8_t* rows[kPanelRows];
      for (int i = 0; i < kPanelRows; ++i) {
        const long r = p * kPanelRows + i;
        rows[i] = r < src.rows ? data + r * rb + b * bb : nullptr;
      }
      ggml_panel_pack(t, rows, out + (p * blocks + b) * pbb);
    }
  MatrixView v = src;
  v.layout = WeightLayout::kPanels8;
  v.data = out;
  v.row0 = 0;
  return v;
}

#if defined(DS41_HOST_AVX512)
/// Whether x·d is zero or a normal float for every input x[0..K) and every f16 scale d (0, or
/// 2^-24 <= |d| <= 65504): every x is 0 or 2^-102 <= |x| <= 2^96 (bf16_range512.hpp's magnitude
/// scan; an inf or NaN input fails too). Where so, the ternary types' decode GEMVs take their
/// codes as factors (f·(x·d) is x·(f·d) exactly for f = −1, 0, 1 and 2: no product leaves the
/// normal range); elsewhere they take the values, with the same bits.
inline bool products_normal(const float* x, long K) {
  host_exact::Bf16Range r;  // only its magnitudes are asked (not whether the values are bf16)
  host_exact::add_values(r, x, K);
  return r.hi_bits == 0 || (r.lo() >= 0x1p-102f && r.hi() <= 0x1p96f);  // NaN's bits: above inf's
}
#endif
/// Whether the decode GEMV of TQ1_0 and TQ2_0 may take their codes as factors (ggml_grid_rows512.hpp's
/// tq1_chains, ggml_panel_pairs512.hpp's tq2_factor_chains; AVX-512 builds): one input row whose
/// products with every f16 scale are zero or normal (products_normal).
inline bool codes_as_factors(const float* x, long T, const MatrixView& w) {
#if defined(DS41_HOST_AVX512)
  return T == 1 && w.format == WeightFormat::kGgmlBlocks &&
         (w.ggml_type == GgmlType::kTQ1_0 || w.ggml_type == GgmlType::kTQ2_0) && products_normal(x, w.cols);
#else
  (void)x, (void)T, (void)w;
  return false;
#endif
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ), one output at a time (the oracle; every build).
inline void linear_rows_scalar(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                               OutRound round, int n_begin, int n_end) {
  for (long t = 0; t < T; ++t)
    for (int n = n_begin; n < n_end; ++n) y[t * y_stride + n] = apply_round(w.dot(x + t * x_stride, n), round);
}

#if defined(DS41_HOST_AVX2)
constexpr int kGroups = 4;      // 8-row vectors per tile
constexpr int kSegment = 256;   // columns decoded at a time
constexpr int kRowChunk = 16;   // input rows sharing one decoded segment

#if defined(DS41_HOST_AVX512)
/// The decode GEMV's sink for a tile's 32 rows as two 16-lane vectors (the IQ grid types and
/// TQ1_0, ggml_grid_rows512.hpp; the 2-bit panel types, ggml_panel_pairs512.hpp): x[e] times column
/// e of each added into its own chain (the f32 Linear's multiply and add, each rounded on its own).
struct ChainSink512 {
  const float* x;
  __m512 a[2];
  DS41_ALWAYS_INLINE void operator()(int e, const __m512* v) {
    const __m512 xv = _mm512_set1_ps(x[e]);
    a[0] = _mm512_add_ps(a[0], _mm512_mul_ps(xv, v[0]));
    a[1] = _mm512_add_ps(a[1], _mm512_mul_ps(xv, v[1]));
  }
};
#endif

// ---------------------------------------------------------------- row decoders
// The row-major path serves the types without panels (the IQ types, TQ1_0) and views left
// row-major; the panel types decode column by column from their panels (below). The IQ types with
// grids have vector row decoders (ggml_row_decoders.hpp); the rest take core/ggml_quants.hpp's
// scalar definition.

/// Lines to ask for in L2 while apply_columns runs, one a column of its first pass: the next
/// segment's blocks of the tile's panels (at most one line a column: F16, the widest type, has 2
/// bytes a weight, 64 a column of 32 rows). Asked for all at once (prefetch_segment) they held
/// the fill buffers and stalled the issue; asked for one a column they arrive in time and cost a
/// slot each.
/// A panel's bytes for the segment of n columns (whole blocks).
inline long segment_bytes(GgmlType t, int n) {
  const long be = ggml_block_elems(t);
  return (n + be - 1) / be * ggml_panel_block_bytes(t);
}
struct SegmentLines {
  uintptr_t line[kSegment];
  int count = 0;
  /// The lines of the segment at block b (n columns) of panels [p0, p0 + G), as prefetch_segment
  /// asks for them.
  void set(const MatrixView& w, long p0, long b, int n, int G) {
    count = 0;
    const long bytes = segment_bytes(w.ggml_type, n);
    for (int g = 0; g < G; ++g) {
      const auto p = reinterpret_cast<uintptr_t>(w.ggml_panel_block(p0 + g, b));
      for (uintptr_t at = p & ~uintptr_t{63}; at < p + bytes && count < kSegment; at += 64) line[count++] = at;
    }
  }
  DS41_ALWAYS_INLINE void ask(int j) const { _mm_prefetch(reinterpret_cast<const char*>(line[j]), _MM_HINT_T1); }
};

/// acc[t][g] += x[t][j] · cols[j][g] for j < n, in j order, for tc input rows (row t at x + t ·
/// x_stride) and G 8-row groups: the f32 Linear's mul and add per lane, each rounded on its own.
/// Each chain waits on its own add's latency at every column, so a whole tile runs several input
/// rows side by side: with AVX-512 (`wide`) four rows in 16-lane vectors (two groups a vector:
/// cols[j] holds the groups side by side for that), else two rows, eight 8-lane chains. Every
/// lane's chain still adds its columns in j order: the bits are those of one row alone.
inline void apply_columns(const float* x, long x_stride, int tc, int G, int n, const float (*cols)[kGroups][8],
                          float (*acc)[kGroups][8], bool wide, const SegmentLines* next = nullptr) {
  int t = 0;
  const int asks = next ? next->count : 0;  // lines asked for in the first pass, one a column
#if defined(DS41_HOST_AVX512)
  if (G == kGroups && wide)
    for (; t + 4 <= tc; t += 4) {
      const float* xr = x + t * x_stride;
      __m512 a[4][2];
      DS41_UNROLL for (int r = 0; r < 4; ++r)
        DS41_UNROLL for (int h = 0; h < 2; ++h) a[r][h] = _mm512_load_ps(acc[t + r][2 * h]);
      for (int j = 0; j < n; ++j) {
        if (t == 0 && j < asks) next->ask(j);
        const __m512 c0 = _mm512_load_ps(cols[j][0]), c1 = _mm512_load_ps(cols[j][2]);
        DS41_UNROLL for (int r = 0; r < 4; ++r) {
          const __m512 xv = _mm512_set1_ps(xr[r * x_stride + j]);
          a[r][0] = _mm512_add_ps(a[r][0], _mm512_mul_ps(xv, c0));
          a[r][1] = _mm512_add_ps(a[r][1], _mm512_mul_ps(xv, c1));
        }
      }
      DS41_UNROLL for (int r = 0; r < 4; ++r)
        DS41_UNROLL for (int h = 0; h < 2; ++h) _mm512_store_ps(acc[t + r][2 * h], a[r][h]);
    }
#else
  (void)wide;
#endif
  if (G == kGroups)
    for (; t + 2 <= tc; t += 2) {
      const float* x0 = x + t * x_stride;
      const float* x1 = x0 + x_stride;
      __m256 a0 = _mm256_load_ps(acc[t][0]), a1 = _mm256_load_ps(acc[t][1]);
      __m256 a2 = _mm256_load_ps(acc[t][2]), a3 = _mm256_load_ps(acc[t][3]);
      __m256 b0 = _mm256_load_ps(acc[t + 1][0]), b1 = _mm256_load_ps(acc[t + 1][1]);
      __m256 b2 = _mm256_load_ps(acc[t + 1][2]), b3 = _mm256_load_ps(acc[t + 1][3]);
      for (int j = 0; j < n; ++j) {
        if (t == 0 && j < asks) next->ask(j);
        const __m256 xv = _mm256_set1_ps(x0[j]), xw = _mm256_set1_ps(x1[j]);
        const __m256 c0 = _mm256_load_ps(cols[j][0]), c1 = _mm256_load_ps(cols[j][1]);
        const __m256 c2 = _mm256_load_ps(cols[j][2]), c3 = _mm256_load_ps(cols[j][3]);
        a0 = _mm256_add_ps(a0, _mm256_mul_ps(xv, c0)), b0 = _mm256_add_ps(b0, _mm256_mul_ps(xw, c0));
        a1 = _mm256_add_ps(a1, _mm256_mul_ps(xv, c1)), b1 = _mm256_add_ps(b1, _mm256_mul_ps(xw, c1));
        a2 = _mm256_add_ps(a2, _mm256_mul_ps(xv, c2)), b2 = _mm256_add_ps(b2, _mm256_mul_ps(xw, c2));
        a3 = _mm256_add_ps(a3, _mm256_mul_ps(xv, c3)), b3 = _mm256_add_ps(b3, _mm256_mul_ps(xw, c3));
      }
      _mm256_store_ps(acc[t][0], a0), _mm256_store_ps(acc[t][1], a1);
      _mm256_store_ps(acc[t][2], a2), _mm256_store_ps(acc[t][3], a3);
      _mm256_store_ps(acc[t + 1][0], b0), _mm256_store_ps(acc[t + 1][1], b1);
      _mm256_store_ps(acc[t + 1][2], b2), _mm256_store_ps(acc[t + 1][3], b3);
    }
  for (; t < tc && G == kGroups; ++t) {  // one row: its four groups' chains side by side
    const float* xr = x + t * x_stride;
    __m256 a0 = _mm256_load_ps(acc[t][0]), a1 = _mm256_load_ps(acc[t][1]);
    __m256 a2 = _mm256_load_ps(acc[t][2]), a3 = _mm256_load_ps(acc[t][3]);
    for (int j = 0; j < n; ++j) {
      const __m256 xv = _mm256_set1_ps(xr[j]);
      a0 = _mm256_add_ps(a0, _mm256_mul_ps(xv, _mm256_load_ps(cols[j][0])));
      a1 = _mm256_add_ps(a1, _mm256_mul_ps(xv, _mm256_load_ps(cols[j][1])));
      a2 = _mm256_add_ps(a2, _mm256_mul_ps(xv, _mm256_load_ps(cols[j][2])));
      a3 = _mm256_add_ps(a3, _mm256_mul_ps(xv, _mm256_load_ps(cols[j][3])));
    }
    _mm256_store_ps(acc[t][0], a0), _mm256_store_ps(acc[t][1], a1);
    _mm256_store_ps(acc[t][2], a2), _mm256_store_ps(acc[t][3], a3);
  }
  for (; t < tc; ++t) {
    const float* xr = x + t * x_stride;
    DS41_UNROLL for (int g = 0; g < G; ++g) {
      __m256 a = _mm256_load_ps(acc[t][g]);
      for (int j = 0; j < n; ++j) a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(xr[j]), _mm256_load_ps(cols[j][g])));
      _mm256_store_ps(acc[t][g], a);
    }
  }
}

/// Values of columns [0, n) of one row's segment (n: a whole number of blocks, or F16's tail).
inline void decode_segment(GgmlType t, const uint8_t* src, int n, float* out) {
  if (const RowDecoder decode = row_decoder(t)) {
    const int be = ggml_block_elems(t), bb = ggml_block_bytes(t);
    for (int b = 0; b < n / be; ++b) decode(src + static_cast<long>(bb) * b, out + static_cast<long>(be) * b);
    return;
  }
  dequantize_ggml_linear_blocks(t, src, t == GgmlType::kF16 ? n : n / ggml_block_elems(t), out);
}

#if defined(DS41_HOST_GGML_PANELS)

/// One panel's columns [0, n) into cols[e][g] (the multi-row path's buffer: a column's groups side by side).
template <GgmlType t>
void decode_panel(const uint8_t* pb, int n, float (*cols)[kGroups][8], int g) {
  decode_panels<t, 1>(&pb, n, [cols, g](int e, const __m256* v) { _mm256_store_ps(cols[e][g], v[0]); });
}

/// The decode GEMV's sink: x[e] times each panel's column e added into its own chain.
struct ChainSink {
  const float* x;
  __m256 a[kGroups];
  DS41_ALWAYS_INLINE void operator()(int e, const __m256* v) {
    const __m256 xv = _mm256_set1_ps(x[e]);
    DS41_UNROLL for (int g = 0; g < kGroups; ++g) a[g] = _mm256_add_ps(a[g], _mm256_mul_ps(xv, v[g]));
  }
};

/// f(std::integral_constant<GgmlType, t>{}) for the panel type t (ggml_panel_type): the one
/// dispatch from the runtime type to the panel kernel's template, so that each type's loops
/// compile on their own (one function for every type let the compiler's choices for one type move
/// another's time by 15-45%).
template <class F>
void visit_panel_type(GgmlType t, F&& f) {
  if (t == GgmlType::kF16) return f(std::integral_constant<GgmlType, GgmlType::kF16>{});
  visit_ggml_block_format(
      t,
      [&](auto format) {
        constexpr GgmlType kType = decltype(format)::kType;
        if constexpr (ggml_panel_type(kType)) f(std::integral_constant<GgmlType, kType>{});
      },
      [] {});
}

/// Whether the decode GEMV asks for a segment's blocks (all four panels') at the segment's start.
/// Tuning, measured (docs/PERFORMANCE.md, session 36; 2 threads, 1280 and 2304 x 5120, time with
/// / without, two rounds): Q4_K 0.77-0.81, Q6_K 0.81-0.83, Q5_K 0.87-0.88, Q4_0 0.87-0.94, Q4_1
/// 0.86-0.91, Q3_K 0.96-0.97, IQ4_NL 0.96-1.01. Four panels read side by side are four short
/// streams (as for the fp8/fp4 panels, prefetch_l2.hpp), and the out-of-order window reaches only a
/// line or two ahead in each. The types read fastest (F16, Q8_0, Q5_0, Q5_1, TQ2_0, NVFP4) ran
/// 2-14% slower with it (presumably the hardware prefetcher keeps ahead of their streams, and the
/// 36-256 prefetches a segment only cost); IQ4_XS and the 1- and 2-bit types were no faster. Q2_K
/// was no faster at K = 5120 or 8192 but is at K = 1280 and 2304 (short panels, which the hardware
/// prefetcher has no time to learn): 32768 x 1280 0.82-0.83, 5120 x 2304 0.89-0.93 (session 37;
/// Q8_0 and F16 were up to 25% slower with it, at every shape). Asking a segment or more ahead gained
/// less than at its start.
constexpr bool prefetches_segment(GgmlType t) {
  switch (t) {
    case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K:
    case GgmlType::kQ4_0: case GgmlType::kQ4_1: case GgmlType::kIQ4_NL:
      return true;
    default:
      return false;
  }
}
/// Asks for the blocks of the segment at block b (n columns) of panels [p0, p0 + kGroups) in L2
/// (always inlined: prefetch_l2.hpp says why).
DS41_ALWAYS_INLINE void prefetch_segment(const MatrixView& w, long p0, long b, int n) {
  const long bytes = segment_bytes(w.ggml_type, n);
  DS41_UNROLL for (int g = 0; g < kGroups; ++g) host_prefetch::prefetch_l2(w.ggml_panel_block(p0 + g, b), bytes);
}

/// Rows [n_begin, n_end) of y for kGgmlBlocks weights of type t in panels.
template <GgmlType t>
void linear_rows_panels(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                        OutRound round, int n_begin, int n_end, bool wide, bool factors) {
  (void)factors;  // TQ2_0's decode GEMV with AVX-512 alone takes it
  const int K = w.cols;
  constexpr int be = ggml_block_elems(t);
  alignas(64) float cols[kSegment][kGroups][8];
  alignas(64) float acc[kRowChunk][kGroups][8];
  SegmentLines next;
  // the view may start inside a panel (row_slice): its row n is stored row w.row0 + n
  int n0 = n_begin;
  while (n0 < n_end) {
    const int s0 = w.row0 + n0, lane0 = s0 % kPanelRows;
    const int G = std::min(kGroups, (lane0 + (n_end - n0) + kPanelRows - 1) / kPanelRows);
    const int rows_here = std::min(n_end - n0, G * kPanelRows - lane0);
    for (long t0 = 0; t0 < T; t0 += kRowChunk) {
      const int tc = static_cast<int>(std::min<long>(kRowChunk, T - t0));
      std::memset(acc, 0, sizeof(acc));
      for (int k0 = 0; k0 < K; k0 += kSegment) {
        const int n = std::min(kSegment, K - k0);
        if (tc == 1 && G == kGroups) {  // the decode GEMV: columns straight into four chains
          const uint8_t* pb[kGroups];
          DS41_UNROLL for (int g = 0; g < kGroups; ++g) pb[g] = w.ggml_panel_block(s0 / kPanelRows + g, k0 / be);
          if constexpr (prefetches_segment(t)) prefetch_segment(w, s0 / kPanelRows, k0 / be, n);
#if defined(DS41_HOST_GGML_PAIRS512)
          if constexpr (pairs512::served(t))
            if (wide) {  // the 2-bit types: two panels to a 16-lane vector (ggml_panel_pairs512.hpp)
              ChainSink512 pairs{x + t0 * x_stride + k0, {_mm512_load_ps(acc[0][0]), _mm512_load_ps(acc[0][2])}};
              if (t == GgmlType::kTQ2_0 && factors)  // its codes as factors (T = 1: codes_as_factors)
                pairs512::tq2_factor_chains(pb, n, pairs.x, pairs.a);
              else
                pairs = pairs512::decode_pairs<t>(pb, n, pairs);
              _mm512_store_ps(acc[0][0], pairs.a[0]), _mm512_store_ps(acc[0][2], pairs.a[1]);
              continue;
            }
#endif
          ChainSink chains{x + t0 * x_stride + k0, {}};
          DS41_UNROLL for (int g = 0; g < kGroups; ++g) chains.a[g] = _mm256_load_ps(acc[0][g]);
          chains = decode_panels<t, kGroups>(pb, n, chains);
          DS41_UNROLL for (int g = 0; g < kGroups; ++g) _mm256_store_ps(acc[0][g], chains.a[g]);
          continue;
        }
        DS41_UNROLL for (int g = 0; g < G; ++g) decode_panel<t>(w.ggml_panel_block(s0 / kPanelRows + g, k0 / be), n, cols, g);
        if (k0 + kSegment < K) next.set(w, s0 / kPanelRows, (k0 + kSegment) / be, std::min(kSegment, K - k0 - kSegment), G);
        else next.count = 0;
        apply_columns(x + t0 * x_stride + k0, x_stride, tc, G, n, cols, acc, wide, &next);
      }
      for (int i = 0; i < tc; ++i)
        for (int r = 0; r < rows_here; ++r) {
          const int lane = lane0 + r;
          y[(t0 + i) * y_stride + n0 + r] = apply_round(acc[i][lane / kPanelRows][lane % kPanelRows], round);
        }
    }
    n0 += rows_here;
  }
}

#if defined(DS41_HOST_GGML_SLOT_ROWS)
/// Rows [n_begin, n) of y for row-major weights of the slot type t (ggml_slot_rows.hpp), n the last
/// whole 32-row tile (returned): each tile's blocks decoded 8 rows at a time into slot order and
/// transposed as bytes, its columns into the decode GEMV's four chains (T = 1), else into the
/// column buffer that apply_columns applies.
template <GgmlType t>
int linear_rows_slots(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                      OutRound round, int n_begin, int n_end, bool wide) {
  static_assert(ggml_block_elems(t) == kSegment, "a block is a segment");
  constexpr long bb = ggml_block_bytes(t);
  constexpr int kRows = 8 * kGroups;
  const long rb = w.row_bytes(), blocks = w.cols / kSegment;
  alignas(64) float cols[kSegment][kGroups][8];
  alignas(64) float acc[kRowChunk][kGroups][8];
  slot_rows::GroupBlock gb[kGroups];
  int n0 = n_begin;
  for (; n_end - n0 >= kRows; n0 += kRows) {
    const uint8_t* tile = static_cast<const uint8_t*>(w.data) + n0 * rb;
    const auto decode = [&](long b) {
      // each row's next block asked for in L2: a tile reads its 32 rows side by side, 32 short
      // streams the hardware prefetcher does not keep ahead of (Zen 3, IQ2_XXS 1280 x 5120 at
      // T = 1, minima of 7, three rounds: 956-1097 -> 723-745 us; two blocks ahead 694-878)
      for (int r = 0; r < kRows; ++r) host_prefetch::prefetch_l2(tile + r * rb + (b + 1) * bb, bb);
      DS41_UNROLL for (int g = 0; g < kGroups; ++g) slot_rows::decode_group<t>(tile + 8 * g * rb + b * bb, rb, gb[g]);
    };
    for (long t0 = 0; t0 < T; t0 += kRowChunk) {
      const int tc = static_cast<int>(std::min<long>(kRowChunk, T - t0));
      const float* xt = x + t0 * x_stride;
      if (tc == 1) {  // the decode GEMV
        ChainSink chains{xt, {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}};
        for (long b = 0; b < blocks; ++b, chains.x += kSegment) {
          decode(b);
          chains = slot_rows::group_columns<kGroups>(gb, chains);
        }
        DS41_UNROLL for (int g = 0; g < kGroups; ++g) _mm256_store_ps(acc[0][g], chains.a[g]);
      } else {
        std::memset(acc, 0, sizeof(acc));
        const auto store = [&cols](int e, const __m256* v) DS41_LAMBDA_INLINE {
          DS41_UNROLL for (int g = 0; g < kGroups; ++g) _mm256_store_ps(cols[e][g], v[g]);
        };
        for (long b = 0; b < blocks; ++b) {
          decode(b);
          slot_rows::group_columns<kGroups>(gb, store);
          apply_columns(xt + b * kSegment, x_stride, tc, kGroups, kSegment, cols, acc, wide);
        }
      }
      for (int i = 0; i < tc; ++i)
        for (int r = 0; r < kRows; ++r) y[(t0 + i) * y_stride + n0 + r] = apply_round(acc[i][r / 8][r % 8], round);
    }
  }
  return n0;
}
#endif

#endif  // DS41_HOST_GGML_PANELS

#if defined(DS41_HOST_GGML_GRID512)
/// Whether the grid GEMV asks for each of its tile's 32 rows' next block (a short stream each,
/// read by gathers) while it decodes the current one. Tuning, measured (docs/PERFORMANCE.md,
/// session 36; 2 threads, 1280 and 2304 x 5120, time with / without, two rounds): IQ2_XS 0.90,
/// IQ1_M 0.89-0.91, IQ3_S 0.93, IQ2_S 0.92-0.97, IQ3_XXS 0.99; IQ2_XXS, IQ1_S and TQ1_0, the types
/// of the fewest bytes a block, moved within +-3% in the first round and are left without. Two
/// blocks ahead gained less, the current block at its start less still.
constexpr bool prefetches_next_block(GgmlType t) {
  switch (t) {
    case GgmlType::kIQ2_XS: case GgmlType::kIQ2_S: case GgmlType::kIQ3_XXS: case GgmlType::kIQ3_S: case GgmlType::kIQ1_M:
      return true;
    default:
      return false;
  }
}
/// Asks for `bb` bytes at `at` of each of a tile's 32 rows (rb bytes apart) in L2; past a row's
/// last block they are the next row's first, past the tile the next tile's (always inlined:
/// prefetch_l2.hpp says why).
DS41_ALWAYS_INLINE void prefetch_tile_blocks(uintptr_t at, long rb, long bb) {
  for (int r = 0; r < grid512::kRows; ++r) host_prefetch::prefetch_l2(at + static_cast<uintptr_t>(r * rb), bb);
}

/// Rows [n_begin, n) of y for row-major weights of the grid type t, n the last whole 32-row tile
/// (returned): ggml_grid_rows512.hpp's columns, 16 rows to a vector, into the decode GEMV's two
/// chains (T = 1), else into the column buffer that apply_columns applies.
template <GgmlType t>
int linear_rows_grid(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride, OutRound round,
                     int n_begin, int n_end, bool factors) {
  using grid512::kRows;
  static_assert(ggml_block_elems(t) == kSegment && kRows == 8 * kGroups, "a block is a segment, a tile four groups");
  constexpr int bb = ggml_block_bytes(t);
  const long rb = w.row_bytes(), blocks = w.cols / kSegment;
  alignas(64) float cols[kSegment][kGroups][8];
  alignas(64) float acc[kRowChunk][kGroups][8];
  int n0 = n_begin;
  if (rb * (kRows - 1) > INT32_MAX) return n0;  // the gathers' row offsets are 32-bit
  __m512i rows[2];  // byte offsets of the tile's rows
  DS41_UNROLL for (int h = 0; h < 2; ++h)
    rows[h] = _mm512_mullo_epi32(_mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                                  _mm512_set1_epi32(16 * h)),
                                 _mm512_set1_epi32(static_cast<int>(rb)));
  for (; n_end - n0 >= kRows; n0 += kRows) {
    const uint8_t* tile = static_cast<const uint8_t*>(w.data) + n0 * rb;
    for (long t0 = 0; t0 < T; t0 += kRowChunk) {
      const int tc = static_cast<int>(std::min<long>(kRowChunk, T - t0));
      const float* xt = x + t0 * x_stride;
      if (tc == 1) {  // the decode GEMV
        ChainSink512 chains{xt, {_mm512_setzero_ps(), _mm512_setzero_ps()}};
        for (long b = 0; b < blocks; ++b, chains.x += kSegment) {
          if constexpr (prefetches_next_block(t)) prefetch_tile_blocks(reinterpret_cast<uintptr_t>(tile) + (b + 1) * bb, rb, bb);
          if (t == GgmlType::kTQ1_0 && factors)  // its codes as factors (T = 1: codes_as_factors)
            grid512::tq1_chains(tile + b * bb, rows, chains.x, chains.a);
          else
            grid512::decode_block<t>(tile + b * bb, rows, chains);
        }
        _mm512_store_ps(acc[0][0], chains.a[0]), _mm512_store_ps(acc[0][2], chains.a[1]);
      } else {
        std::memset(acc, 0, sizeof(acc));
        const auto store = [&cols](int e, const __m512* v) DS41_LAMBDA_INLINE {
          _mm512_store_ps(cols[e][0], v[0]), _mm512_store_ps(cols[e][2], v[1]);
        };
        for (long b = 0; b < blocks; ++b) {
          grid512::decode_block<t>(tile + b * bb, rows, store);
          apply_columns(xt + b * kSegment, x_stride, tc, kGroups, kSegment, cols, acc, true);
        }
      }
      for (int i = 0; i < tc; ++i)
        for (int r = 0; r < kRows; ++r) y[(t0 + i) * y_stride + n0 + r] = apply_round(acc[i][r / 8][r % 8], round);
    }
  }
  return n0;
}
#endif

/// Rows [n_begin, n_end) of y for kGgmlBlocks weights (usable(w)).
/// `factors`: TQ1_0 and TQ2_0 may take their codes as factors (codes_as_factors(x, ...)).
inline void linear_rows(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                        OutRound round, int n_begin, int n_end, bool wide = true, bool factors = false) {
#if defined(DS41_HOST_GGML_PANELS)
  if (w.layout == WeightLayout::kPanels8) {
    visit_panel_type(w.ggml_type, [&](auto type) {
      linear_rows_panels<decltype(type)::value>(x, T, x_stride, w, y, y_stride, round, n_begin, n_end, wide, factors);
    });
    return;
  }
#endif
  if (w.layout == WeightLayout::kPanels8) return linear_rows_scalar(x, T, x_stride, w, y, y_stride, round, n_begin, n_end);
  const int K = w.cols;
  const long row_bytes = w.row_bytes();
  const int be = ggml_block_elems(w.ggml_type), bb = ggml_block_bytes(w.ggml_type);
  const auto* data = static_cast<const uint8_t*>(w.data);
  alignas(32) float rowbuf[8][kSegment];
  alignas(64) float cols[kSegment][kGroups][8];
  alignas(64) float acc[kRowChunk][kGroups][8];
  int n0 = n_begin;
  bool gridded = false;  // whether a grid kernel took the whole tiles
#if defined(DS41_HOST_GGML_GRID512)
  if (wide && grid512::served(w.ggml_type)) {
    grid512::visit_served_type(w.ggml_type, [&](auto type) {
      n0 = linear_rows_grid<decltype(type)::value>(x, T, x_stride, w, y, y_stride, round, n0, n_end, factors);
    });
    gridded = true;
  }
#endif
#if defined(DS41_HOST_GGML_SLOT_ROWS) && defined(DS41_HOST_GGML_PANELS)
  if (!gridded && grid_slot_type(w.ggml_type))
    visit_slot_type(w.ggml_type, [&](auto type) {
      n0 = linear_rows_slots<decltype(type)::value>(x, T, x_stride, w, y, y_stride, round, n0, n_end, wide);
    });
#endif
  (void)gridded;
  while (n_end - n0 >= 8) {
    const int G = std::min(kGroups, (n_end - n0) / 8);
    for (long t0 = 0; t0 < T; t0 += kRowChunk) {
      const int tc = static_cast<int>(std::min<long>(kRowChunk, T - t0));
      std::memset(acc, 0, sizeof(acc));
      for (int k0 = 0; k0 < K; k0 += kSegment) {
        const int n = std::min(kSegment, K - k0);
        const long byte0 = static_cast<long>(k0 / be) * bb;
        DS41_UNROLL for (int g = 0; g < G; ++g) {
          for (int i = 0; i < 8; ++i)
            decode_segment(w.ggml_type, data + static_cast<long>(n0 + 8 * g + i) * row_bytes + byte0, n, rowbuf[i]);
          int j = 0;
          for (; j + 8 <= n; j += 8) {
            __m256 c[8];
            DS41_UNROLL for (int i = 0; i < 8; ++i) c[i] = _mm256_load_ps(rowbuf[i] + j);
            avx2::transpose8(c);
            DS41_UNROLL for (int i = 0; i < 8; ++i) _mm256_store_ps(cols[j + i][g], c[i]);
          }
          for (; j < n; ++j)
            for (int i = 0; i < 8; ++i) cols[j][g][i] = rowbuf[i][j];
        }
        apply_columns(x + t0 * x_stride + k0, x_stride, tc, G, n, cols, acc, wide);
      }
      for (int t = 0; t < tc; ++t)
        DS41_UNROLL for (int g = 0; g < G; ++g)
          for (int i = 0; i < 8; ++i) y[(t0 + t) * y_stride + n0 + 8 * g + i] = apply_round(acc[t][g][i], round);
    }
    n0 += 8 * G;
  }
  if (n0 < n_end) linear_rows_scalar(x, T, x_stride, w, y, y_stride, round, n0, n_end);
}
#else
inline constexpr int kSegment = 256;
/// Values of columns [0, n) of one row's segment: the scalar definition.
inline void decode_segment(GgmlType t, const uint8_t* src, int n, float* out) {
  dequantize_ggml_linear_blocks(t, src, t == GgmlType::kF16 ? n : n / ggml_block_elems(t), out);
}
inline void linear_rows(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                        OutRound round, int n_begin, int n_end, bool = true, bool = false) {
  linear_rows_scalar(x, T, x_stride, w, y, y_stride, round, n_begin, n_end);
}
#endif

/// The descriptor (host/linear_call.hpp): GGUF blocks kept as stored, any T (panels where packed,
/// row-major otherwise; the scalar definition without AVX2).
struct Kernel {
  static constexpr const char* kName = "GGUF blocks";
  struct Prepared {
    bool factors = false;  // codes_as_factors: once a call (its row chunks each took a scan of x: 3% of TQ1_0's time)
  };
  static bool usable(const host_gemv::LinearCall& c) { return host_ggml::usable(c.w); }
  static bool prepare(const host_gemv::LinearCall& c, Prepared& p) {
    p.factors = codes_as_factors(c.x, c.T, c.w);
    return true;
  }
  static void run(const host_gemv::LinearCall& c, const Prepared& p, int n_begin, int n_end, int) {
    host_ggml::linear_rows(c.x, c.T, c.x_stride, c.w, c.y, c.y_stride, c.round, n_begin, n_end,
                           c.isa != host_gemv::VectorIsa::kAvx2, p.factors);
  }
};

}  // namespace ds41::host_ggml
#include "../../core/fp_exact_end.hpp"
