// ds41/backend/host/panels.hpp — the host backend's panel layout of Linear weights (packing).
//
// Why: the reference sums each output row in K order, so the host GEMV vectorises across 8 output
// rows. From row-major weights that needs an 8x8 transpose per 8x8 tile, which cost more than the
// memory traffic. Stored as panels (WeightLayout::kPanels8), the 8 rows' weights for one K group
// are 32 contiguous bytes: one load gives every row's weights for 1 (f32), 2 (bf16), 4 (fp8) or 8
// (fp4) consecutive K positions, and each row still sees its own values in its own order.
//
// Layout, panel p = stored rows [8p, 8p + 8) (rows past the end are zeros):
//   payload: panel p at p * panel_bytes(format, cols); inside it, group q (K positions
//            [q*g, q*g + g)) at q * 32. f32/bf16: row 8p + i's row-major 4 bytes of the group at
//            4i. fp8: row 8p + i's code for column j at byte panel_code_byte(i, j) (row i's
//            4 bytes consecutive, in the order the scaled decoder's 16-bit shifts take them).
//            fp4: at fp4_panel_code_byte(i, j), low nibble for j < 4, high for j >= 4 (row i's
//            4 bytes consecutive).
//            The K tail is padded with zero codes.
//   scales:  fp8: unchanged, [ceil(N/32), ceil(K/32)], then (as bytes, in the same buffer) one
//            flag per (panel, 32-column block), 1 where the block holds a subnormal code: the
//            bf16 dot-product decoder flushes those and leaves such blocks to the multiply-adds.
//            fp4: e8m0 bytes [panel][kblock][8 rows] (MatrixView::host_fp4_scales_e8m0, in the
//            `scales` buffer; MatrixView::scales is null). Why: as floats the scales were 20% of
//            an fp4 matrix's bytes (4 per 32 half-byte codes), as bytes 6%; the decode GEMV
//            streams them with the codes, and cold it read 15% fewer bytes in ~15% less time
//            (docs/PERFORMANCE.md). Every fp4 checkpoint scale is e8m0 (the reference's
//            float8_e8m0fnu, GGUF MXFP4); a matrix with a scale e8m0 cannot hold stays row-major.
// The same memory as row-major up to the padding: the packed copy replaces the original.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <cstdint>
#include <cstring>
#include "../../core/linear_math.hpp"
#include "gemv_scaled.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_panels {

/// Whether `src` can be stored as panels. fp8 matrices holding a NaN code stay row-major: the
/// panel kernels' vector decoder maps codes arithmetically and would turn NaN into 480. fp4
/// matrices with a block scale e8m0 cannot hold stay row-major too (the panels store e8m0 bytes).
inline bool packable(const MatrixView& src) {
  if (src.layout != WeightLayout::kRowMajor || src.rows <= 0 || src.cols <= 0) return false;
  if (src.format == WeightFormat::kGgmlBlocks) return false;  // kept as stored (host/gemv_ggml.hpp)
  if (src.format == WeightFormat::kFp4Block32) {
    if (src.cols % 2 != 0 || src.scales == nullptr) return false;
    const long n = static_cast<long>(src.rows) * ((src.cols + 31) / 32);
    uint8_t e;
    for (long i = 0; i < n; ++i)
      if (!f32_to_e8m0(src.scales[i], &e)) return false;
  }
  if (src.format == WeightFormat::kFp8Block32) {
    const auto* codes = static_cast<const uint8_t*>(src.data);
    const long n = static_cast<long>(src.rows) * src.cols;
    for (long i = 0; i < n; ++i)
      if ((codes[i] & 0x7F) == 0x7F) return false;
  }
  return true;
}

inline long panels(int rows) { return (rows + kPanelRows - 1) / kPanelRows; }

inline size_t payload_bytes(WeightFormat f, int rows, int cols) {
  return static_cast<size_t>(panels(rows) * panel_bytes(f, cols));
}

/// fp8: the float scales (as row-major). Others: 0 (fp4's are bytes, fp4_scale_bytes).
inline size_t scale_count(WeightFormat f, int rows, int cols) {
  const long kblocks = (cols + 31) / 32;
  if (f == WeightFormat::kFp8Block32) return static_cast<size_t>((rows + 31) / 32 * kblocks);
  return 0;
}
/// fp4: the e8m0 scale bytes, one per stored row and 32-column block.
inline size_t fp4_scale_bytes(WeightFormat f, int rows, int cols) {
  if (f != WeightFormat::kFp4Block32) return 0;
  return static_cast<size_t>(panels(rows) * kPanelRows * ((cols + 31) / 32));
}

/// fp8: floats after the scales that hold the per-(panel, block) subnormal flags as bytes.
inline size_t subnormal_flag_floats(WeightFormat f, int rows, int cols) {
  if (f != WeightFormat::kFp8Block32) return 0;
  return static_cast<size_t>((panels(rows) * ((cols + 31) / 32) + 3) / 4);
}
/// The floats pack() writes into its `scales` buffer: fp8's scales, then its subnormal flags;
/// fp4's scale bytes.
inline size_t scale_buffer_count(WeightFormat f, int rows, int cols) {
  return scale_count(f, rows, cols) + subnormal_flag_floats(f, rows, cols) + (fp4_scale_bytes(f, rows, cols) + 3) / 4;
}
/// The bytes of the packed matrix: what one decode GEMV over all of it reads.
inline size_t packed_bytes(WeightFormat f, int rows, int cols) {
  return payload_bytes(f, rows, cols) + scale_buffer_count(f, rows, cols) * sizeof(float);
}

namespace detail {

/// Row i's 4 row-major bytes of one group in the panel's order (the group's 4-byte word of row i
/// lands at byte 4i of the group, panel_code_byte / fp4_panel_code_byte): f32/bf16 as they are;
/// fp8 swaps bytes 0 and 3 (columns 0-3 at bytes 3, 1, 2, 0); fp4 interleaves the nibbles: the
/// word's nibbles c0..c7 (column j at nibble j) become c0 c4 c1 c5 c2 c6 c3 c7 (byte j = column j
/// low, column j + 4 high): a perfect shuffle, as two swaps (bytes 1 and 2, then the middle
/// nibbles of each 16-bit half).
inline uint32_t panel_word(WeightFormat f, uint32_t w) {
  if (f == WeightFormat::kFp8Block32) return (w & 0x00FFFF00u) | (w >> 24) | (w << 24);
  if (f == WeightFormat::kFp4Block32) {
    w = (w & 0xFF0000FFu) | ((w & 0x00FF0000u) >> 8) | ((w & 0x0000FF00u) << 8);
    w = (w & 0xF00FF00Fu) | ((w & 0x0F000F00u) >> 4) | ((w & 0x00F000F0u) << 4);
  }
  return w;
}

/// Groups [q0, q1) of panel `panel` (rows `row[0..n_rows)`, the rest zero), one word at a time.
/// Every byte of those groups is written (the K tail's missing bytes and absent rows as zeros).
inline void pack_groups_scalar(WeightFormat f, const uint8_t* const* row, int n_rows, long rb, long q0, long q1,
                               uint8_t* panel) {
  for (int i = 0; i < kPanelRows; ++i)
    for (long q = q0; q < q1; ++q) {
      uint32_t w = 0;
      if (i < n_rows) {
        const long b = 4 * q;
        if (rb - b >= 4) std::memcpy(&w, row[i] + b, 4);
        else std::memcpy(&w, row[i] + b, static_cast<size_t>(rb - b));  // little-endian: the rest stays 0
        w = panel_word(f, w);
      }
      std::memcpy(panel + q * 32 + 4 * i, &w, 4);
    }
}

#if defined(DS41_HOST_AVX2)
/// panel_word on 8 lanes.
inline __m256i panel_words(WeightFormat f, __m256i w) {
  if (f == WeightFormat::kFp8Block32) {
    const __m256i swap03 = _mm256_setr_epi8(3, 1, 2, 0, 7, 5, 6, 4, 11, 9, 10, 8, 15, 13, 14, 12,  //
                                            3, 1, 2, 0, 7, 5, 6, 4, 11, 9, 10, 8, 15, 13, 14, 12);
    return _mm256_shuffle_epi8(w, swap03);
  }
  if (f == WeightFormat::kFp4Block32) {
    const __m256i swap12 = _mm256_setr_epi8(0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15,  //
                                            0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15);
    w = _mm256_shuffle_epi8(w, swap12);
    const __m256i keep = _mm256_set1_epi32(static_cast<int>(0xF00FF00Fu));
    const __m256i hi = _mm256_set1_epi32(0x0F000F00), lo = _mm256_set1_epi32(0x00F000F0);
    w = _mm256_or_si256(_mm256_and_si256(w, keep),
                        _mm256_or_si256(_mm256_srli_epi32(_mm256_and_si256(w, hi), 4),
                                        _mm256_slli_epi32(_mm256_and_si256(w, lo), 4)));
  }
  return w;
}

/// Groups [q, q + 8) of a full panel (8 rows, every word of them inside the rows): 8 rows x 8
/// words loaded, converted, transposed (word j of row i to group q + j, byte 4i) and stored as
/// the panel's 256 contiguous bytes from group q.
inline void pack_8_groups(WeightFormat f, const uint8_t* const* row, long q, uint8_t* panel) {
  __m256i r[8];
  DS41_UNROLL for (int i = 0; i < 8; ++i)
    r[i] = panel_words(f, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i] + 4 * q)));
  const __m256i t0 = _mm256_unpacklo_epi32(r[0], r[1]), t1 = _mm256_unpackhi_epi32(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(r[2], r[3]), t3 = _mm256_unpackhi_epi32(r[2], r[3]);
  const __m256i t4 = _mm256_unpacklo_epi32(r[4], r[5]), t5 = _mm256_unpackhi_epi32(r[4], r[5]);
  const __m256i t6 = _mm256_unpacklo_epi32(r[6], r[7]), t7 = _mm256_unpackhi_epi32(r[6], r[7]);
  // words j and j + 4 of rows 0-3 (u0-u3) and of rows 4-7 (u4-u7), j = 0..3
  const __m256i u0 = _mm256_unpacklo_epi64(t0, t2), u1 = _mm256_unpackhi_epi64(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi64(t1, t3), u3 = _mm256_unpackhi_epi64(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi64(t4, t6), u5 = _mm256_unpackhi_epi64(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi64(t5, t7), u7 = _mm256_unpackhi_epi64(t5, t7);
  auto* out = reinterpret_cast<__m256i*>(panel + q * 32);
  _mm256_storeu_si256(out + 0, _mm256_permute2x128_si256(u0, u4, 0x20));
  _mm256_storeu_si256(out + 1, _mm256_permute2x128_si256(u1, u5, 0x20));
  _mm256_storeu_si256(out + 2, _mm256_permute2x128_si256(u2, u6, 0x20));
  _mm256_storeu_si256(out + 3, _mm256_permute2x128_si256(u3, u7, 0x20));
  _mm256_storeu_si256(out + 4, _mm256_permute2x128_si256(u0, u4, 0x31));
  _mm256_storeu_si256(out + 5, _mm256_permute2x128_si256(u1, u5, 0x31));
  _mm256_storeu_si256(out + 6, _mm256_permute2x128_si256(u2, u6, 0x31));
  _mm256_storeu_si256(out + 7, _mm256_permute2x128_si256(u3, u7, 0x31));
}
#endif

/// The payload of pack(): every byte of payload_bytes(f, rows, cols) written. `vector` false
/// takes the word-at-a-time path everywhere (the test compares the two).
inline void pack_payload(WeightFormat f, int rows, int cols, const uint8_t* in, uint8_t* payload, bool vector = true) {
  const long pb = panel_bytes(f, cols), rb = row_major_row_bytes(f, cols);
  const long groups = pb / 32;
  (void)vector;
  for (long p = 0; p < panels(rows); ++p) {
    const int n_rows = static_cast<int>(std::min<long>(kPanelRows, rows - p * kPanelRows));
    const uint8_t* row[kPanelRows];
    for (int i = 0; i < kPanelRows; ++i) row[i] = in + (p * kPanelRows + std::min(i, n_rows - 1)) * rb;
    uint8_t* panel = payload + p * pb;
    long q = 0;
#if defined(DS41_HOST_AVX2)
    if (vector && n_rows == kPanelRows)
      for (; q + 8 <= rb / 4; q += 8) pack_8_groups(f, row, q, panel);  // whole words inside the rows
#endif
    pack_groups_scalar(f, row, n_rows, rb, q, groups, panel);
  }
}

}  // namespace detail

/// Writes `src` (row-major, packable) as panels into payload [payload_bytes] and scales
/// [scale_buffer_count]; returns the view of the packed matrix. Each 32-bit word of a row (one
/// group's bytes of it) is moved whole: 8 rows x 8 words at a time, transposed in registers,
/// where AVX2 is compiled in (detail::pack_payload).
inline MatrixView pack(const MatrixView& src, uint8_t* payload, float* scales) {
  const long rb = row_major_row_bytes(src.format, src.cols);
  const auto* in = static_cast<const uint8_t*>(src.data);
  detail::pack_payload(src.format, src.rows, src.cols, in, payload);
  const long kblocks = (src.cols + 31) / 32;
  if (src.format == WeightFormat::kFp8Block32)
    std::memcpy(scales, src.scales, scale_count(src.format, src.rows, src.cols) * sizeof(float));
  uint8_t* fp4_scales = nullptr;
  if (src.format == WeightFormat::kFp4Block32) {  // [panel][kblock][8 rows], rows past the end 0
    fp4_scales = reinterpret_cast<uint8_t*>(scales);
    const size_t n = fp4_scale_bytes(src.format, src.rows, src.cols);
    std::memset(fp4_scales + n, 0, scale_buffer_count(src.format, src.rows, src.cols) * sizeof(float) - n);
    for (long p = 0; p < panels(src.rows); ++p)
      for (int i = 0; i < kPanelRows; ++i) {
        const long r = p * kPanelRows + i;
        uint8_t* out = fp4_scales + p * kblocks * kPanelRows + i;
        if (r >= src.rows) {
          for (long kb = 0; kb < kblocks; ++kb) out[kb * kPanelRows] = 0;
          continue;
        }
        const float* s = src.scales + r * kblocks;
        for (long kb = 0; kb < kblocks; ++kb)  // packable() checked that every scale is e8m0
          f32_to_e8m0(s[kb], &out[kb * kPanelRows]);
      }
  }
  uint8_t* subnormal_blocks = nullptr;
  if (src.format == WeightFormat::kFp8Block32) {  // per (panel, 32-column block): any subnormal code
    subnormal_blocks = reinterpret_cast<uint8_t*>(scales + scale_count(src.format, src.rows, src.cols));
    std::memset(subnormal_blocks, 0, subnormal_flag_floats(src.format, src.rows, src.cols) * sizeof(float));
    for (int r = 0; r < src.rows; ++r) {
      const uint8_t* row = in + static_cast<long>(r) * rb;
      uint8_t* flags = subnormal_blocks + (r / kPanelRows) * kblocks;
      for (long kb = 0; kb < kblocks; ++kb) {
        const long k0 = kb * 32, k1 = std::min<long>(src.cols, k0 + 32);
        uint8_t any = 0;
        for (long k = k0; k < k1; ++k) any |= static_cast<uint8_t>(e4m3_code_is_subnormal(row[k]));
        flags[kb] |= any;
      }
    }
  }
  MatrixView v = src;
  v.host_bf16_abs_min = v.host_bf16_abs_max = 0;
  if (src.format == WeightFormat::kBF16) {  // the magnitudes' range, for fused multiply-adds
    const auto* w = reinterpret_cast<const uint16_t*>(in);
    const long n = static_cast<long>(src.rows) * src.cols;
    uint16_t lo = 0x7FFF, hi = 0;
    bool finite = true;
    for (long i = 0; i < n; ++i) {
      const uint16_t m = w[i] & 0x7FFF;
      finite &= m < 0x7F80;
      if (m) lo = std::min(lo, m), hi = std::max(hi, m);
    }
    if (finite && hi) {
      v.host_bf16_abs_min = bf16_to_f32(lo);
      v.host_bf16_abs_max = bf16_to_f32(hi);
    }
  }
  v.host_subnormal_blocks = subnormal_blocks;
  v.host_fp4_scales_e8m0 = fp4_scales;
  v.layout = WeightLayout::kPanels8;
  v.row0 = 0;
  v.data = payload;
  v.scales = scale_count(src.format, src.rows, src.cols) ? scales : nullptr;
  v.host_scaled_decode = false;
#if defined(DS41_HOST_AVX2)
  v.host_scaled_decode = host_gemv::scaled::decode_suits(src.format, in, static_cast<long>(src.rows) * src.cols);
#endif
  return v;
}

}  // namespace ds41::host_panels
#include "../../core/fp_exact_end.hpp"
