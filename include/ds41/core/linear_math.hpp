// ds41/core/linear_math.hpp — one output element of y = x · Wᵀ for a weight matrix in any format
// and layout: MatrixView, the view every backend's Linear takes.
//
// The arithmetic of each format is its FormatTraits entry (core/weight_format.hpp): MatrixView
// dispatches to it once per call. Backends call these per output element (the host in loops,
// CUDA per thread), so the arithmetic is the same on both.
#pragma once
#include <cstdint>
#include "ggml_panels.hpp"
#include "ggml_quants.hpp"
#include "numeric.hpp"
#include "quant.hpp"
#include "weight_format.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

/// Output rounding of a Linear: the reference's bf16 Linear rounds each output once to bf16; its
/// f32 Linears (router, head, hc mixes, ratio>1 compressor) keep float32.
enum class OutRound : int { kF32 = 0, kBF16 = 1 };

DS41_HD float apply_round(float v, OutRound r) { return r == OutRound::kBF16 ? bf16_round(v) : v; }

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
  return dispatch_format(f, [](auto tag) { return TraitsOf<decltype(tag)>::kPanelGroupK; });
}
/// Bytes of one panel: ceil(cols / group) groups of 8 rows x 4 bytes (the K tail padded with zeros).
DS41_HD long panel_bytes(WeightFormat f, int cols) {
  const int g = panel_group_k(f);
  return static_cast<long>((cols + g - 1) / g) * (kPanelRows * 4);
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
  DS41_HD long row_bytes() const { return row_major_row_bytes(format, cols, ggml_type); }
  /// Row-major: row n's bytes.
  DS41_HD const uint8_t* row_data(int n) const { return static_cast<const uint8_t*>(data) + static_cast<long>(n) * row_bytes(); }

  /// Output n of the Linear for the input row x: the reference's arithmetic (for fp8/fp4 with the
  /// input's act_quant). `x_scale`: null when x is the raw row; act_quant_row's scales when x holds
  /// its q values (fp8/fp4 only).
  DS41_HD float dot(const float* x, int n, const float* x_scale = nullptr) const {
    if (layout == WeightLayout::kPanels8) return panel_dot(LinearInput{x, x_scale}, n);
    return dispatch_format(format, [&](auto tag) {
      using Tr = TraitsOf<decltype(tag)>;
      return Tr::dot(LinearInput{x, x_scale}, row_data(n), Tr::kBlockScaled ? scale_row(n) : nullptr, cols, ggml_type);
    });
  }

  /// Row-major fp8/fp4: the block scales of row n, one per 32 columns (fp8 shares them across a
  /// 32-row block, fp4 has its own row).
  DS41_HD const float* scale_row(int n) const {
    const int scale_rows = dispatch_format(format, [](auto tag) { return TraitsOf<decltype(tag)>::kScaleRows; });
    if (scale_rows == 0) return scales;  // no block scales
    return scales + static_cast<long>(n / scale_rows) * ((cols + 31) / 32);
  }

  /// Row-major: element (n, k) before its block scale (what the reference multiplies x[k] by).
  DS41_HD float stored_value(int n, int k) const {
    return dispatch_format(format, [&](auto tag) { return TraitsOf<decltype(tag)>::value(row_data(n), k, ggml_type); });
  }

  /// Element (n, k) as a float.
  DS41_HD float at(int n, int k) const {
    if (layout == WeightLayout::kPanels8) {
      const float w = panel_value(row0 + n, k);
      return block_scaled() ? w * panel_scale(row0 + n, k / 32) : w;
    }
    const float w = stored_value(n, k);
    return block_scaled() ? w * scale_row(n)[k / 32] : w;
  }

  /// Rows [r0, r0 + n) as a matrix of their own (fp8 needs r0 on a 32-row block boundary).
  DS41_HD MatrixView row_slice(int r0, int n) const {
    MatrixView v = *this;
    v.rows = n;
    if (layout == WeightLayout::kPanels8) {  // panels stay where they are; the view starts inside one
      v.row0 = row0 + r0;
      return v;
    }
    v.data = row_data(r0);
    if (block_scaled()) v.scales = scale_row(r0);
    return v;
  }

  DS41_HD bool block_scaled() const { return format_block_scaled(format); }

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
    return dispatch_format(format, [&](auto tag) {
      using Tr = TraitsOf<decltype(tag)>;
      if constexpr (Tr::kPanelGroupK == 0) {
        return 0.0f;  // no 8-row panels of this kind (GGUF blocks: above)
      } else {
        const uint8_t* group = static_cast<const uint8_t*>(data) + static_cast<long>(p / kPanelRows) * panel_bytes(format, cols) +
                               static_cast<long>(k / Tr::kPanelGroupK) * (kPanelRows * 4);
        return Tr::panel_value(group, p % kPanelRows, k);
      }
    });
  }
  /// Panel layout: stored row p's scale of 32-column block kbi. fp8 scales keep their row-major
  /// [ceil(N/32), kblocks] table (a panel lies inside one 32-row block); fp4 scales are stored
  /// per panel as e8m0 bytes [kblocks][8 rows], 8 bytes per block.
  DS41_HD float panel_scale(int p, int kbi) const {
    const long kblocks = (cols + 31) / 32;
    if (format == WeightFormat::kFp8Block32) return scales[static_cast<long>(p / 32) * kblocks + kbi];
    return e8m0_to_f32(host_fp4_scales_e8m0[(static_cast<long>(p / kPanelRows) * kblocks + kbi) * kPanelRows + p % kPanelRows]);
  }
  /// Panel layout, kGgmlBlocks: stored panel `panel`'s block b (core/ggml_panels.hpp).
  DS41_HD const uint8_t* ggml_panel_block(long panel, long b) const {
    const long nblocks = cols / ggml_block_elems(ggml_type);
    return static_cast<const uint8_t*>(data) + (panel * nblocks + b) * ggml_panel_block_bytes(ggml_type);
  }
  /// dot() on the panel layout: the same products and sums in the same order as the format's
  /// FormatTraits::dot (`in.x` alone for the formats without block scales).
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
