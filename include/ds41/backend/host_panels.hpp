// ds41/backend/host_panels.hpp — the host backend's panel layout of Linear weights (packing).
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
//            (README "Performance"). Every fp4 checkpoint scale is e8m0 (the reference's
//            float8_e8m0fnu, GGUF MXFP4); a matrix with a scale e8m0 cannot hold stays row-major.
// The same memory as row-major up to the padding: the packed copy replaces the original.
#pragma once
#include <cstdint>
#include <cstring>
#include "../core/linear_math.hpp"
#include "host_gemv_scaled.hpp"

namespace ds41::host_panels {

/// Whether `src` can be stored as panels. fp8 matrices holding a NaN code stay row-major: the
/// panel kernels' vector decoder maps codes arithmetically and would turn NaN into 480. fp4
/// matrices with a block scale e8m0 cannot hold stay row-major too (the panels store e8m0 bytes).
inline bool packable(const MatrixView& src) {
  if (src.layout != WeightLayout::kRowMajor || src.rows <= 0 || src.cols <= 0) return false;
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

/// Writes `src` (row-major, packable) as panels into payload [payload_bytes] and scales
/// [scale_buffer_count]; returns the view of the packed matrix.
inline MatrixView pack(const MatrixView& src, uint8_t* payload, float* scales) {
  const long pb = panel_bytes(src.format, src.cols), rb = row_major_row_bytes(src.format, src.cols);
  std::memset(payload, 0, payload_bytes(src.format, src.rows, src.cols));
  const auto* in = static_cast<const uint8_t*>(src.data);
  for (int r = 0; r < src.rows; ++r) {
    uint8_t* panel = payload + (r / kPanelRows) * pb;
    const uint8_t* row = in + r * rb;
    const int i = r % kPanelRows;
    switch (src.format) {
      case WeightFormat::kF32:
      case WeightFormat::kBF16:
        for (long b = 0; b < rb; b += 4) std::memcpy(panel + b * kPanelRows + 4 * i, row + b, rb - b < 4 ? rb - b : 4);
        break;
      case WeightFormat::kFp8Block32:
        for (int k = 0; k < src.cols; ++k) panel[(k / 4) * 32 + panel_code_byte(i, k % 4)] = row[k];
        break;
      case WeightFormat::kFp4Block32:
        for (int k = 0; k < src.cols; ++k) {
          const uint8_t code = (k & 1) ? row[k / 2] >> 4 : row[k / 2] & 0xF;
          panel[(k / 8) * 32 + fp4_panel_code_byte(i, k % 8)] |= static_cast<uint8_t>(k % 8 >= 4 ? code << 4 : code);
        }
        break;
    }
  }
  const long kblocks = (src.cols + 31) / 32;
  if (src.format == WeightFormat::kFp8Block32)
    std::memcpy(scales, src.scales, scale_count(src.format, src.rows, src.cols) * sizeof(float));
  uint8_t* fp4_scales = nullptr;
  if (src.format == WeightFormat::kFp4Block32) {
    fp4_scales = reinterpret_cast<uint8_t*>(scales);
    std::memset(scales, 0, scale_buffer_count(src.format, src.rows, src.cols) * sizeof(float));
    for (int r = 0; r < src.rows; ++r)
      for (long kb = 0; kb < kblocks; ++kb)  // packable() checked that every scale is e8m0
        f32_to_e8m0(src.scales[r * kblocks + kb], &fp4_scales[((r / kPanelRows) * kblocks + kb) * kPanelRows + r % kPanelRows]);
  }
  uint8_t* subnormal_blocks = nullptr;
  if (src.format == WeightFormat::kFp8Block32) {
    subnormal_blocks = reinterpret_cast<uint8_t*>(scales + scale_count(src.format, src.rows, src.cols));
    std::memset(subnormal_blocks, 0, subnormal_flag_floats(src.format, src.rows, src.cols) * sizeof(float));
    for (int r = 0; r < src.rows; ++r)
      for (int k = 0; k < src.cols; ++k)
        if (e4m3_code_is_subnormal(in[static_cast<long>(r) * rb + k]))
          subnormal_blocks[(r / kPanelRows) * kblocks + k / 32] = 1;
  }
  MatrixView v = src;
  v.host_subnormal_blocks = subnormal_blocks;
  v.host_fp4_scales_e8m0 = fp4_scales;
  v.layout = WeightLayout::kPanels8;
  v.row0 = 0;
  v.data = payload;
  v.scales = scale_count(src.format, src.rows, src.cols) ? scales : nullptr;
  v.host_scaled_decode = false;
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
  v.host_scaled_decode = host_gemv::scaled::decode_suits(src.format, in, static_cast<long>(src.rows) * src.cols);
#endif
  return v;
}

}  // namespace ds41::host_panels
