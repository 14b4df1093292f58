// ds41/core/linear_math.hpp — one output element of y = x · Wᵀ for each weight format.
//
// The reference's bf16 Linear accumulates in float32 and rounds once; these dot products take the
// products in K order into one float32 accumulator. Backends call these per output element (the
// host in loops, CUDA per thread), so the arithmetic is the same on both.
//
// fp8 and fp4 weights follow the reference's linear() (model.py): the input row is first
// quantised to e4m3 per 32 values with a power-of-two scale (act_quant, block 32, ue8m0), and the
// block-scaled GEMM (kernel fp8_gemm / fp4_gemm) sums each 32-column block's products q·w (all
// exact: e4m3 x e4m3 and e4m3 x e2m1 fit a float) in K order into a float32 partial, then
// acc = acc + (partial·s_x)·s_w. See docs/NUMERICS.md, "Linear layers with fp8 or fp4 weights".
#pragma once
#include <cstdint>
#include "ggml_panels.hpp"
#include "ggml_quants.hpp"
#include "numeric.hpp"
#include "quant.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

enum class WeightFormat : int {
  kF32 = 0,         // float32 values
  kBF16 = 1,        // bfloat16 bit patterns
  kFp8Block32 = 2,  // e4m3 codes, one float scale per 32x32 block (row-block major)
  kFp4Block32 = 3,  // e2m1 codes two per byte (low nibble first), one float scale per 32 along K
  kGgmlBlocks = 4,  // a GGUF file's blocks of one ggml type as stored (MatrixView::ggml_type), rows
                    // row-major; each element's value is core/ggml_quants.hpp's (issue 39)
};
/// Where kGgmlBlocks is (an engine's code may test for it).
#define DS41_HAVE_GGML_BLOCKS 1

inline const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kFp8Block32: return "fp8-block32";
    case WeightFormat::kFp4Block32: return "fp4-block32";
    case WeightFormat::kGgmlBlocks: return "ggml-blocks";
  }
  return "?";
}

// ---------------------------------------------------------------- GGUF blocks kept as stored
// (the types, their sizes and values: core/ggml_quants.hpp's ggml_linear_type and neighbours)
/// Row n of a kGgmlBlocks matrix: dot_f32 over the values, block by block (the same products and
/// sums in the same order as dot_f32 on the widened row).
DS41_HD float dot_ggml_blocks(const float* x, const uint8_t* row, int K, GgmlType t) {
  float v[256];
  const int be = ggml_block_elems(t) == 1 ? 256 : ggml_block_elems(t);  // F16: 256 elements at a time
  const long bytes = ggml_block_bytes(t) * (be / ggml_block_elems(t));
  float acc = 0.0f;
  for (int k0 = 0; k0 < K; k0 += be) {
    const int n = K - k0 < be ? K - k0 : be;  // only F16 can end in a partial group
    dequantize_ggml_linear_blocks(t, row + (k0 / be) * bytes, ggml_block_elems(t) == 1 ? n : 1, v);
    for (int j = 0; j < n; ++j) acc += x[k0 + j] * v[j];
  }
  return acc;
}

/// Output rounding of a Linear: the reference's bf16 Linear rounds each output once to bf16; its
/// f32 Linears (router, head, hc mixes, ratio>1 compressor) keep float32.
enum class OutRound : int { kF32 = 0, kBF16 = 1 };

DS41_HD float apply_round(float v, OutRound r) { return r == OutRound::kBF16 ? bf16_round(v) : v; }

DS41_HD float dot_f32(const float* x, const float* w, int K) {
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += x[k] * w[k];
  return acc;
}

DS41_HD float dot_bf16(const float* x, const uint16_t* w, int K) {
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc += x[k] * bf16_to_f32(w[k]);
  return acc;
}

/// One 32-column block's contribution to a block-scaled Linear: acc + (part·s_x)·s_w, in the
/// reference's order (left to right; every operation rounded on its own).
DS41_HD float add_block(float acc, float part, float s_x, float s_w) { return acc + part * s_x * s_w; }

/// The input row of a block-scaled Linear: raw x (`scale == nullptr`: quantised on the fly here,
/// the oracle form) or act_quant's q and scales (what the fast paths prepare once per row).
struct LinearInput {
  const float* x = nullptr;
  const float* scale = nullptr;
  DS41_HD float block_scale(int kb, int ke) const { return scale ? scale[kb / 32] : act_quant_scale(x + kb, ke - kb); }
  DS41_HD float q(int k, float s) const { return scale ? x[k] : act_quant_value(x[k], s); }
};

/// Row n of an fp8 32x32-block matrix: codes [N, K], scales [ceil(N/32), ceil(K/32)].
DS41_HD float dot_fp8_block32(LinearInput in, const uint8_t* codes_row, const float* scale_row, int K) {
  float acc = 0.0f;
  for (int kb = 0; kb < K; kb += 32) {
    const int ke = kb + 32 < K ? kb + 32 : K;
    const float sx = in.block_scale(kb, ke);
    float part = 0.0f;
    for (int k = kb; k < ke; ++k) part += in.q(k, sx) * e4m3_decode(codes_row[k]);
    acc = add_block(acc, part, sx, scale_row[kb / 32]);
  }
  return acc;
}

/// Row n of an fp4 matrix: packed codes [N, K/2], scales [N, K/32].
DS41_HD float dot_fp4_block32(LinearInput in, const uint8_t* packed_row, const float* scale_row, int K) {
  float acc = 0.0f;
  for (int kb = 0; kb < K; kb += 32) {
    const int ke = kb + 32 < K ? kb + 32 : K;
    const float sx = in.block_scale(kb, ke);
    float part = 0.0f;
    for (int k = kb; k < ke; ++k) {
      uint8_t byte = packed_row[k / 2];
      part += in.q(k, sx) * e2m1_decode((k & 1) ? (byte >> 4) : (byte & 0xF));
    }
    acc = add_block(acc, part, sx, scale_row[kb / 32]);
  }
  return acc;
}

/// torch 1.13's CPU bmm for tiny problems (contraction · rows · cols < 400 per batch): each bf16
/// product rounded to bf16 and the running sum kept in bf16. The reference's two einsums (the
/// grouped wo_a and the indexer's q·k) reach it on small decode shapes; reproduced, not fixed.
constexpr long kTorchSmallBmm = 400;
DS41_HD bool torch_small_bmm(long contraction, long rows, long cols) { return contraction * rows * cols < kTorchSmallBmm; }
template <class W>
DS41_HD float dot_bf16_running(const float* x, W w, int K) {
  float acc = 0.0f;
  for (int k = 0; k < K; ++k) acc = bf16_round(acc + bf16_round(x[k] * w(k)));
  return acc;
}

/// How a matrix's payload is laid out. Row-major is the file order and what every backend reads;
/// the host backend repacks its Linear weights into 8-row panels so its GEMV reads 8 rows' weights
/// for one K position as one vector (host/panels.hpp), with the same values and the same sums.
enum class WeightLayout : int {
  kRowMajor = 0,  // row n's K values contiguous (fp4: two per byte, low nibble first)
  kPanels8 = 1,   // 8-row panels: per panel, K in groups of 32 bytes holding 8 rows x 4 bytes
};

/// Panel layout: rows per panel, and K positions per 32-byte group (8 rows x 4 bytes: 1 f32,
/// 2 bf16, 4 fp8 codes, 8 fp4 codes per row).
constexpr int kPanelRows = 8;
DS41_HD int panel_group_k(WeightFormat f) {
  return f == WeightFormat::kF32 ? 1 : f == WeightFormat::kBF16 ? 2 : f == WeightFormat::kFp8Block32 ? 4 : 8;
}
/// Panel layout, fp8: the byte of a group holding row i's code for column j. f32 and bf16 keep
/// row i's 4 row-major bytes at 4i. fp8 keeps row i's 4 codes together too, columns 0, 1, 2, 3 at
/// bytes 3, 1, 2, 0 of them: read as a 32-bit lane of two 16-bit halves, columns 0 and 1 are the
/// halves' high bytes and 2 and 3 their low bytes, where the scaled decode GEMV
/// (host/gemv_scaled.hpp) shifts them from without a shuffle; the table decoder shuffles first.
DS41_HD constexpr int panel_code_byte(int i, int j) { return 4 * (i % 4) + ((0x0213 >> (4 * (j % 4))) & 0xF) + 16 * (i / 4); }
/// Panel layout, fp4: the byte of a group holding row i's code for column j, the low nibble for
/// j < 4 and the high one for j >= 4. Row i's 4 bytes are consecutive: the integer decode GEMV
/// (host/gemv_fp4int.hpp) multiplies them as they lie, and the float decoder transposes first.
DS41_HD constexpr int fp4_panel_code_byte(int i, int j) { return 4 * (i % 4) + (j % 4) + 16 * (i / 4); }
/// Bytes of one panel: ceil(cols / group) groups of 8 rows x 4 bytes (the K tail padded with zeros).
DS41_HD long panel_bytes(WeightFormat f, int cols) {
  const int g = panel_group_k(f);
  return static_cast<long>((cols + g - 1) / g) * (kPanelRows * 4);
}

/// Bytes of one row of a row-major matrix (fp4: cols / 2, two codes a byte).
DS41_HD long row_major_row_bytes(WeightFormat f, int cols) {
  switch (f) {
    case WeightFormat::kF32: return 4L * cols;
    case WeightFormat::kBF16: return 2L * cols;
    case WeightFormat::kFp8Block32: return cols;
    case WeightFormat::kFp4Block32: return cols / 2;
    case WeightFormat::kGgmlBlocks: return 0;  // depends on the type: MatrixView::row_bytes()
  }
  return 0;
}

/// Non-owning view of a weight matrix [rows=N out, cols=K in] in any format.
struct MatrixView {
  WeightFormat format = WeightFormat::kBF16;
  int rows = 0, cols = 0;
  const void* data = nullptr;     // format-specific payload
  const float* scales = nullptr;  // fp8/fp4 block scales
  WeightLayout layout = WeightLayout::kRowMajor;
  int row0 = 0;  // panel layout: the stored row that is this view's row 0 (row_slice cannot move
                 // `data` into the middle of a panel); always 0 for row-major
  bool host_scaled_decode = false;  // host panels, fp8: set by host_panels::pack when the codes and
                                    // scales suit the host's scaled-domain decoder (host/gemv_scaled.hpp)
  const uint8_t* host_subnormal_blocks = nullptr;  // host panels, fp8: one byte per (stored panel,
                                                  // 32-column block), nonzero where it holds a
                                                  // subnormal code (host/gemv_fp8dot512.hpp)
  const uint8_t* host_fp4_scales_e8m0 = nullptr;  // host panels, fp4: the block scales as e8m0
                                                 // bytes, [stored panel][32-column block][8 rows]
                                                 // (`scales` is null; host/panels.hpp says why)
  float host_bf16_abs_min = 0, host_bf16_abs_max = 0;  // host panels, bf16: the smallest nonzero and
                                                       // the largest |w|, all finite (0: not known);
                                                       // host/gemm_panels512.hpp's fused products
  GgmlType ggml_type = GgmlType::kF32;  // kGgmlBlocks: the blocks' type (a ggml_linear_type)

  /// Bytes of one row-major row.
  DS41_HD long row_bytes() const {
    return format == WeightFormat::kGgmlBlocks ? ggml_row_bytes(ggml_type, cols) : row_major_row_bytes(format, cols);
  }

  /// Output n of the Linear for the input row x: the reference's arithmetic (for fp8/fp4 with the
  /// input's act_quant). `x_scale`: null when x is the raw row; act_quant_row's scales when x holds
  /// its q values (fp8/fp4 only).
  DS41_HD float dot(const float* x, int n, const float* x_scale = nullptr) const {
    if (layout == WeightLayout::kPanels8) return panel_dot(LinearInput{x, x_scale}, n);
    switch (format) {
      case WeightFormat::kF32: return dot_f32(x, static_cast<const float*>(data) + static_cast<long>(n) * cols, cols);
      case WeightFormat::kBF16:
        return dot_bf16(x, static_cast<const uint16_t*>(data) + static_cast<long>(n) * cols, cols);
      case WeightFormat::kFp8Block32:
        return dot_fp8_block32(LinearInput{x, x_scale}, static_cast<const uint8_t*>(data) + static_cast<long>(n) * cols,
                               scale_row(n), cols);
      case WeightFormat::kFp4Block32:
        return dot_fp4_block32(LinearInput{x, x_scale}, static_cast<const uint8_t*>(data) + static_cast<long>(n) * (cols / 2),
                               scale_row(n), cols);
      case WeightFormat::kGgmlBlocks:
        return dot_ggml_blocks(x, static_cast<const uint8_t*>(data) + static_cast<long>(n) * row_bytes(), cols, ggml_type);
    }
    return 0.0f;
  }

  /// Row-major fp8/fp4: the block scales of row n, one per 32 columns (fp8 shares them across a
  /// 32-row block, fp4 has its own row).
  DS41_HD const float* scale_row(int n) const {
    const long kblocks = (cols + 31) / 32;
    return scales + (format == WeightFormat::kFp8Block32 ? static_cast<long>(n / 32) : static_cast<long>(n)) * kblocks;
  }

  /// Element (n, k) as a float.
  DS41_HD float at(int n, int k) const {
    if (layout == WeightLayout::kPanels8) {
      const float w = panel_value(row0 + n, k);
      return block_scaled() ? w * panel_scale(row0 + n, k / 32) : w;
    }
    const long i = static_cast<long>(n) * cols + k;
    switch (format) {
      case WeightFormat::kF32: return static_cast<const float*>(data)[i];
      case WeightFormat::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
      case WeightFormat::kFp8Block32:
        return e4m3_decode(static_cast<const uint8_t*>(data)[i]) * scales[static_cast<long>(n / 32) * ((cols + 31) / 32) + k / 32];
      case WeightFormat::kFp4Block32: {
        uint8_t byte = static_cast<const uint8_t*>(data)[static_cast<long>(n) * (cols / 2) + k / 2];
        return e2m1_decode((k & 1) ? (byte >> 4) : (byte & 0xF)) * scales[static_cast<long>(n) * ((cols + 31) / 32) + k / 32];
      }
      case WeightFormat::kGgmlBlocks: {  // the whole block's values, one of them kept
        float v[256];
        const int be = ggml_block_elems(ggml_type);
        dequantize_ggml_linear_blocks(ggml_type, static_cast<const uint8_t*>(data) + static_cast<long>(n) * row_bytes() +
                                                     static_cast<long>(k / be) * ggml_block_bytes(ggml_type),
                                      1, v);
        return v[k % be];
      }
    }
    return 0.0f;
  }

  /// Rows [r0, r0 + n) as a matrix of their own (fp8 needs r0 on a 32-row block boundary).
  DS41_HD MatrixView row_slice(int r0, int n) const {
    MatrixView v = *this;
    v.rows = n;
    if (layout == WeightLayout::kPanels8) {  // panels stay where they are; the view starts inside one
      v.row0 = row0 + r0;
      return v;
    }
    long kblocks = (cols + 31) / 32;
    switch (format) {
      case WeightFormat::kF32: v.data = static_cast<const float*>(data) + static_cast<long>(r0) * cols; break;
      case WeightFormat::kBF16: v.data = static_cast<const uint16_t*>(data) + static_cast<long>(r0) * cols; break;
      case WeightFormat::kFp8Block32:
        v.data = static_cast<const uint8_t*>(data) + static_cast<long>(r0) * cols;
        v.scales = scales + static_cast<long>(r0 / 32) * kblocks;
        break;
      case WeightFormat::kFp4Block32:
        v.data = static_cast<const uint8_t*>(data) + static_cast<long>(r0) * (cols / 2);
        v.scales = scales + static_cast<long>(r0) * kblocks;
        break;
      case WeightFormat::kGgmlBlocks: v.data = static_cast<const uint8_t*>(data) + static_cast<long>(r0) * row_bytes(); break;
    }
    return v;
  }

  DS41_HD bool block_scaled() const {
    return format == WeightFormat::kFp8Block32 || format == WeightFormat::kFp4Block32;
  }

  /// Panel layout: stored row p's weight k before its block scale (what the reference multiplies
  /// x[k] by).
  DS41_HD float panel_value(int p, int k) const {
    if (format == WeightFormat::kGgmlBlocks) {  // row p's block, unpacked, and its value k
      uint8_t block[256];
      float v[256];
      const int be = ggml_block_elems(ggml_type);
      ggml_panel_unpack(ggml_type, ggml_panel_block(p / kPanelRows, k / be), p % kPanelRows, block);
      dequantize_ggml_linear_blocks(ggml_type, block, 1, v);
      return v[k % be];
    }
    const int g = panel_group_k(format), i = p % kPanelRows;
    const uint8_t* group = static_cast<const uint8_t*>(data) + static_cast<long>(p / kPanelRows) * panel_bytes(format, cols) +
                           static_cast<long>(k / g) * (kPanelRows * 4);
    switch (format) {
      case WeightFormat::kF32: return reinterpret_cast<const float*>(group + 4 * i)[0];
      case WeightFormat::kBF16: return bf16_to_f32(reinterpret_cast<const uint16_t*>(group + 4 * i)[k % 2]);
      case WeightFormat::kFp8Block32: return e4m3_decode(group[panel_code_byte(i, k % 4)]);
      case WeightFormat::kFp4Block32: {
        uint8_t byte = group[fp4_panel_code_byte(i, k % 8)];
        return e2m1_decode(k % 8 >= 4 ? (byte >> 4) : (byte & 0xF));
      }
      case WeightFormat::kGgmlBlocks: break;  // above
    }
    return 0.0f;
  }
  /// Panel layout: stored row p's scale of 32-column block kbi. fp8 scales keep their row-major
  /// [ceil(N/32), kblocks] table (a panel lies inside one 32-row block); fp4 scales are stored
  /// per panel as e8m0 bytes [kblocks][8 rows], 8 bytes per block.
  DS41_HD float panel_scale(int p, int kbi) const {
    const long kblocks = (cols + 31) / 32;
    if (format == WeightFormat::kFp8Block32) return scales[static_cast<long>(p / 32) * kblocks + kbi];
    return e8m0_to_f32(host_fp4_scales_e8m0[(static_cast<long>(p / kPanelRows) * kblocks + kbi) * kPanelRows + p % kPanelRows]);
  }
  /// dot() on the panel layout: the same products and sums in the same order as dot_f32,
  /// dot_bf16, dot_fp8_block32 and dot_fp4_block32 (`in.x` alone for f32/bf16).
  /// Panel layout, kGgmlBlocks: stored panel `panel`'s block b (core/ggml_panels.hpp).
  DS41_HD const uint8_t* ggml_panel_block(long panel, long b) const {
    const long nblocks = cols / ggml_block_elems(ggml_type);
    return static_cast<const uint8_t*>(data) + (panel * nblocks + b) * ggml_panel_block_bytes(ggml_type);
  }
  DS41_HD float panel_dot(LinearInput in, int n) const {
    const int p = row0 + n;
    float acc = 0.0f;
    if (format == WeightFormat::kGgmlBlocks) {  // dot_f32's products and sums, a block at a time
      uint8_t block[256];
      float v[256];
      const int be = ggml_block_elems(ggml_type);
      for (int k0 = 0; k0 < cols; k0 += be) {
        ggml_panel_unpack(ggml_type, ggml_panel_block(p / kPanelRows, k0 / be), p % kPanelRows, block);
        dequantize_ggml_linear_blocks(ggml_type, block, 1, v);
        for (int j = 0; j < be; ++j) acc += in.x[k0 + j] * v[j];
      }
      return acc;
    }
    if (!block_scaled()) {
      for (int k = 0; k < cols; ++k) acc += in.x[k] * panel_value(p, k);
      return acc;
    }
    for (int kb = 0; kb < cols; kb += 32) {
      const int ke = kb + 32 < cols ? kb + 32 : cols;
      const float sx = in.block_scale(kb, ke);
      float part = 0.0f;
      for (int k = kb; k < ke; ++k) part += in.q(k, sx) * panel_value(p, k);
      acc = add_block(acc, part, sx, panel_scale(p, kb / 32));
    }
    return acc;
  }
};

}  // namespace ds41
#include "fp_exact_end.hpp"
