// ds41/backend/host/gemm_panels512.hpp — the host Linear for T = 2 .. 16 input rows (batched
// decode, and prefill in chunks of 16) on panel-packed weights (host/panels.hpp) with 512-bit
// vectors, bit-identical to MatrixView::dot.
//
// Why: a batched decode step (N sequences, one token each) runs every Linear with T = N, and at
// N = 8 the step is bound by these. The AVX2 tile (panels::linear_tile) decodes a 32-column block
// of 32 rows once and applies it to two input rows per pass, 8 rows a vector; here a vector holds
// two panels (16 rows, lanes 0-7 panel p's, 8-15 panel p + 1's, loaded as one group pair as the
// decode GEMVs of host/gemv_panels512.hpp do), a decoded span of 64 columns feeds up to kRowBlock
// input rows per pass from registers (2·kRowBlock accumulators; x broadcast inside each multiply,
// mul_broadcast), and the decode itself is one or two table
// lookups per byte: fp8 by vpermt2b over the 128 magnitudes (AVX-512 VBMI), fp4 by vpshufb over
// its 16 codes. Per weight vector and input row that leaves one multiply and one add, and a
// share of the decode, loads and stores that shrinks as T grows. Measured (one core of the Zen 5
// VM, 64 x 2304 warm in L2, best of 10 rounds, fraction of the same core's BM_PeakMulAdd): T = 16
// at 75-83% (the AVX2 tile 64-69%), T = 8 at 67-73% (58-61%), T = 2 at 38-44% (32-38%). Per lane
// this machine multiplies and adds no faster in zmm than in ymm (one zmm multiply and one add a
// cycle, or two of each in ymm): the gain is fewer instructions around the arithmetic.
// f32 and bf16, whose decode is a load or a shift, skip the span buffer: stream_rows walks the
// panels column by column with kRowBlock rows' sums in registers and prefetches ahead, as the
// one-row GEMV does, so that the reads overlap the arithmetic (stream_rows says by how much).
//
// The operations are the AVX2 tile's lane for lane: each lane is its row's own chain in K order,
// `part = part + x[k]·w` with the product rounded, then added (no contraction: -ffp-contract=off;
// bf16 weights take one fused multiply-add only where bf16_products_exact shows every product
// exact, the same bits: 0.72-0.8x the time at T = 8, bench_kernels BM_BatchLinear<kBF16>, one
// Xeon VM (Emerald Rapids), the two binaries alternating twice),
// fp8/fp4 per-32-column partial sums finished as acc + (part·s_x)·s_w, padding past K never
// added. An input row's outputs do not depend on T or on the other rows (no cross-row
// arithmetic), so a batch gives each sequence the bits a call with that row alone gives.
//
// Compiled with DS41_HOST_AVX512 (host/gemv_scaled512.hpp); fp8 needs AVX-512 VBMI as well (else
// the AVX2 tile). A single panel left at a walk's end takes the AVX2 tile, rows outside whole
// panels the scalar dot.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include "bf16_range512.hpp"
#include "broadcast512.hpp"
#include "gemv_panels.hpp"
#include "gemv_panels512.hpp"
#include "gemv_scaled512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512)
#include <immintrin.h>
#if defined(__AVX512VBMI__)
#define DS41_HOST_AVX512_VBMI 1
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::gemm512 {

constexpr int kBlockK = 32;    // one fp8/fp4 scale block along K
constexpr int kTileVecs = 2;   // 16-row vectors per tile: 4 panels, the walk's tile
constexpr int kRowChunk = 16;  // input rows sharing one decoded block
constexpr int kRowBlock = 8;
// 32-column blocks decoded at once and applied in one call (8 KiB of f32 columns). Why: one call
// per block spent ~20% of the multiply-add time around the loop (one Zen 5 core, warm weights, T =
// 16: 1 block 73-78% of BM_PeakMulAdd, 2 blocks 75-83%, 4 the same as 2)
constexpr int kSpanBlocks = 2;
constexpr int kSpanK = kSpanBlocks * kBlockK;   // input rows per pass over a decoded block (their sums in registers)

/// A 256-bit pattern repeated in both halves of a 512-bit vector.
inline __m512i repeat256(__m256i v) { return _mm512_broadcast_i64x4(v); }

/// panels::widen_bf16_bytes on 16 lanes: vector t gets, in each 128-bit lane l, code bytes
/// 4t..4t+3 of that lane (lanes 4l..4l+3): with the group pair in column-major order per 128-bit
/// lane, vector t is column t of the pair's 16 rows.
inline void widen_bf16_bytes(__m512i high, __m512i low, __m512* c) {
  const __m512i zero = _mm512_setzero_si512();
  const __m512i w0 = _mm512_unpacklo_epi8(low, high), w1 = _mm512_unpackhi_epi8(low, high);
  c[0] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w0));
  c[1] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w0));
  c[2] = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, w1));
  c[3] = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, w1));
}

// Column decoders on a group pair (panel a's 32 bytes in the low half, b's in the high): c[j] =
// column q·g + j of the pair's 16 rows, exactly the floats MatrixView::panel_value gives. Objects,
// so that a decoder's tables are loaded into registers once per tile.
struct F32Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kF32;
  static constexpr int kGroup = 1;
  void columns(__m512i g, __m512* c) const { panels512::F32Columns::columns(g, c); }
};
struct Bf16Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kBF16;
  static constexpr int kGroup = 2;
  void columns(__m512i g, __m512* c) const { panels512::Bf16Columns::columns(g, c); }
};

#if defined(DS41_HOST_AVX512_VBMI)
/// e4m3 -> f32: every e4m3 value is a bf16 number; the top two bytes of a magnitude's f32 come
/// from two 128-entry byte tables (vpermt2b reads an index's low 7 bits), the sign is the code's
/// bit 7 put back into the top byte. Subnormal codes (m·2^-9) are normal f32 numbers and come out
/// of the same tables; NaN codes never reach panels (host_panels::packable).
struct Fp8Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kFp8Block32;
  static constexpr int kGroup = 4;
  /// f32 bits of the e4m3 magnitude c (0..127): normal 2^(e-7)·(1 + m/8), subnormal m·2^-9.
  static constexpr uint32_t magnitude_bits(int c) {
    const int e = c >> 3, m = c & 7;
    if (e > 0) return static_cast<uint32_t>(e + 120) << 23 | static_cast<uint32_t>(m) << 20;
    if (m == 0) return 0;
    const int top = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // m = 2^top + rest
    return static_cast<uint32_t>(118 + top) << 23 | static_cast<uint32_t>(m - (1 << top)) << (23 - top);
  }
  static constexpr auto table(int shift) {
    std::array<uint8_t, 128> t{};
    for (int c = 0; c < 128; ++c) t[c] = static_cast<uint8_t>(magnitude_bits(c) >> shift);
    return t;
  }
  __m512i top0, top1, second0, second1, control;
  Fp8Columns() {
    alignas(64) static constexpr std::array<uint8_t, 128> top = table(24), second = table(16);
    top0 = _mm512_load_si512(top.data());
    top1 = _mm512_load_si512(top.data() + 64);
    second0 = _mm512_load_si512(second.data());
    second1 = _mm512_load_si512(second.data() + 64);
    control = repeat256(panels::column_major_control<panel_code_byte>());
  }
  void columns(__m512i group, __m512* c) const {
    const __m512i g = _mm512_shuffle_epi8(group, control);
    const __m512i magnitude_top = _mm512_permutex2var_epi8(top0, g, top1);
    const __m512i top = _mm512_ternarylogic_epi32(magnitude_top, g, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);
    widen_bf16_bytes(top, _mm512_permutex2var_epi8(second0, g, second1), c);
  }
};
#endif

/// e2m1 -> f32 as panels::Fp4Columns, on 16 lanes (vpshufb looks up within each 128-bit lane).
struct Fp4Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kFp4Block32;
  static constexpr int kGroup = 8;
  __m512i top, second, control;
  Fp4Columns() {
    top = repeat256(panels::byte_table(0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,  //
                                       0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0));
    second = repeat256(panels::byte_table(0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0,  //
                                          0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0));
    control = repeat256(panels::column_major_control<fp4_panel_code_byte>());
  }
  void columns(__m512i g, __m512* c) const {
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    const __m512i by_column = _mm512_shuffle_epi8(g, control);
    const __m512i lo = _mm512_and_si512(by_column, nibble);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(by_column, 4), nibble);
    widen_bf16_bytes(_mm512_shuffle_epi8(top, lo), _mm512_shuffle_epi8(second, lo), c);
    widen_bf16_bytes(_mm512_shuffle_epi8(top, hi), _mm512_shuffle_epi8(second, hi), c + 4);
  }
};

/// Panels a and b's block scales for the 32-column block kbi: lanes 0-7 a's rows, 8-15 b's. fp8:
/// one per panel (the two may lie in different 32-row blocks when a slice starts off a 32-row
/// boundary); fp4: one e8m0 byte per row (panels::fp4_scales_to_f32 on 16 lanes).
inline __m512 block_scales(const MatrixView& w, long a, int kbi) {
  if (w.format == WeightFormat::kFp8Block32)
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(panels::fp8_block_scale_at(w, a, kbi))),
                              _mm256_broadcast_ss(panels::fp8_block_scale_at(w, a + 1, kbi)), 1);
  const long kblocks = (w.cols + 31) / 32;
  const __m128i bytes = _mm_unpacklo_epi64(
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(panels::fp4_block_scales_at(w.host_fp4_scales_e8m0, kblocks, a, kbi))),
      _mm_loadl_epi64(reinterpret_cast<const __m128i*>(panels::fp4_block_scales_at(w.host_fp4_scales_e8m0, kblocks, a + 1, kbi))));
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu8_epi32(bytes), 23);
  return _mm512_castsi512_ps(_mm512_max_epi32(bits, _mm512_set1_epi32(0x00400000)));
}

inline void store_rounded(__m512 acc, float* y, OutRound round) {
  alignas(64) float a[16];
  _mm512_store_ps(a, acc);
  for (int i = 0; i < 16; ++i) y[i] = apply_round(a[i], round);
}

/// R input rows (x rows xr[0..R) from the span's first column) over a decoded span wt[0..kn) of
/// up to kSpanK columns of an fp8/fp4 view: one fresh partial per 32-column block, finished into
/// acc as add_block (sx[i][b]: row i's act_quant scale of the span's block b, scale[b] the
/// weights'). Not inlined, so that the decoder's tables and the block scales need no registers
/// here (inlined with an "m" operand for x, GCC kept one weight vector on the stack and reloaded
/// it per row).
template <int R, int NV>
#if defined(__GNUC__)
__attribute__((noinline))
#endif
void apply_span(const float* const* xr, const __m512 (*wt)[NV], int kn, const __m512 (*scale)[NV],
                const float (*sx)[kSpanBlocks], __m512 (*acc)[NV]) {
  __m512 a[R][NV];
  for (int k0 = 0, b = 0; k0 < kn; k0 += kBlockK, ++b) {
    const int ke = std::min(kn, k0 + kBlockK);
    DS41_UNROLL for (int i = 0; i < R; ++i)
      DS41_UNROLL for (int v = 0; v < NV; ++v) a[i][v] = _mm512_setzero_ps();
    for (int k = k0; k < ke; ++k) {
      __m512 wk[NV];
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        wk[v] = wt[k][v];
#if defined(__GNUC__)
        asm("" : "+v"(wk[v]));  // one load per column in a register: GCC spilled one and reloaded it per row
#endif
      }
      DS41_UNROLL for (int i = 0; i < R; ++i)
        DS41_UNROLL for (int v = 0; v < NV; ++v) a[i][v] = _mm512_add_ps(a[i][v], mul_broadcast(wk[v], xr[i] + k));
    }
    DS41_UNROLL for (int i = 0; i < R; ++i) {
      const __m512 s = _mm512_set1_ps(sx[i][b]);
      DS41_UNROLL for (int v = 0; v < NV; ++v)
        acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_mul_ps(_mm512_mul_ps(a[i][v], s), scale[b][v]));
    }
  }
}

/// Rows r .. r + R of a chunk: apply_span with R known at compile time (R = kRowBlock, or the
/// chunk's remainder).
template <int NV, int R = kRowBlock>
inline void apply_rows(int rows, const float* const* xr, const __m512 (*wt)[NV], int kn, const __m512 (*scale)[NV],
                       const float (*sx)[kSpanBlocks], __m512 (*acc)[NV]) {
  if constexpr (R > 1)
    if (rows < R) return apply_rows<NV, R - 1>(rows, xr, wt, kn, scale, sx, acc);
  apply_span<R, NV>(xr, wt, kn, scale, sx, acc);
}

/// T input rows (act_quant's q, scales xs) through the fp8/fp4 panels [p0, p0 + 2·NV) into
/// y[r·y_stride + 0 .. 16·NV): each span of kSpanK columns decoded once per kRowChunk input
/// rows, applied kRowBlock rows at a time.
template <class Columns, int NV>
void linear_tile(const Columns& dec, const float* x, const float* xs, long T, long x_stride, const MatrixView& w,
                 long p0, float* y, long y_stride, OutRound round) {
  constexpr int g = Columns::kGroup;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K), kblocks = (K + kBlockK - 1) / kBlockK;
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  alignas(64) __m512 wt[kSpanK][NV];
  for (long r0 = 0; r0 < T; r0 += kRowChunk) {
    const int tc = static_cast<int>(std::min<long>(kRowChunk, T - r0));
    __m512 acc[kRowChunk][NV];
    for (int r = 0; r < tc; ++r)
      DS41_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
    for (int kb = 0; kb < K; kb += kSpanK) {
      const int kn = std::min(kSpanK, K - kb);
      for (int q = kb / g; q * g < kb + kn; ++q)
        DS41_UNROLL for (int v = 0; v < NV; ++v) {
          __m512 c[g];
          dec.columns(scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q), c);
          for (int j = 0; j < g && q * g + j < kb + kn; ++j) wt[q * g + j - kb][v] = c[j];
        }
      const int nb = (kn + kBlockK - 1) / kBlockK;
      __m512 scale[kSpanBlocks][NV];
      for (int b = 0; b < nb; ++b)
        DS41_UNROLL for (int v = 0; v < NV; ++v) scale[b][v] = block_scales(w, p0 + 2 * v, kb / kBlockK + b);
      for (int r = 0; r < tc; r += kRowBlock) {
        const int rows = std::min(kRowBlock, tc - r);
        const float* xr[kRowBlock];
        float sx[kRowBlock][kSpanBlocks];
        for (int i = 0; i < rows; ++i) {
          xr[i] = x + (r0 + r + i) * x_stride + kb;
          for (int b = 0; b < nb; ++b) sx[i][b] = xs[(r0 + r + i) * kblocks + kb / kBlockK + b];
        }
        apply_rows<NV>(rows, xr, wt, kn, scale, sx, acc + r);
      }
    }
    for (int r = 0; r < tc; ++r)
      DS41_UNROLL for (int v = 0; v < NV; ++v) store_rounded(acc[r][v], y + (r0 + r) * y_stride + 16 * v, round);
  }
}

/// Group q of the f32/bf16 panels from panel0 (`columns` of its columns) into R rows' sums a.
template <class Columns, int R, int NV, bool kFused>
DS41_ALWAYS_INLINE void add_group(const Columns& dec, const float* const* xr, const uint8_t* panel0, long pb, int q,
                                  int columns, __m512 (&a)[R][NV]) {
  constexpr int g = Columns::kGroup;
  __m512 c[NV][g];
  DS41_UNROLL for (int v = 0; v < NV; ++v)
    dec.columns(scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q), c[v]);
  for (int j = 0; j < columns; ++j)
    DS41_UNROLL for (int i = 0; i < R; ++i)
      DS41_UNROLL for (int v = 0; v < NV; ++v)
        a[i][v] = kFused ? fma_broadcast(a[i][v], c[v][j], xr[i] + q * g + j)
                         : _mm512_add_ps(a[i][v], mul_broadcast(c[v][j], xr[i] + q * g + j));
}

/// R input rows (xr[0..R)) through the f32/bf16 panels [p0, p0 + 2·NV) from panel0, column by
/// column straight from the panels: acc[i][v] = row i's chain over all K, `part = part + x[k]·w`
/// (kFused: one fused multiply-add, bf16_products_exact), each group pair loaded and decoded
/// once for the R rows, each panel prefetched panels512::kPrefetchAhead ahead (gemv_tile's
/// walk with R rows). Not inlined: R·NV accumulators in registers.
/// Why not linear_tile's spans (decoded into a buffer, then applied): for f32 and bf16 the
/// decode is a load or a shift, and the span's loads then came in bursts between stretches of
/// arithmetic, the memory idle while the arithmetic ran: at T = 8 a call took the sum of its
/// read and its arithmetic (one Xeon VM, Emerald Rapids, 2 threads, three cold copies
/// alternating, medians: f32 8192 x 5120 11.2-11.4 -> 7.1-7.2 ms, bf16 8192 x 4096 5.25 ->
/// 3.4-3.5 (fused and not), f32 at T = 2 8.5 -> 6.9, T = 16 17.5 -> 13.9; one core warm, f32
/// 128 x 2048 T = 8 70 -> 61 us).
template <class Columns, int R, int NV, bool kFused>
#if defined(__GNUC__)
__attribute__((noinline))
#endif
void stream_rows(const Columns& dec, const float* const* xr, const uint8_t* panel0, long pb, int K,
                 __m512 (*acc)[NV]) {
  constexpr int g = Columns::kGroup;
  __m512 a[R][NV];
  DS41_UNROLL for (int i = 0; i < R; ++i)
    DS41_UNROLL for (int v = 0; v < NV; ++v) a[i][v] = _mm512_setzero_ps();
  const int whole = K / g;  // groups wholly inside K
  for (int q = 0; q < whole; ++q) {
    if (q % 2 == 0)  // two groups to a 64-byte line
      for (int v = 0; v < 2 * NV; ++v)
        panels::prefetch_ahead(panels::group_at(panel0 + v * pb, q), 64, panels512::kPrefetchAhead);
    add_group<Columns, R, NV, kFused>(dec, xr, panel0, pb, q, g, a);
  }
  if (whole * g < K)  // a bf16 K tail: the last group's first column
    add_group<Columns, R, NV, kFused>(dec, xr, panel0, pb, whole, K - whole * g, a);
  DS41_UNROLL for (int i = 0; i < R; ++i)
    DS41_UNROLL for (int v = 0; v < NV; ++v) acc[i][v] = a[i][v];
}

/// stream_rows with R known at compile time (R = kRowBlock, or the remainder).
template <class Columns, int NV, bool kFused, int R = kRowBlock>
inline void stream_rows_n(int rows, const Columns& dec, const float* const* xr, const uint8_t* panel0, long pb, int K,
                          __m512 (*acc)[NV]) {
  if constexpr (R > 1)
    if (rows < R) return stream_rows_n<Columns, NV, kFused, R - 1>(rows, dec, xr, panel0, pb, K, acc);
  stream_rows<Columns, R, NV, kFused>(dec, xr, panel0, pb, K, acc);
}

/// T input rows through the f32/bf16 panels [p0, p0 + 2·NV) into y[r·y_stride + 0 .. 16·NV):
/// stream_rows kRowBlock rows at a time (later passes find the tile's panels in L2).
template <class Columns, int NV, bool kFused>
void stream_tile(const Columns& dec, const float* x, long T, long x_stride, const MatrixView& w, long p0, float* y,
                 long y_stride, OutRound round) {
  const long pb = panel_bytes(w.format, w.cols);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  for (long r0 = 0; r0 < T; r0 += kRowBlock) {
    const int rows = static_cast<int>(std::min<long>(kRowBlock, T - r0));
    const float* xr[kRowBlock];
    for (int i = 0; i < rows; ++i) xr[i] = x + (r0 + i) * x_stride;
    __m512 acc[kRowBlock][NV];
    stream_rows_n<Columns, NV, kFused>(rows, dec, xr, panel0, pb, w.cols, acc);
    for (int i = 0; i < rows; ++i)
      DS41_UNROLL for (int v = 0; v < NV; ++v) store_rounded(acc[i][v], y + (r0 + i) * y_stride + 16 * v, round);
  }
}

/// Rows [n_begin, n_end) for T input rows of a panel view: tiles of 4 panels as 2 vectors, a
/// single panel by the AVX2 tile (Columns256), rows outside whole panels by the scalar dot.
template <class Columns, class Columns256, bool kScaled, bool kFused = false>
void linear_rows_with(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, float* y,
                      long y_stride, OutRound round, int n_begin, int n_end) {
  static_assert(Columns::kGroup == Columns256::kGroup);
  const Columns dec;
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        if constexpr (NP % 2 == 1)
          panels::linear_tile<Columns256, NP, kScaled>(x, xs, T, x_stride, w, p0, y + n, y_stride, round);
        else if constexpr (kScaled)
          linear_tile<Columns, NP / 2>(dec, x, xs, T, x_stride, w, p0, y + n, y_stride, round);
        else
          stream_tile<Columns, NP / 2, kFused>(dec, x, T, x_stride, w, p0, y + n, y_stride, round);
      },
      [&](int from, int to) { linear_rows_scalar(x, xs, T, x_stride, w, y, y_stride, round, from, to); });
}

/// Whether linear_rows takes view w: panels of f32, bf16, fp4, and fp8 where the build has VBMI.
inline bool usable(const MatrixView& w) {
  if (w.layout != WeightLayout::kPanels8) return false;
#if !defined(DS41_HOST_AVX512_VBMI)
  if (w.format == WeightFormat::kFp8Block32) return false;
#endif
  return true;
}

/// Whether every product of a bf16 Linear's inputs (of range x: input_range) and the weights of the
/// panel view w is exact in float32, so that the tile may add each with a fused multiply-add
/// where the reference rounds the product and then adds: the same bits. A product of two bf16
/// values has at most 16 significant bits, so it is exact unless it falls below 2^-126 (then
/// rounded as a subnormal) or overflows; pack() keeps the range of |w| (host_bf16_abs_min/max),
/// and every x here must be a finite bf16 value, its smallest nonzero magnitude times the
/// smallest |w| at least 2^-126 and the largest times the largest below 2^128.
/// Why: bf16 Linears of several rows (the grouped wo_a of a batched decode step) multiply and add
/// apart, two instructions per weight and row; fused, one.
inline bool bf16_products_exact(const host_exact::Bf16Range& x, const MatrixView& w) {
  if (w.format != WeightFormat::kBF16 || !(w.host_bf16_abs_min > 0)) return false;
  return host_exact::products_exact(x, w.host_bf16_abs_min, w.host_bf16_abs_max);
}

/// The range of T input rows of K values (x, row stride x_stride), bf16_products_exact's input.
inline host_exact::Bf16Range input_range(const float* x, long T, long x_stride, int K) {
  host_exact::Bf16Range range;
  for (long r = 0; r < T && range.bf16; ++r) host_exact::add_values(range, x + r * x_stride, K);
  return range;
}
inline bool bf16_products_exact(const float* x, long T, long x_stride, int K, const MatrixView& w) {
  return bf16_products_exact(input_range(x, T, x_stride, K), w);
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for T input rows and a panel view (usable): as
/// panels::linear_rows, the same bits. fp8/fp4: x holds act_quant's q, xs its scales. bf16_fused:
/// bf16_products_exact said yes for these x and w.
inline void linear_rows(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, float* y,
                        long y_stride, OutRound round, int n_begin, int n_end, bool bf16_fused = false) {
  dispatch_format(w.format, [&](auto tag) {
    constexpr WeightFormat F = decltype(tag)::value;
    using Columns = decoder_for_t<F, F32Columns, Bf16Columns, Fp4Columns>;  // fp8's needs VBMI (below)
    using PanelColumns = decoder_for_t<F, panels::F32Columns, panels::Bf16Columns, panels::Fp4Columns>;
    constexpr bool kScaled = TraitsOf<decltype(tag)>::kBlockScaled;
    if constexpr (F == WeightFormat::kBF16) {
      if (bf16_fused)
        return linear_rows_with<Columns, PanelColumns, false, true>(x, nullptr, T, x_stride, w, y, y_stride, round,
                                                                    n_begin, n_end);
      return linear_rows_with<Columns, PanelColumns, false>(x, nullptr, T, x_stride, w, y, y_stride, round, n_begin,
                                                            n_end);
    } else if constexpr (F == WeightFormat::kFp8Block32) {
#if defined(DS41_HOST_AVX512_VBMI)
      return linear_rows_with<Fp8Columns, panels::Fp8Columns, true>(x, xs, T, x_stride, w, y, y_stride, round, n_begin,
                                                                    n_end);
#else
      return panels::linear_rows(x, xs, T, x_stride, w, y, y_stride, round, n_begin, n_end);
#endif
    } else if constexpr (!std::is_void_v<Columns>) {  // f32, fp4 (usable() keeps the others away)
      return linear_rows_with<Columns, PanelColumns, kScaled>(x, kScaled ? xs : nullptr, T, x_stride, w, y, y_stride,
                                                              round, n_begin, n_end);
    }
  });
}

/// The descriptor (host/linear_call.hpp): the multi-row panel tiles, 16 rows a vector (T > 1).
/// prepare: for bf16, whether this input's products with these weights are all exact (the fused
/// products).
struct Rows {
  static constexpr const char* kName = "panel multi-row tile (AVX-512)";
  struct Prepared {
    bool bf16_fused = false;
  };
  static bool usable(const LinearCall& c) { return c.T > 1 && gemm512::usable(c.w) && c.isa != VectorIsa::kAvx2; }
  static bool prepare(const LinearCall& c, Prepared& p) {
    p.bf16_fused = c.w.format == WeightFormat::kBF16 && bf16_products_exact(input_range(c.x, c.T, c.x_stride, c.w.cols), c.w);
    return true;
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int) {
    gemm512::linear_rows(c.x, c.xs, c.T, c.x_stride, c.w, c.y, c.y_stride, c.round, n_begin, n_end, p.bf16_fused);
  }
};

}  // namespace ds41::host_gemv::gemm512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::gemm512 {
struct Rows : NotBuilt {};
}  // namespace ds41::host_gemv::gemm512
#endif
