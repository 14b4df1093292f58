// ds41/backend/host/gemv_ggml.hpp — the host Linear over a GGUF file's blocks kept as stored
// (WeightFormat::kGgmlBlocks: Q8_0, the K-quants, IQ2_XXS, F16), bit-identical to MatrixView::dot,
// which is dot_f32 over the blocks' values (core/ggml_quants.hpp). Issue 39's oracle is "widen to
// f32, then the f32 Linear": the same products x[k]·v[k], added in K order into one float per
// output, so this kernel decodes the values and runs gemv.hpp's f32 arithmetic on them.
//
// Why lanes are rows (as gemv.hpp): each output is ONE chain of adds in K order; eight output rows
// side by side run eight chains with one vector add. A tile is kGroups vectors of 8 rows (32 rows:
// four independent chains for the decode GEMV). For each segment of up to kSegment columns (one
// K-quant or IQ2_XXS super-block, eight Q8_0 blocks, 256 F16 values) the tile's rows are decoded
// once into floats (the block decoders below, or core/ggml_quants.hpp's scalar ones), transposed
// to columns, and applied to up to kRowChunk input rows, so a prefill decodes each block once per
// 16 rows. Rows past the last whole 8-row vector go through MatrixView::dot.
//
// Compiled for AVX2 when the translation unit has __AVX2__; otherwise (and in nvcc's device pass,
// which never sees this) every row goes through MatrixView::dot.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include "../../core/ggml_quants.hpp"
#include "../../core/linear_math.hpp"
#include "../../core/simd_avx2.hpp"
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml {

/// Whether this kernel serves the view (row-major GGUF blocks).
inline bool usable(const MatrixView& w) {
  return w.format == WeightFormat::kGgmlBlocks && w.layout == WeightLayout::kRowMajor && ggml_linear_type(w.ggml_type);
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ), one output at a time (the oracle; every build).
inline void linear_rows_scalar(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                               OutRound round, int n_begin, int n_end) {
  for (long t = 0; t < T; ++t)
    for (int n = n_begin; n < n_end; ++n) y[t * y_stride + n] = apply_round(w.dot(x + t * x_stride, n), round);
}

#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
constexpr int kGroups = 4;      // 8-row vectors per tile
constexpr int kSegment = 256;   // columns decoded at a time
constexpr int kRowChunk = 16;   // input rows sharing one decoded segment

// ---------------------------------------------------------------- block decoders
// Each writes the values of `n` columns of one row from `src` (the row's bytes at the segment's
// first block) exactly as core/ggml_quants.hpp's scalar functions give them; the scalar function is
// the definition and tests/test_ggml_quants.cpp holds both to ggml's vectors.

/// Q8_0: q·d, one rounding (exact here: an f16 times an int8 fits a float).
inline void decode_q8_0(const uint8_t* src, int n, float* out) {
  for (int b = 0; b < n / 32; ++b) {
    const uint8_t* blk = src + 34 * b;
    const __m256 d = _mm256_set1_ps(ggml_detail::load_f16(blk));
    for (int j = 0; j < 32; j += 8) {
      const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + 2 + j)));
      _mm256_storeu_ps(out + 32 * b + j, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
    }
  }
}

/// F16: the IEEE half values (vcvtph2ps is exact, subnormals included).
inline void decode_f16(const uint8_t* src, int n, float* out) {
  int j = 0;
#if defined(__F16C__)
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(out + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * j))));
#endif
  for (; j < n; ++j) out[j] = ggml_detail::load_f16(src + 2 * j);
}

/// Q4_K: per 32-column sub-block, (d·scale)·q − dmin·min, the product and the difference each
/// rounded on their own (mul, then sub: never fused).
inline void decode_q4_k(const uint8_t* blk, float* out) {
  const float d = ggml_detail::load_f16(blk), dmin = ggml_detail::load_f16(blk + 2);
  const __m256i low4 = _mm256_set1_epi32(0xF);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    ggml_detail::k_scale_min(blk + 4, j, &sc, &m);
    const __m256 dl = _mm256_set1_ps(d * static_cast<float>(sc)), ml = _mm256_set1_ps(dmin * static_cast<float>(m));
    const uint8_t* q = blk + 16 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; l += 8) {
      const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + l)));
      const __m256 v = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(b, shift), low4));
      _mm256_storeu_ps(out + 32 * j + l, _mm256_sub_ps(_mm256_mul_ps(dl, v), ml));
    }
  }
}

/// Q6_K: (d·scale)·q with q the 6-bit code minus 32.
inline void decode_q6_k(const uint8_t* blk, float* out) {
  const float d = ggml_detail::load_f16(blk + 208);
  const __m256i low4 = _mm256_set1_epi32(0xF), two = _mm256_set1_epi32(3), off = _mm256_set1_epi32(32);
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k) {
      const uint8_t* ql = blk + 64 * h + 32 * (k % 2);
      const uint8_t* qh = blk + 128 + 32 * h;
      for (int l = 0; l < 32; l += 8) {
        const __m256i lo = _mm256_and_si256(
            _mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l))), 4 * (k / 2)), low4);
        const __m256i hi = _mm256_and_si256(
            _mm256_srli_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh + l))), 2 * k), two);
        const __m256i q = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), off);
        const __m256 dl = _mm256_set1_ps(d * static_cast<float>(static_cast<int8_t>(blk[192 + 8 * h + 2 * k + l / 16])));
        _mm256_storeu_ps(out + 128 * h + 32 * k + l, _mm256_mul_ps(dl, _mm256_cvtepi32_ps(q)));
      }
    }
}

/// Values of columns [0, n) of one row's segment (n: a whole number of blocks, or F16's tail).
inline void decode_segment(GgmlType t, const uint8_t* src, int n, float* out) {
  switch (t) {
    case GgmlType::kQ8_0: return decode_q8_0(src, n, out);
    case GgmlType::kF16: return decode_f16(src, n, out);
    case GgmlType::kQ4_K: return decode_q4_k(src, out);
    case GgmlType::kQ6_K: return decode_q6_k(src, out);
    default: return dequantize_ggml_linear_blocks(t, src, n / ggml_block_elems(t), out);  // F16 handled above
  }
}

/// Rows [n_begin, n_end) of y for kGgmlBlocks weights (usable(w)).
inline void linear_rows(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                        OutRound round, int n_begin, int n_end) {
  const int K = w.cols;
  const long row_bytes = w.row_bytes();
  const int be = ggml_block_elems(w.ggml_type), bb = ggml_block_bytes(w.ggml_type);
  const auto* data = static_cast<const uint8_t*>(w.data);
  alignas(32) float rowbuf[8][kSegment];
  alignas(32) float cols[kGroups][kSegment][8];
  alignas(32) float acc[kRowChunk][kGroups][8];
  int n0 = n_begin;
  while (n_end - n0 >= 8) {
    const int G = std::min(kGroups, (n_end - n0) / 8);
    for (long t0 = 0; t0 < T; t0 += kRowChunk) {
      const int tc = static_cast<int>(std::min<long>(kRowChunk, T - t0));
      std::memset(acc, 0, sizeof(acc));
      for (int k0 = 0; k0 < K; k0 += kSegment) {
        const int n = std::min(kSegment, K - k0);
        const long byte0 = static_cast<long>(k0 / be) * bb;
        for (int g = 0; g < G; ++g) {
          for (int i = 0; i < 8; ++i)
            decode_segment(w.ggml_type, data + static_cast<long>(n0 + 8 * g + i) * row_bytes + byte0, n, rowbuf[i]);
          int j = 0;
          for (; j + 8 <= n; j += 8) {
            __m256 c[8];
            for (int i = 0; i < 8; ++i) c[i] = _mm256_load_ps(rowbuf[i] + j);
            avx2::transpose8(c);
            for (int i = 0; i < 8; ++i) _mm256_store_ps(cols[g][j + i], c[i]);
          }
          for (; j < n; ++j)
            for (int i = 0; i < 8; ++i) cols[g][j][i] = rowbuf[i][j];
        }
        for (int t = 0; t < tc; ++t) {
          const float* xr = x + (t0 + t) * x_stride + k0;
          if (G == kGroups) {  // four chains side by side
            __m256 a0 = _mm256_load_ps(acc[t][0]), a1 = _mm256_load_ps(acc[t][1]);
            __m256 a2 = _mm256_load_ps(acc[t][2]), a3 = _mm256_load_ps(acc[t][3]);
            for (int j = 0; j < n; ++j) {
              const __m256 xv = _mm256_set1_ps(xr[j]);
              a0 = _mm256_add_ps(a0, _mm256_mul_ps(xv, _mm256_load_ps(cols[0][j])));
              a1 = _mm256_add_ps(a1, _mm256_mul_ps(xv, _mm256_load_ps(cols[1][j])));
              a2 = _mm256_add_ps(a2, _mm256_mul_ps(xv, _mm256_load_ps(cols[2][j])));
              a3 = _mm256_add_ps(a3, _mm256_mul_ps(xv, _mm256_load_ps(cols[3][j])));
            }
            _mm256_store_ps(acc[t][0], a0), _mm256_store_ps(acc[t][1], a1);
            _mm256_store_ps(acc[t][2], a2), _mm256_store_ps(acc[t][3], a3);
          } else {
            for (int g = 0; g < G; ++g) {
              __m256 a = _mm256_load_ps(acc[t][g]);
              for (int j = 0; j < n; ++j) a = _mm256_add_ps(a, _mm256_mul_ps(_mm256_set1_ps(xr[j]), _mm256_load_ps(cols[g][j])));
              _mm256_store_ps(acc[t][g], a);
            }
          }
        }
      }
      for (int t = 0; t < tc; ++t)
        for (int g = 0; g < G; ++g)
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
                        OutRound round, int n_begin, int n_end) {
  linear_rows_scalar(x, T, x_stride, w, y, y_stride, round, n_begin, n_end);
}
#endif

}  // namespace ds41::host_ggml
#include "../../core/fp_exact_end.hpp"
