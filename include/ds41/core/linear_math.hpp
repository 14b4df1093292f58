// ds41/core/linear_math.hpp — one output element of y = x · Wᵀ for each weight format.
//
// The reference's bf16 Linear accumulates in float32 and rounds once; these dot products take the
// products in K order into one float32 accumulator. Backends call these per output element (the
// host in loops, CUDA per thread), so the arithmetic is the same on both.
#pragma once
#include <cstdint>
#include "numeric.hpp"

namespace ds41 {

enum class WeightFormat : int {
  kF32 = 0,         // float32 values
  kBF16 = 1,        // bfloat16 bit patterns
  kFp8Block32 = 2,  // e4m3 codes, one float scale per 32x32 block (row-block major)
  kFp4Block32 = 3,  // e2m1 codes two per byte (low nibble first), one float scale per 32 along K
};

inline const char* format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kFp8Block32: return "fp8-block32";
    case WeightFormat::kFp4Block32: return "fp4-block32";
  }
  return "?";
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

/// Row n of an fp8 32x32-block matrix: codes [N, K], scales [ceil(N/32), ceil(K/32)].
DS41_HD float dot_fp8_block32(const float* x, const uint8_t* codes_row, const float* scale_row, int K) {
  float acc = 0.0f;
  for (int kb = 0; kb < K; kb += 32) {
    float part = 0.0f;
    int ke = kb + 32 < K ? kb + 32 : K;
    for (int k = kb; k < ke; ++k) part += x[k] * e4m3_decode(codes_row[k]);
    acc += part * scale_row[kb / 32];
  }
  return acc;
}

/// Row n of an fp4 matrix: packed codes [N, K/2], scales [N, K/32].
DS41_HD float dot_fp4_block32(const float* x, const uint8_t* packed_row, const float* scale_row, int K) {
  float acc = 0.0f;
  for (int kb = 0; kb < K; kb += 32) {
    float part = 0.0f;
    int ke = kb + 32 < K ? kb + 32 : K;
    for (int k = kb; k < ke; ++k) {
      uint8_t byte = packed_row[k / 2];
      part += x[k] * e2m1_decode((k & 1) ? (byte >> 4) : (byte & 0xF));
    }
    acc += part * scale_row[kb / 32];
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

/// Non-owning view of a weight matrix [rows=N out, cols=K in] in any format.
struct MatrixView {
  WeightFormat format = WeightFormat::kBF16;
  int rows = 0, cols = 0;
  const void* data = nullptr;     // format-specific payload
  const float* scales = nullptr;  // fp8/fp4 block scales

  DS41_HD float dot(const float* x, int n) const {
    switch (format) {
      case WeightFormat::kF32: return dot_f32(x, static_cast<const float*>(data) + static_cast<long>(n) * cols, cols);
      case WeightFormat::kBF16:
        return dot_bf16(x, static_cast<const uint16_t*>(data) + static_cast<long>(n) * cols, cols);
      case WeightFormat::kFp8Block32: {
        int kblocks = (cols + 31) / 32;
        return dot_fp8_block32(x, static_cast<const uint8_t*>(data) + static_cast<long>(n) * cols,
                               scales + static_cast<long>(n / 32) * kblocks, cols);
      }
      case WeightFormat::kFp4Block32:
        return dot_fp4_block32(x, static_cast<const uint8_t*>(data) + static_cast<long>(n) * (cols / 2),
                               scales + static_cast<long>(n) * ((cols + 31) / 32), cols);
    }
    return 0.0f;
  }

  /// Element (n, k) as a float.
  DS41_HD float at(int n, int k) const {
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
    }
    return 0.0f;
  }

  /// Rows [r0, r0 + n) as a matrix of their own (fp8 needs r0 on a 32-row block boundary).
  DS41_HD MatrixView row_slice(int r0, int n) const {
    MatrixView v = *this;
    v.rows = n;
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
    }
    return v;
  }
};

}  // namespace ds41
