// ds41/core/weight_format.hpp — what a weight format is, as data: one FormatTraits entry per
// WeightFormat (its bytes, the value of an element, the reference's dot of a row) and one
// dispatch_format from the runtime value to that entry.
//
// Code that is the same for every format asks the traits (MatrixView, HostTensor::to_f32, the
// writers); a kernel that serves some formats says which by specialising on the format it gets
// from dispatch_format (`if constexpr`, or a class template per format), so adding a format is one
// entry here plus the kernels that want it. Formats no kernel serves take MatrixView::dot, which is
// this file's `dot`: the reference's arithmetic, the definition every kernel's bits are held to.
//
// The dot products take the products in K order into one float32 accumulator: the reference's
// bf16 Linear accumulates in float32 and rounds once. fp8 and fp4 weights follow the reference's
// linear() (model.py): the input row is first quantised to e4m3 per 32 values with a power-of-two
// scale (act_quant, block 32, ue8m0), and the block-scaled GEMM (kernel fp8_gemm / fp4_gemm) sums
// each 32-column block's products q·w (all exact: e4m3 x e4m3 and e4m3 x e2m1 fit a float) in K
// order into a float32 partial, then acc = acc + (partial·s_x)·s_w. See docs/NUMERICS.md, "Linear
// layers with fp8 or fp4 weights". GGUF blocks kept as stored (issue 39) are the f32 Linear on
// their values (docs/NUMERICS.md, "GGUF blocks").
#pragma once
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include "ggml_quants.hpp"
#include "macros.hpp"
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

/// The input row of a Linear: raw x (`scale == nullptr`: for block-scaled formats quantised on the
/// fly here, the oracle form) or act_quant's q and scales (what the fast paths prepare once per row).
struct LinearInput {
  const float* x = nullptr;
  const float* scale = nullptr;
  DS41_HD float block_scale(int kb, int ke) const { return scale ? scale[kb / 32] : act_quant_scale(x + kb, ke - kb); }
  DS41_HD float q(int k, float s) const { return scale ? x[k] : act_quant_value(x[k], s); }
};

// ------------------------------------------------------------------- the reference's dot products
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

/// A row of GGUF blocks: dot_f32 over the values, block by block (the same products and sums in
/// the same order as dot_f32 on the widened row).
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

// ------------------------------------------------------------------------------- the traits
// Every entry has:
//   kName          what errors and logs call it
//   kBlockScaled   one float scale per 32 columns multiplies each 32-column partial (the input is
//                  act_quant'ed first); kScaleRows rows share a row of those scales
//   kPanelGroupK   host 8-row panels (WeightLayout::kPanels8): K positions per 32-byte group (0:
//                  the format has its own panels or none)
//   row_bytes(cols, t)          bytes of one row-major row of `cols` elements
//   value(row, k, t)            element k of a row-major row, before its block scale
//   dot(in, row, scales, K, t)  the reference's output for one row (`scales`: its block scales)
//   values(row, scales, K, t, out)  the row's K values, each times its block scale
//   panel_value(group, i, k)    host panels (kPanelGroupK > 0): row i's element k of its group
// `t` is the ggml type of kGgmlBlocks (ignored by the others).
template <WeightFormat F>
struct FormatTraits;

/// values() element by element, for an entry Tr with no faster way: value(row, k) times the block
/// scale of k where the format has them.
template <class Tr>
struct ValuesByElement {
  DS41_HD static void values(const void* row, const float* scales, int K, GgmlType t, float* out) {
    for (int k = 0; k < K; ++k) {
      const float w = Tr::value(row, k, t);
      out[k] = Tr::kBlockScaled ? w * scales[k / 32] : w;
    }
  }
};

template <>
struct FormatTraits<WeightFormat::kF32> : ValuesByElement<FormatTraits<WeightFormat::kF32>> {
  static constexpr const char* kName = "f32";
  static constexpr bool kBlockScaled = false;
  static constexpr int kScaleRows = 0;
  static constexpr int kPanelGroupK = 1;
  DS41_HD static long row_bytes(int cols, GgmlType) { return 4L * cols; }
  DS41_HD static float value(const void* row, int k, GgmlType) { return static_cast<const float*>(row)[k]; }
  DS41_HD static float dot(LinearInput in, const void* row, const float*, int K, GgmlType) {
    return dot_f32(in.x, static_cast<const float*>(row), K);
  }
  DS41_HD static float panel_value(const uint8_t* group, int i, int) { return reinterpret_cast<const float*>(group + 4 * i)[0]; }
};

template <>
struct FormatTraits<WeightFormat::kBF16> : ValuesByElement<FormatTraits<WeightFormat::kBF16>> {
  static constexpr const char* kName = "bf16";
  static constexpr bool kBlockScaled = false;
  static constexpr int kScaleRows = 0;
  static constexpr int kPanelGroupK = 2;
  DS41_HD static long row_bytes(int cols, GgmlType) { return 2L * cols; }
  DS41_HD static float value(const void* row, int k, GgmlType) { return bf16_to_f32(static_cast<const uint16_t*>(row)[k]); }
  DS41_HD static float dot(LinearInput in, const void* row, const float*, int K, GgmlType) {
    return dot_bf16(in.x, static_cast<const uint16_t*>(row), K);
  }
  DS41_HD static float panel_value(const uint8_t* group, int i, int k) {
    return bf16_to_f32(reinterpret_cast<const uint16_t*>(group + 4 * i)[k % 2]);
  }
};

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

template <>
struct FormatTraits<WeightFormat::kFp8Block32> : ValuesByElement<FormatTraits<WeightFormat::kFp8Block32>> {
  static constexpr const char* kName = "fp8-block32";
  static constexpr bool kBlockScaled = true;
  static constexpr int kScaleRows = 32;
  static constexpr int kPanelGroupK = 4;
  DS41_HD static long row_bytes(int cols, GgmlType) { return cols; }
  DS41_HD static float value(const void* row, int k, GgmlType) { return e4m3_decode(static_cast<const uint8_t*>(row)[k]); }
  DS41_HD static float dot(LinearInput in, const void* row, const float* scales, int K, GgmlType) {
    return dot_fp8_block32(in, static_cast<const uint8_t*>(row), scales, K);
  }
  DS41_HD static float panel_value(const uint8_t* group, int i, int k) { return e4m3_decode(group[panel_code_byte(i, k % 4)]); }
};

template <>
struct FormatTraits<WeightFormat::kFp4Block32> : ValuesByElement<FormatTraits<WeightFormat::kFp4Block32>> {
  static constexpr const char* kName = "fp4-block32";
  static constexpr bool kBlockScaled = true;
  static constexpr int kScaleRows = 1;
  static constexpr int kPanelGroupK = 8;
  DS41_HD static long row_bytes(int cols, GgmlType) { return cols / 2; }
  DS41_HD static float value(const void* row, int k, GgmlType) {
    const uint8_t byte = static_cast<const uint8_t*>(row)[k / 2];
    return e2m1_decode((k & 1) ? (byte >> 4) : (byte & 0xF));
  }
  DS41_HD static float dot(LinearInput in, const void* row, const float* scales, int K, GgmlType) {
    return dot_fp4_block32(in, static_cast<const uint8_t*>(row), scales, K);
  }
  DS41_HD static float panel_value(const uint8_t* group, int i, int k) {
    const uint8_t byte = group[fp4_panel_code_byte(i, k % 8)];
    return e2m1_decode(k % 8 >= 4 ? (byte >> 4) : (byte & 0xF));
  }
};

template <>
struct FormatTraits<WeightFormat::kGgmlBlocks> {
  static constexpr const char* kName = "ggml-blocks";
  static constexpr bool kBlockScaled = false;  // the scales are inside the blocks
  static constexpr int kScaleRows = 0;
  static constexpr int kPanelGroupK = 0;  // its own panels: core/ggml_panels.hpp
  DS41_HD static long row_bytes(int cols, GgmlType t) { return ggml_row_bytes(t, cols); }
  DS41_HD static float value(const void* row, int k, GgmlType t) {  // the whole block's values, one of them kept
    float v[256];
    const int be = ggml_block_elems(t);
    dequantize_ggml_linear_blocks(t, static_cast<const uint8_t*>(row) + static_cast<long>(k / be) * ggml_block_bytes(t), 1, v);
    return v[k % be];
  }
  DS41_HD static float dot(LinearInput in, const void* row, const float*, int K, GgmlType t) {
    return dot_ggml_blocks(in.x, static_cast<const uint8_t*>(row), K, t);
  }
  DS41_HD static void values(const void* row, const float*, int K, GgmlType t, float* out) {  // a block at a time
    dequantize_ggml_linear_blocks(t, static_cast<const uint8_t*>(row), K / ggml_block_elems(t), out);
  }
};

/// The traits of the format a dispatch_format tag names.
template <WeightFormat F>
using FormatTag = std::integral_constant<WeightFormat, F>;
template <class Tag>
using TraitsOf = FormatTraits<Tag::value>;

/// fn(FormatTag<f>{}): the one switch from a runtime WeightFormat to compile-time code (every
/// branch's result converts to the first's). A WeightFormat only ever holds an enumerator.
#if defined(__CUDACC__)
#pragma nv_exec_check_disable
#endif
template <class Fn>
DS41_HD decltype(auto) dispatch_format(WeightFormat f, Fn&& fn) {
  switch (f) {
    case WeightFormat::kF32: return fn(FormatTag<WeightFormat::kF32>{});
    case WeightFormat::kBF16: return fn(FormatTag<WeightFormat::kBF16>{});
    case WeightFormat::kFp8Block32: return fn(FormatTag<WeightFormat::kFp8Block32>{});
    case WeightFormat::kFp4Block32: return fn(FormatTag<WeightFormat::kFp4Block32>{});
    case WeightFormat::kGgmlBlocks: return fn(FormatTag<WeightFormat::kGgmlBlocks>{});
  }
#if defined(__CUDA_ARCH__)
  __trap();
#else
  std::abort();
#endif
  __builtin_unreachable();
}

/// How a kernel says which formats it serves: it lists its per-format decoders, each naming its
/// format as `kFormat`, and takes the one for F (void: F is not served there).
template <WeightFormat F, class... Decoders>
struct DecoderFor {
  using type = void;
};
template <WeightFormat F, class D, class... Rest>
struct DecoderFor<F, D, Rest...> {
  using type = std::conditional_t<D::kFormat == F, D, typename DecoderFor<F, Rest...>::type>;
};
template <WeightFormat F, class... Decoders>
using decoder_for_t = typename DecoderFor<F, Decoders...>::type;

inline const char* format_name(WeightFormat f) {
  return dispatch_format(f, [](auto tag) { return TraitsOf<decltype(tag)>::kName; });
}
DS41_HD bool format_block_scaled(WeightFormat f) {
  return dispatch_format(f, [](auto tag) { return TraitsOf<decltype(tag)>::kBlockScaled; });
}
/// Bytes of one row of a row-major matrix (kGgmlBlocks: of ggml type t).
DS41_HD long row_major_row_bytes(WeightFormat f, int cols, GgmlType t = GgmlType::kF32) {
  return dispatch_format(f, [&](auto tag) { return TraitsOf<decltype(tag)>::row_bytes(cols, t); });
}

}  // namespace ds41
#include "fp_exact_end.hpp"
