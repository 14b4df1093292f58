// ds41/backend/host/gemv_panels.hpp — the host Linear on panel-packed weights (host/panels.hpp),
// bit-identical to MatrixView::dot.
//
// One 32-byte load of a panel group holds the weights of 8 rows for g consecutive K positions;
// it is decoded straight into g vectors "row i's weight k" (no transposes: fp8 and fp4 by byte
// table lookups, because every e4m3 and e2m1 value is a bf16 number), and
// `part = part + x[k] * column` is one _mm256_mul_ps and one _mm256_add_ps, each rounded on its own
// (never FMA; -ffp-contract=off). Each lane is one row's running sum in K order, and fp8/fp4 keep
// the reference's per-32 partial sums: the same operations as dot_f32 / dot_bf16 /
// dot_fp8_block32 / dot_fp4_block32. Padding past K (zero codes) is never added: an extra +0
// product could turn NaN·0 into a difference.
//
// A tile is NP panels (4 = 32 rows, four independent add chains to cover the add latency); the
// decode GEMV (T = 1) consumes each group as it is decoded, prefill (T > 1) decodes a 32-column
// block once into a buffer and applies it to up to kRowChunk input rows.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>
#include "../../core/linear_math.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv {

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for T input rows, by the scalar reference
/// (MatrixView::dot; any layout). xs: null for raw input rows, or act_quant's scales (row stride
/// ceil(K/32)) when x holds its q (fp8/fp4).
inline void linear_rows_scalar(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, float* y,
                               long y_stride, OutRound round, int n_begin, int n_end) {
  const long kblocks = (w.cols + 31) / 32;
  for (long r = 0; r < T; ++r)
    for (int n = n_begin; n < n_end; ++n)
      y[r * y_stride + n] = apply_round(w.dot(x + r * x_stride, n, xs ? xs + r * kblocks : nullptr), round);
}

}  // namespace ds41::host_gemv
#include "../../core/fp_exact_end.hpp"

#include "linear_call.hpp"
#include "prefetch_l2.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::panels {

constexpr int kBlockK = 32;    // one fp8/fp4 scale block along K
constexpr int kTilePanels = 4; // panels per tile
constexpr int kRowChunk = 16;  // input rows sharing one decoded block (prefill)

// Column decoders: columns(group, c) sets c[j] = the unscaled weights of K position q*g + j of
// the panel's 8 rows (lane i = row i), exactly the floats MatrixView::panel_value gives.
struct F32Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kF32;
  static constexpr int kGroup = 1;
  static void columns(__m256i g, __m256* c) { c[0] = _mm256_castsi256_ps(g); }
};

struct Bf16Columns {  // lane = (k even in the low half, k odd in the high half); bf16 -> f32 = << 16
  static constexpr WeightFormat kFormat = WeightFormat::kBF16;
  static constexpr int kGroup = 2;
  static void columns(__m256i g, __m256* c) {
    c[0] = _mm256_castsi256_ps(_mm256_slli_epi32(g, 16));
    c[1] = _mm256_castsi256_ps(_mm256_and_si256(g, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
};

/// A 16-byte table repeated in both 128-bit lanes, for _mm256_shuffle_epi8.
template <class... B>
inline __m256i byte_table(B... b) {
  return _mm256_setr_epi8(static_cast<char>(b)..., static_cast<char>(b)...);
}

/// vpshufb control that puts a panel group's code bytes in column-major order: in each 128-bit
/// half, byte 4j + d <- row d's byte for column j, code_byte(d, j) (panel_code_byte for fp8,
/// fp4_panel_code_byte for fp4's low-nibble columns 0-3; the high nibbles share the byte).
template <int (*code_byte)(int, int)>
inline __m256i column_major_control() {
  static constexpr auto table = [] {
    std::array<int8_t, 32> t{};
    DS41_UNROLL for (int h = 0; h < 2; ++h)
      DS41_UNROLL for (int j = 0; j < 4; ++j)
        DS41_UNROLL for (int d = 0; d < 4; ++d) t[16 * h + 4 * j + d] = static_cast<int8_t>(code_byte(d, j));
    return t;
  }();
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(table.data()));
}

/// f32 vectors from the top two bytes of each value (high[i], low[i] for code byte i).
/// vpunpck{l,h}bw then vpunpck{l,h}wd with zero stay within 128-bit lanes, so vector t gets code
/// bytes 4t..4t+3 (lanes 0-3) and 16+4t..16+4t+3 (lanes 4-7): the column-major order the fp8
/// and fp4 decoders shuffle their groups into first (column_major_control).
inline void widen_bf16_bytes(__m256i high, __m256i low, __m256* c) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i w0 = _mm256_unpacklo_epi8(low, high), w1 = _mm256_unpackhi_epi8(low, high);
  c[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w0));
  c[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w0));
  c[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w1));
  c[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w1));
}

// e4m3 -> f32 by byte table lookups, 32 codes at a time (no f32 subnormals, no arithmetic). With
// the code's high nibble h = s e3 e2 e1 and low nibble l = e0 m2 m1 m0, a normal value's top byte
// (sign, exponent bits 7..1 = 60 + e>>1) depends on h only and its second byte (exponent bit 0,
// mantissa) is l << 4. Codes with e >> 1 == 0 (zero, the subnormals m·2^-9, e == 1) take both
// bytes' magnitude from l instead. NaN codes never reach here (host_panels::packable keeps such
// matrices row-major). The fp8 panel order keeps a row's 4 codes together (panel_code_byte, for
// the scaled decode GEMV), so one shuffle first puts them in column-major order; only prefill
// and the decode GEMV of matrices or inputs the scaled decoder does not take come here.
struct Fp8Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kFp8Block32;
  static constexpr int kGroup = 4;
  static void columns(__m256i group, __m256* c) {
    const __m256i g = _mm256_shuffle_epi8(group, column_major_control<panel_code_byte>());
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i h = _mm256_and_si256(_mm256_srli_epi16(g, 4), nibble), l = _mm256_and_si256(g, nibble);
    const __m256i top_of_h = byte_table(0x00, 0x3D, 0x3E, 0x3F, 0x40, 0x41, 0x42, 0x43,  //
                                        0x80, 0xBD, 0xBE, 0xBF, 0xC0, 0xC1, 0xC2, 0xC3);
    const __m256i small_of_h = byte_table(0xFF, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0, 0, 0, 0, 0, 0, 0);  // e >> 1 == 0
    const __m256i small_top_of_l = byte_table(0x00, 0x3B, 0x3B, 0x3B, 0x3C, 0x3C, 0x3C, 0x3C,  //
                                              0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C, 0x3C);
    const __m256i second_of_l = byte_table(0x00, 0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70,  //
                                           0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0);
    const __m256i small_second_of_l = byte_table(0x00, 0x00, 0x80, 0xC0, 0x00, 0x20, 0x40, 0x60,  //
                                                 0x80, 0x90, 0xA0, 0xB0, 0xC0, 0xD0, 0xE0, 0xF0);
    const __m256i small = _mm256_shuffle_epi8(small_of_h, h);
    const __m256i top = _mm256_or_si256(_mm256_shuffle_epi8(top_of_h, h),
                                        _mm256_and_si256(_mm256_shuffle_epi8(small_top_of_l, l), small));
    const __m256i second =
        _mm256_blendv_epi8(_mm256_shuffle_epi8(second_of_l, l), _mm256_shuffle_epi8(small_second_of_l, l), small);
    widen_bf16_bytes(top, second, c);
  }
};

// e2m1 -> f32 by byte table lookups: every e2m1 value is a bf16 number, and a nibble (sign and
// magnitude) indexes a 16-entry table directly. Low nibbles are columns 0-3, high nibbles 4-7.
// The fp4 panel order keeps a row's 4 bytes together (fp4_panel_code_byte, for the integer
// GEMV); a 4x4 byte transpose in each 128-bit lane gives the column-major order
// widen_bf16_bytes needs. Only prefill (one decode per 32-column block and up to kRowChunk input
// rows) and the decode GEMV's rare float-path blocks come here.
struct Fp4Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kFp4Block32;
  static constexpr int kGroup = 8;
  static void columns(__m256i g, __m256* c) {
    const __m256i nibble = _mm256_set1_epi8(0x0F);
    const __m256i top = byte_table(0x00, 0x3F, 0x3F, 0x3F, 0x40, 0x40, 0x40, 0x40,  //
                                   0x80, 0xBF, 0xBF, 0xBF, 0xC0, 0xC0, 0xC0, 0xC0);
    const __m256i second = byte_table(0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0,  //
                                      0x00, 0x00, 0x80, 0xC0, 0x00, 0x40, 0x80, 0xC0);
    const __m256i by_column = _mm256_shuffle_epi8(g, column_major_control<fp4_panel_code_byte>());
    const __m256i lo = _mm256_and_si256(by_column, nibble);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(by_column, 4), nibble);
    widen_bf16_bytes(_mm256_shuffle_epi8(top, lo), _mm256_shuffle_epi8(second, lo), c);
    widen_bf16_bytes(_mm256_shuffle_epi8(top, hi), _mm256_shuffle_epi8(second, hi), c + 4);
  }
};

/// fp8: where panel p's block scale for the 32-column block kbi is (one float for the panel's
/// 32-row block).
inline const float* fp8_block_scale_at(const MatrixView& w, long p, int kbi) {
  return w.scales + (p * kPanelRows / 32) * ((w.cols + 31) / 32) + kbi;
}
/// fp4: where panel p's 8 e8m0 scale bytes (one per row) for the 32-column block kbi are. Takes
/// the bytes and the count of 32-column blocks, so that a hot loop can keep them in registers
/// (reading them through the view cost the fp4 GEMV 4%).
inline const uint8_t* fp4_block_scales_at(const uint8_t* e8m0, long kblocks, long p, int kbi) {
  return e8m0 + (p * kblocks + kbi) * kPanelRows;
}
/// 8 e8m0 scale bytes as floats, byte i to lane i: e8m0_to_f32 lane by lane (the bytes shifted
/// into the exponent field; byte 0, 2^-127, by the max with its bits).
inline __m256 fp4_scales_to_f32(const uint8_t* at) {
  const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(at))), 23);
  return _mm256_castsi256_ps(_mm256_max_epi32(bits, _mm256_set1_epi32(0x00400000)));
}
/// Panel p's block scales for block kbi, one per row's lane.
inline __m256 block_scales(const MatrixView& w, long p, int kbi) {
  if (w.format == WeightFormat::kFp8Block32) return _mm256_broadcast_ss(fp8_block_scale_at(w, p, kbi));
  return fp4_scales_to_f32(fp4_block_scales_at(w.host_fp4_scales_e8m0, (w.cols + 31) / 32, p, kbi));
}

/// acc + (part·s_x)·s_w, each operation rounded on its own (add_block in linear_math.hpp).
inline __m256 add_block(__m256 acc, __m256 part, __m256 s_x, __m256 s_w) {
  return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_mul_ps(part, s_x), s_w));
}

inline void store_rounded(__m256 acc, float* y, OutRound round) {
  alignas(32) float a[8];
  _mm256_store_ps(a, acc);
  DS41_UNROLL for (int i = 0; i < 8; ++i) y[i] = apply_round(a[i], round);
}

/// Group q (32 bytes) of a panel.
inline const uint8_t* group_at(const uint8_t* panel, int q) { return panel + static_cast<long>(q) * 32; }
inline __m256i load_group(const uint8_t* panel, int q) {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(group_at(panel, q)));
}

/// Adds x[k]·W[row, k] for the k of groups [q_begin, q_end) below k_end into part[v] (panel
/// p0 + v), in K order per row.
template <class Columns, int NP, bool kTail>
inline void add_groups(const float* x, const uint8_t* panel0, long pb, int q_begin, int q_end, int k_end,
                       __m256* part) {
  constexpr int g = Columns::kGroup;
  for (int q = q_begin; q < q_end; ++q) {
    const int jn = kTail ? std::min(g, k_end - q * g) : g;
    __m256 c[NP][g];
    DS41_UNROLL for (int v = 0; v < NP; ++v) Columns::columns(load_group(panel0 + v * pb, q), c[v]);
    // panels interleaved: NP independent add chains side by side hide the add latency
    for (int j = 0; j < jn; ++j) {
      const __m256 xk = _mm256_broadcast_ss(x + q * g + j);
      DS41_UNROLL for (int v = 0; v < NP; ++v) part[v] = _mm256_add_ps(part[v], _mm256_mul_ps(xk, c[v][j]));
    }
  }
}

/// Decode GEMV (one input row) of panels [p0, p0 + NP) into y[0 .. 8·NP).
template <class Columns, int NP, bool kScaled>
void gemv_tile(const float* x, const float* xs, const MatrixView& w, long p0, float* y, OutRound round) {
  constexpr int g = Columns::kGroup;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  __m256 acc[NP];
  DS41_UNROLL for (int v = 0; v < NP; ++v) acc[v] = _mm256_setzero_ps();
  for (int kb = 0; kb < K; kb += kBlockK) {
    __m256 part[NP];
    DS41_UNROLL for (int v = 0; v < NP; ++v) part[v] = kScaled ? _mm256_setzero_ps() : acc[v];
    if (kb + kBlockK <= K) add_groups<Columns, NP, false>(x, panel0, pb, kb / g, (kb + kBlockK) / g, K, part);
    else add_groups<Columns, NP, true>(x, panel0, pb, kb / g, (K + g - 1) / g, K, part);
    if constexpr (kScaled) {
      const __m256 sx = _mm256_broadcast_ss(xs + kb / 32);
      DS41_UNROLL for (int v = 0; v < NP; ++v) acc[v] = add_block(acc[v], part[v], sx, block_scales(w, p0 + v, kb / 32));
    } else {
      DS41_UNROLL for (int v = 0; v < NP; ++v) acc[v] = part[v];
    }
  }
  DS41_UNROLL for (int v = 0; v < NP; ++v) store_rounded(acc[v], y + 8 * v, round);
}

/// Prefill (T input rows) of panels [p0, p0 + NP): each 32-column block decoded once per kRowChunk rows.
template <class Columns, int NP, bool kScaled>
void linear_tile(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, long p0, float* y,
                 long y_stride, OutRound round) {
  constexpr int g = Columns::kGroup;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K), kblocks = (K + kBlockK - 1) / kBlockK;
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  alignas(32) __m256 wt[kBlockK][NP];
  for (long r0 = 0; r0 < T; r0 += kRowChunk) {
    const int tc = static_cast<int>(std::min<long>(kRowChunk, T - r0));
    __m256 acc[kRowChunk][NP];
    for (int r = 0; r < tc; ++r)
      DS41_UNROLL for (int v = 0; v < NP; ++v) acc[r][v] = _mm256_setzero_ps();
    for (int kb = 0; kb < K; kb += kBlockK) {
      const int kn = std::min(kBlockK, K - kb);
      for (int q = kb / g; q * g < kb + kn; ++q)
        DS41_UNROLL for (int v = 0; v < NP; ++v) {
          __m256 c[g];
          Columns::columns(load_group(panel0 + v * pb, q), c);
          for (int j = 0; j < g && q * g + j < kb + kn; ++j) wt[q * g + j - kb][v] = c[j];
        }
      __m256 scale[NP];
      if constexpr (kScaled)
        DS41_UNROLL for (int v = 0; v < NP; ++v) scale[v] = block_scales(w, p0 + v, kb / 32);
      // two input rows per pass: each weight column loaded once feeds both rows' chains (one row
      // per pass made the loads, not the multiply-adds, the bound)
      int r = 0;
      for (; r + 2 <= tc; r += 2) {
        const float* x0 = x + (r0 + r) * x_stride + kb;
        const float* x1 = x0 + x_stride;
        __m256 a0[NP], a1[NP];
        DS41_UNROLL for (int v = 0; v < NP; ++v) {
          a0[v] = kScaled ? _mm256_setzero_ps() : acc[r][v];
          a1[v] = kScaled ? _mm256_setzero_ps() : acc[r + 1][v];
        }
        for (int k = 0; k < kn; ++k) {
          const __m256 xk0 = _mm256_broadcast_ss(x0 + k), xk1 = _mm256_broadcast_ss(x1 + k);
          DS41_UNROLL for (int v = 0; v < NP; ++v) {
            __m256 wk = wt[k][v];
#if defined(__GNUC__)
            asm("" : "+x"(wk));  // one load per column: the compiler would fold it into both multiplies
#endif
            a0[v] = _mm256_add_ps(a0[v], _mm256_mul_ps(xk0, wk));
            a1[v] = _mm256_add_ps(a1[v], _mm256_mul_ps(xk1, wk));
          }
        }
        if constexpr (kScaled) {
          const __m256 sx0 = _mm256_broadcast_ss(xs + (r0 + r) * kblocks + kb / 32);
          const __m256 sx1 = _mm256_broadcast_ss(xs + (r0 + r + 1) * kblocks + kb / 32);
          DS41_UNROLL for (int v = 0; v < NP; ++v) {
            acc[r][v] = add_block(acc[r][v], a0[v], sx0, scale[v]);
            acc[r + 1][v] = add_block(acc[r + 1][v], a1[v], sx1, scale[v]);
          }
        } else {
          DS41_UNROLL for (int v = 0; v < NP; ++v) {
            acc[r][v] = a0[v];
            acc[r + 1][v] = a1[v];
          }
        }
      }
      for (; r < tc; ++r) {
        const float* xr = x + (r0 + r) * x_stride + kb;
        __m256 a[NP];
        DS41_UNROLL for (int v = 0; v < NP; ++v) a[v] = kScaled ? _mm256_setzero_ps() : acc[r][v];
        for (int k = 0; k < kn; ++k) {
          const __m256 xk = _mm256_broadcast_ss(xr + k);
          DS41_UNROLL for (int v = 0; v < NP; ++v) a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(xk, wt[k][v]));
        }
        if constexpr (kScaled) {
          const __m256 sx = _mm256_broadcast_ss(xs + (r0 + r) * kblocks + kb / 32);
          DS41_UNROLL for (int v = 0; v < NP; ++v) acc[r][v] = add_block(acc[r][v], a[v], sx, scale[v]);
        } else {
          DS41_UNROLL for (int v = 0; v < NP; ++v) acc[r][v] = a[v];
        }
      }
    }
    for (int r = 0; r < tc; ++r)
      DS41_UNROLL for (int v = 0; v < NP; ++v) store_rounded(acc[r][v], y + (r0 + r) * y_stride + 8 * v, round);
  }
}

/// Walks rows [n_begin, n_end) of a panel view: whole panels as tile(NP, n, p0) (n the first
/// row, p0 its panel; kTile panels at a time, then single ones), the rest as scalar(from, to).
/// A row_slice may start inside a panel: its rows up to the next panel boundary, and rows after
/// the last whole panel, go scalar.
template <int kTile = kTilePanels, class Tile, class Scalar>
inline void walk_panel_rows(const MatrixView& w, int n_begin, int n_end, Tile&& tile, Scalar&& scalar) {
  int n = std::min(n_end, n_begin + (kPanelRows - (w.row0 + n_begin) % kPanelRows) % kPanelRows);
  scalar(n_begin, n);
  for (; n + kPanelRows * kTile <= n_end; n += kPanelRows * kTile)
    tile(std::integral_constant<int, kTile>{}, n, static_cast<long>((w.row0 + n) / kPanelRows));
  for (; n + kPanelRows <= n_end; n += kPanelRows)
    tile(std::integral_constant<int, 1>{}, n, static_cast<long>((w.row0 + n) / kPanelRows));
  scalar(n, n_end);
}

/// How many of the NP panels after a decode tile at row n (panels of pb bytes) the tile should
/// prefetch: those before prefetch_end, the end of the rows this thread is expected to go on
/// with (past it they are another thread's, or not the view's), and none when a tile exceeds
/// 128 KiB: a tile ahead would then not stay in L2 until used (this tile and the next fill a
/// quarter of a Zen 5 core's 1 MiB, half of Zen 3's 512 KiB), and streams that long the hardware
/// prefetcher follows by itself. 128 rather than session 9's 64 KiB: the AVX2 fp8 tile at K =
/// 2304 (72 KiB) then prefetches, and read 5120 x 2304 cold at 45-46 instead of 41 GB/s (stream
/// 46) and 50-51 instead of 46-47 (stream 79), alternating call by call, and the AVX2 fp4 tile
/// at K = 5120 (80 KiB) 1280 x 5120 at 36.5-38.4 instead of 33.7-34.6 (stream 47); the fp8 dot
/// product tile at 5120 x 2304 lost 1-3%. 256 and 512 KiB gained nothing more at the other fp8
/// shapes; the bf16 tiles (host/gemv_panels512.hpp) do not prefetch the next tile: it made them
/// 5-10% faster while the stream read at ~79 GB/s, 1-4% slower at ~46.
inline int panels_to_prefetch(int n, int NP, int prefetch_end, long pb) {
  if (NP * pb > (128L << 10)) return 0;
  return std::clamp((prefetch_end - n - NP * kPanelRows) / kPanelRows, 0, NP);
}

/// How far ahead of the groups being summed a decode tile prefetches each of its panels (into
/// L1), in bytes: the fp8 tiles (host/gemv_scaled.hpp, host/gemv_scaled512.hpp) and the fp4
/// integer tiles (host/gemv_fp4int.hpp, host/gemv_fp4int512.hpp). Why: the hardware prefetcher alone, following a tile's 4 panel
/// streams while the arithmetic runs between the loads, left one Zen 5 core well below a plain
/// stream read. Measured on one 42 MB fp8 copy, which stays partly in the 32 MiB L3 (one run, 8
/// interleaved repetitions, 2 threads / 1 thread), 32768 x 1280: none 1.26 / 2.44 ms, 1 KiB 770
/// us / 1.69 ms, 2 KiB 764 us / 1.40 ms, 3 KiB 669 us / 1.45 ms, 4 KiB 854 us / 1.57 ms, 6 KiB
/// 788 us / 1.58 ms. With cold weights the fp8 tiles of two blocks a step showed no difference
/// beyond the noise (0-16 KiB; T0, T1, NTA); the fp4 integer tile with 3 KiB read ~7% faster
/// (AVX-512, 3 interleaved rounds of 5 shapes: 1280 x 5120 31.1 / 33.8 / 27.4 -> 35.4 / 34.5
/// GB/s, 32768 x 1280 37.8 / 36.5 / 35.4 -> 40.8 / 37.7 / 39.2; AVX2 5-13% in session 9), 1
/// KiB no better than none. Past a panel's end the lines are the next panel's (panels are
/// contiguous), or past the matrix, which a prefetch never faults on.
constexpr int kPrefetchAhead = 3072;

/// Prefetches `bytes` (whole lines) at `ahead` bytes past `p`. The address is formed as an
/// integer: it may lie past the end of the matrix, where no C++ pointer may point. Always inlined
/// (prefetch_l2.hpp says why).
DS41_ALWAYS_INLINE void prefetch_ahead(const uint8_t* p, int bytes, int ahead = kPrefetchAhead) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p) + ahead;
  for (int b = 0; b < bytes; b += 64) _mm_prefetch(reinterpret_cast<const char*>(at + b), _MM_HINT_T0);
}

/// Asks for `bytes` from p in L2, a tile ahead of its use (host/prefetch_l2.hpp says why).
using host_prefetch::prefetch_l2;

template <class Columns, bool kScaled>
void linear_rows_with(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, float* y,
                      long y_stride, OutRound round, int n_begin, int n_end) {
  walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        if (T == 1) gemv_tile<Columns, NP, kScaled>(x, xs, w, p0, y + n, round);
        else linear_tile<Columns, NP, kScaled>(x, xs, T, x_stride, w, p0, y + n, y_stride, round);
      },
      [&](int from, int to) { linear_rows_scalar(x, xs, T, x_stride, w, y, y_stride, round, from, to); });
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for a panel-layout W. fp8/fp4: x holds act_quant's
/// q values (row stride x_stride) and xs its scales (row stride ceil(K/32)).
inline void linear_rows(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, float* y,
                        long y_stride, OutRound round, int n_begin, int n_end) {
  dispatch_format(w.format, [&](auto tag) {
    using Columns = decoder_for_t<decltype(tag)::value, F32Columns, Bf16Columns, Fp8Columns, Fp4Columns>;
    constexpr bool kScaled = TraitsOf<decltype(tag)>::kBlockScaled;
    if constexpr (!std::is_void_v<Columns>)  // else not these panels (host/gemv_ggml.hpp has its own)
      linear_rows_with<Columns, kScaled>(x, kScaled ? xs : nullptr, T, x_stride, w, y, y_stride, round, n_begin, n_end);
  });
}

/// The descriptor (host/linear_call.hpp): the panel tiles, 8 rows a vector, any T (the decode GEMV
/// for T = 1).
struct Tiles {
  static constexpr const char* kName = "panel tiles (AVX2)";
  struct Prepared {};
  static bool usable(const LinearCall& c) { return c.w.layout == WeightLayout::kPanels8 && panel_group_k(c.w.format) != 0; }
  static bool prepare(const LinearCall&, Prepared&) { return true; }
  static void run(const LinearCall& c, const Prepared&, int n_begin, int n_end, int) {
    panels::linear_rows(c.x, c.xs, c.T, c.x_stride, c.w, c.y, c.y_stride, c.round, n_begin, n_end);
  }
};

}  // namespace ds41::host_gemv::panels
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::panels {
struct Tiles : NotBuilt {};
}  // namespace ds41::host_gemv::panels
#endif
