// ds41/backend/host/gemv.hpp — the host backend's weight-streaming Linear, vectorised across
// output rows and split across threads, with results bit-identical to MatrixView::dot.
//
// Why across rows: the reference adds each output's products into ONE float32 accumulator in K
// order (for fp8/fp4: per-32 partial sums, each scaled and added in order). Vectorising along K
// would need several partial sums and change the rounding. Eight output rows side by side, each
// lane running its own row's chain in K order, do the identical operations: the j-th column of an
// 8-row tile is decoded into one vector and `acc = acc + x[k] * col` is one _mm256_mul_ps and one
// _mm256_add_ps, each rounded on its own (never FMA: the library compiles with -ffp-contract=off,
// which also stops the compiler from fusing these intrinsics).
//
// Layout of the work: a tile is kTileVecs vectors of 8 rows (32 rows: 4 independent add chains
// hide the add latency, and one fp8 scale block). For each 32-column block the tile's weights are
// decoded once into a transposed buffer and applied to up to kRowChunk input rows, so prefill GEMMs
// reuse each decoded block. Rows beyond the last full 8-row vector, and the K tail past the last
// full 32-column block, go through scalar-built columns (same arithmetic); fp8 blocks holding a
// NaN code go through the scalar decoder so NaNs stay NaN.
//
// These kernels serve row-major views (HostTensor::view(), fp8 matrices holding NaN codes); the
// host backend stores its Linear weights as panels, served by host/gemv_panels.hpp.
//
// Compiled for AVX2 when the translation unit has __AVX2__ (e.g. -march=native, see DS41_NATIVE;
// never in nvcc's device pass), else the scalar reference loops. Threads split output-row tiles, never a row's sum.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>
#include "../../core/linear_math.hpp"
#include "../../core/simd_avx2.hpp"
#include "buffer.hpp"
#include "gemv_fp4int.hpp"
#include "gemv_fp4int512.hpp"
#include "gemm_bf16dot512.hpp"
#include "gemm_fp4int512.hpp"
#include "gemm_fp8dot512.hpp"
#include "gemm_panels512.hpp"
#include "gemv_fp8dot512.hpp"
#include "gemv_ggml.hpp"
#include "gemv_panels.hpp"
#include "gemv_panels512.hpp"
#include "gemv_scaled.hpp"
#include "gemv_scaled512.hpp"
#include "threads.hpp"
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv {

/// W[n, k] as the float the reference multiplies x[k] by (before any block scale).
inline float weight_at(const MatrixView& w, int n, int k) {
  const long row = static_cast<long>(n);
  switch (w.format) {
    case WeightFormat::kF32: return static_cast<const float*>(w.data)[row * w.cols + k];
    case WeightFormat::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[row * w.cols + k]);
    case WeightFormat::kFp8Block32: return e4m3_decode(static_cast<const uint8_t*>(w.data)[row * w.cols + k]);
    case WeightFormat::kFp4Block32: {
      uint8_t byte = static_cast<const uint8_t*>(w.data)[row * (w.cols / 2) + k / 2];
      return e2m1_decode((k & 1) ? (byte >> 4) : (byte & 0xF));
    }
    case WeightFormat::kGgmlBlocks: return w.at(n, k);  // not reached: host/gemv_ggml.hpp serves them
  }
  return 0.0f;
}

/// The scale the reference multiplies row n's partial sum of block kb/32 by (fp8/fp4 only).
inline float block_scale_at(const MatrixView& w, int n, int kb) { return w.scale_row(n)[kb / 32]; }

inline bool block_scaled(WeightFormat f) { return f == WeightFormat::kFp8Block32 || f == WeightFormat::kFp4Block32; }

#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
inline constexpr bool kVectorised = true;
namespace avx2 {
using ds41::avx2::e4m3_decode8;
using ds41::avx2::transpose8;

constexpr int kBlockK = 32;    // one fp8/fp4 scale block along K
constexpr int kTileVecs = 4;   // 8-row vectors per tile
constexpr int kRowChunk = 16;  // input rows sharing one decoded block

// Column decoders: c[j] = column k + j of rows [n0, n0 + 8) (lane i = row n0 + i), exactly the
// floats weight_at() gives.
struct F32Columns {
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const float* p = static_cast<const float*>(w.data) + static_cast<long>(n0) * w.cols + k;
    for (int i = 0; i < 8; ++i) c[i] = _mm256_loadu_ps(p + static_cast<long>(i) * w.cols);
    transpose8(c);
  }
};

struct Bf16Columns {  // bf16 -> f32 is the 16 bits moved to the top half
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const uint16_t* p = static_cast<const uint16_t*>(w.data) + static_cast<long>(n0) * w.cols + k;
    for (int i = 0; i < 8; ++i) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + static_cast<long>(i) * w.cols));
      c[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    transpose8(c);
  }
};

// e4m3 -> f32 by core/simd_avx2.hpp's e4m3_decode8, which never makes an f32 subnormal (a multiply
// with a subnormal operand costs ~50% here). Blocks holding a NaN code still take the scalar path.
struct Fp8Columns {
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + static_cast<long>(n0) * w.cols + k;
    for (int i = 0; i < 8; ++i)
      c[i] = e4m3_decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + static_cast<long>(i) * w.cols))));
    transpose8(c);
  }
  /// Whether the 32-column block at kb of rows [n0, n0 + rows) holds a NaN code.
  static bool block_has_nan(const MatrixView& w, int n0, int rows, int kb) {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + static_cast<long>(n0) * w.cols + kb;
    const __m256i mag = _mm256_set1_epi8(0x7F);
    __m256i any = _mm256_setzero_si256();
    for (int i = 0; i < rows; ++i) {
      __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + static_cast<long>(i) * w.cols));
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(_mm256_and_si256(b, mag), mag));
    }
    return !_mm256_testz_si256(any, any);
  }
};

/// The 8 nibbles (columns k..k+7) of each of rows [n0, n0 + 8) as one 32-bit lane per row.
inline __m256i fp4_nibble_lanes(const MatrixView& w, int n0, int k) {
  const uint8_t* p = static_cast<const uint8_t*>(w.data) + static_cast<long>(n0) * (w.cols / 2) + k / 2;
  const long stride = w.cols / 2;
  int32_t u[8];
  for (int i = 0; i < 8; ++i) std::memcpy(&u[i], p + i * stride, 4);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u));
}

// e2m1 -> f32: the magnitude from an 8-entry table (vpermps reads the low 3 bits of each lane),
// the sign bit (nibble bit 3) moved to bit 31.
struct Fp4Columns {
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const __m256i lanes = fp4_nibble_lanes(w, n0, k);
    const __m256 magnitude = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      __m256 m = _mm256_permutevar8x32_ps(magnitude, _mm256_srli_epi32(lanes, 4 * j));
      __m256i s = _mm256_and_si256(_mm256_slli_epi32(lanes, 28 - 4 * j), sign);
      c[j] = _mm256_or_ps(m, _mm256_castsi256_ps(s));
    }
  }
};

/// wt[k][v] = column kb + k of rows [n0 + 8v, n0 + 8v + 8), for a full 32-column block.
template <class Columns, int NV>
inline void decode_block(const MatrixView& w, int n0, int kb, __m256 (*wt)[NV]) {
  __m256 c[8];
  for (int v = 0; v < NV; ++v)
    for (int k8 = 0; k8 < kBlockK; k8 += 8) {
      Columns::load8(w, n0 + 8 * v, kb + k8, c);
      for (int j = 0; j < 8; ++j) wt[k8 + j][v] = c[j];
    }
}

/// The same from scalar reads, for the K tail and fp8 blocks with NaN codes.
template <int NV>
inline void decode_block_scalar(const MatrixView& w, int n0, int kb, int kn, __m256 (*wt)[NV]) {
  alignas(32) float col[8];
  for (int k = 0; k < kn; ++k)
    for (int v = 0; v < NV; ++v) {
      for (int i = 0; i < 8; ++i) col[i] = weight_at(w, n0 + 8 * v + i, kb + k);
      wt[k][v] = _mm256_load_ps(col);
    }
}

inline __m256 block_scales8(const MatrixView& w, int n0, int kb) {
  if (w.format == WeightFormat::kFp8Block32) return _mm256_set1_ps(block_scale_at(w, n0, kb));
  alignas(32) float s[8];
  for (int i = 0; i < 8; ++i) s[i] = block_scale_at(w, n0 + i, kb);
  return _mm256_load_ps(s);
}

inline void store_rounded(__m256 acc, float* y, OutRound round) {
  alignas(32) float a[8];
  _mm256_store_ps(a, acc);
  for (int i = 0; i < 8; ++i) y[i] = apply_round(a[i], round);
}

/// Rows [n0, n0 + 8·NV) for T input rows: decode each 32-column block once per kRowChunk rows.
template <class Columns, int NV, bool kScaled>
void linear_tile(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, int n0, float* y,
                 long y_stride, OutRound round) {
  const int K = w.cols;
  const long kblocks = (K + kBlockK - 1) / kBlockK;
  alignas(32) __m256 wt[kBlockK][NV];
  for (long r0 = 0; r0 < T; r0 += kRowChunk) {
    const int tc = static_cast<int>(std::min<long>(kRowChunk, T - r0));
    __m256 acc[kRowChunk][NV];
    for (int r = 0; r < tc; ++r)
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
    for (int kb = 0; kb < K; kb += kBlockK) {
      const int kn = std::min(kBlockK, K - kb);
      bool full = kn == kBlockK;
      if constexpr (std::is_same_v<Columns, Fp8Columns>) full = full && !Fp8Columns::block_has_nan(w, n0, 8 * NV, kb);
      if (full) decode_block<Columns, NV>(w, n0, kb, wt);
      else decode_block_scalar<NV>(w, n0, kb, kn, wt);
      __m256 scale[NV];
      if constexpr (kScaled)
        for (int v = 0; v < NV; ++v) scale[v] = block_scales8(w, n0 + 8 * v, kb);
      for (int r = 0; r < tc; ++r) {
        const float* xr = x + (r0 + r) * x_stride + kb;
        __m256 a[NV];
        for (int v = 0; v < NV; ++v) a[v] = kScaled ? _mm256_setzero_ps() : acc[r][v];
        for (int k = 0; k < kn; ++k) {
          const __m256 xk = _mm256_broadcast_ss(xr + k);
          for (int v = 0; v < NV; ++v) a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(xk, wt[k][v]));
        }
        if constexpr (kScaled) {
          const __m256 sx = _mm256_broadcast_ss(xs + (r0 + r) * kblocks + kb / kBlockK);
          for (int v = 0; v < NV; ++v) acc[r][v] = panels::add_block(acc[r][v], a[v], sx, scale[v]);
        } else {
          for (int v = 0; v < NV; ++v) acc[r][v] = a[v];
        }
      }
    }
    for (int r = 0; r < tc; ++r)
      for (int v = 0; v < NV; ++v) store_rounded(acc[r][v], y + (r0 + r) * y_stride + n0 + 8 * v, round);
  }
}

/// Decode GEMV (one input row), bf16/f32/fp8: each 8x8 sub-block is decoded and transposed in
/// registers and consumed at once (no transposed buffer: with one input row nothing reuses it).
template <class Columns, int NV, bool kScaled>
void gemv_tile(const float* x, const float* xs, const MatrixView& w, int n0, float* y, OutRound round) {
  const int K = w.cols;
  __m256 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  int kb = 0;
  for (; kb + kBlockK <= K; kb += kBlockK) {
    if constexpr (std::is_same_v<Columns, Fp8Columns>)
      if (Fp8Columns::block_has_nan(w, n0, 8 * NV, kb)) break;  // the rest by linear_tile's scalar decode
    __m256 part[NV];
    for (int v = 0; v < NV; ++v) part[v] = kScaled ? _mm256_setzero_ps() : acc[v];
    for (int k8 = kb; k8 < kb + kBlockK; k8 += 8)
      for (int v = 0; v < NV; ++v) {
        __m256 c[8];
        Columns::load8(w, n0 + 8 * v, k8, c);
        for (int j = 0; j < 8; ++j) part[v] = _mm256_add_ps(part[v], _mm256_mul_ps(_mm256_broadcast_ss(x + k8 + j), c[j]));
      }
    for (int v = 0; v < NV; ++v)
      acc[v] = kScaled ? panels::add_block(acc[v], part[v], _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb))
                       : part[v];
  }
  if (kb < K) {  // K tail (or an fp8 block with a NaN code onwards): scalar-built columns
    alignas(32) __m256 wt[kBlockK][NV];
    for (; kb < K; kb += kBlockK) {
      const int kn = std::min(kBlockK, K - kb);
      decode_block_scalar<NV>(w, n0, kb, kn, wt);
      for (int v = 0; v < NV; ++v) {
        __m256 part = kScaled ? _mm256_setzero_ps() : acc[v];
        for (int k = 0; k < kn; ++k) part = _mm256_add_ps(part, _mm256_mul_ps(_mm256_broadcast_ss(x + kb + k), wt[k][v]));
        acc[v] = kScaled ? panels::add_block(acc[v], part, _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb))
                         : part;
      }
    }
  }
  for (int v = 0; v < NV; ++v) store_rounded(acc[v], y + n0 + 8 * v, round);
}

/// Decode GEMV (one input row) for fp4: products[k] holds x[k]·{0, .5, 1, 1.5, 2, 3, 4, 6}, so a
/// column's products are one table lookup and a sign flip (x·(−a) is exactly −(x·a)), no multiply.
template <int NV>
void fp4_gemv_tile(const float* x, const float* xs, const float* products, const MatrixView& w, int n0, float* y,
                   OutRound round) {
  const int K = w.cols;
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  __m256 acc[NV];
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  int kb = 0;
  for (; kb + kBlockK <= K; kb += kBlockK) {
    __m256 part[NV];
    for (int v = 0; v < NV; ++v) part[v] = _mm256_setzero_ps();
    for (int k8 = kb; k8 < kb + kBlockK; k8 += 8) {
      __m256i lanes[NV];
      for (int v = 0; v < NV; ++v) lanes[v] = fp4_nibble_lanes(w, n0 + 8 * v, k8);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256 pk = _mm256_load_ps(products + 8 * (k8 + j));
        for (int v = 0; v < NV; ++v) {
          __m256 p = _mm256_permutevar8x32_ps(pk, _mm256_srli_epi32(lanes[v], 4 * j));
          __m256i s = _mm256_and_si256(_mm256_slli_epi32(lanes[v], 28 - 4 * j), sign);
          part[v] = _mm256_add_ps(part[v], _mm256_xor_ps(p, _mm256_castsi256_ps(s)));
        }
      }
    }
    for (int v = 0; v < NV; ++v)
      acc[v] = panels::add_block(acc[v], part[v], _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb));
  }
  if (kb < K) {  // K tail: scalar-built columns
    alignas(32) __m256 wt[kBlockK][NV];
    decode_block_scalar<NV>(w, n0, kb, K - kb, wt);
    for (int v = 0; v < NV; ++v) {
      __m256 part = _mm256_setzero_ps();
      for (int k = 0; k < K - kb; ++k) part = _mm256_add_ps(part, _mm256_mul_ps(_mm256_broadcast_ss(x + kb + k), wt[k][v]));
      acc[v] = panels::add_block(acc[v], part, _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb));
    }
  }
  for (int v = 0; v < NV; ++v) store_rounded(acc[v], y + n0 + 8 * v, round);
}

/// products[8k .. 8k + 8) = x[k] · e2m1 magnitudes, for fp4_gemv_tile (32-byte aligned).
inline void fp4_products(const float* x, int K, HostBuffer<float>& products) {
  if (products.size() < static_cast<size_t>(K) * 8) products = HostBuffer<float>(static_cast<size_t>(K) * 8);
  const __m256 magnitude = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  for (int k = 0; k < K; ++k)
    _mm256_store_ps(products.data() + 8 * k, _mm256_mul_ps(_mm256_broadcast_ss(x + k), magnitude));
}

template <class Columns, bool kScaled>
void linear_rows_with(const float* x, const float* xs, long T, long x_stride, const MatrixView& w, float* y,
                      long y_stride, OutRound round, int n, int n_end, const float* fp4_products) {
  for (; n + 8 * kTileVecs <= n_end; n += 8 * kTileVecs) {
    if (fp4_products) fp4_gemv_tile<kTileVecs>(x, xs, fp4_products, w, n, y, round);
    else if (T == 1 && !std::is_same_v<Columns, Fp4Columns>) gemv_tile<Columns, kTileVecs, kScaled>(x, xs, w, n, y, round);
    else linear_tile<Columns, kTileVecs, kScaled>(x, xs, T, x_stride, w, n, y, y_stride, round);
  }
  for (; n + 8 <= n_end; n += 8) {
    if (fp4_products) fp4_gemv_tile<1>(x, xs, fp4_products, w, n, y, round);
    else if (T == 1 && !std::is_same_v<Columns, Fp4Columns>) gemv_tile<Columns, 1, kScaled>(x, xs, w, n, y, round);
    else linear_tile<Columns, 1, kScaled>(x, xs, T, x_stride, w, n, y, y_stride, round);
  }
  linear_rows_scalar(x, xs, T, x_stride, w, y, y_stride, round, n, n_end);
}

}  // namespace avx2
#else
inline constexpr bool kVectorised = false;
#endif

#if defined(DS41_HOST_AVX512)
/// avx2::act_quant_block32 on two 16-lane vectors: the same operations lane for lane, so the
/// same bits, in half as many instructions (one thread, K = 5120: 2.35 -> 1.36 us; a decode
/// GEMV's input is quantised on the calling thread before the pool starts).
inline bool act_quant_block32_512(const float* x, float* q, float* scale) {
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512 finite_max = _mm512_set1_ps(3.40282347e38f);
  const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
  const __m512 a0 = _mm512_and_ps(v[0], abs_mask), a1 = _mm512_and_ps(v[1], abs_mask);
  if (_mm512_cmp_ps_mask(a0, finite_max, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, finite_max, _CMP_NLE_UQ))
    return false;  // inf, or NaN (unordered)
  const float s = fp8_pow2_scale_of_amax(_mm512_reduce_max_ps(_mm512_max_ps(_mm512_max_ps(a0, a1), _mm512_set1_ps(1e-4f))));
  *scale = s;
  const __m512 inv = _mm512_set1_ps(1.0f / s);
  const __m512 lim = _mm512_set1_ps(448.0f), nlim = _mm512_set1_ps(-448.0f);
  const __m512 normal_min = _mm512_set1_ps(0.015625f), grid = _mm512_set1_ps(512.0f), grid_inv = _mm512_set1_ps(1.0f / 512.0f);
  const __m512i half_m1 = _mm512_set1_epi32(0x7FFFF), keep = _mm512_set1_epi32(static_cast<int>(0xFFF00000u)), one = _mm512_set1_epi32(1);
  for (int i = 0; i < 2; ++i) {
    const __m512 y = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[i], inv), nlim), lim);
    const __m512 a = _mm512_and_ps(y, abs_mask);
    // normal range: keep 3 mantissa bits, ties to even (e4m3_round's bit trick)
    const __m512i ab = _mm512_castps_si512(a);
    const __m512i rb = _mm512_and_si512(
        _mm512_add_epi32(_mm512_add_epi32(ab, half_m1), _mm512_and_si512(_mm512_srli_epi32(ab, 20), one)), keep);
    const __m512 rn = _mm512_min_ps(_mm512_castsi512_ps(rb), lim);
    // subnormal grid m·2^-9: a·512 is exact, rounded to the nearest even integer
    const __m512 rs = _mm512_mul_ps(_mm512_roundscale_ps(_mm512_mul_ps(a, grid), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), grid_inv);
    const __m512 r = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(a, normal_min, _CMP_GE_OQ), rs, rn);
    _mm512_storeu_ps(q + 16 * i, _mm512_or_ps(r, _mm512_andnot_ps(abs_mask, y)));  // the sign of y
  }
  return true;
}
#endif

/// act_quant_row (core/quant.hpp) with full 32-value blocks 8 (AVX2) or 16 (AVX-512) lanes at a
/// time: the same bits.
inline void act_quant_row_fast(const float* x, int K, float* q, float* scale) {
  int kb = 0;
#if defined(DS41_HOST_AVX512)
  for (; kb + 32 <= K; kb += 32)
    if (!act_quant_block32_512(x + kb, q + kb, scale + kb / 32)) act_quant_row(x + kb, 32, q + kb, scale + kb / 32);
#elif defined(__AVX2__) && !defined(__CUDA_ARCH__)
  for (; kb + 32 <= K; kb += 32)
    if (!ds41::avx2::act_quant_block32(x + kb, q + kb, scale + kb / 32)) act_quant_row(x + kb, 32, q + kb, scale + kb / 32);
#endif
  if (kb < K) act_quant_row(x + kb, K - kb, q + kb, scale + kb / 32);
}

/// What linear() prepares once per call, for every row worker: for fp8/fp4 weights the input's
/// act_quant (q replaces x, one scale per 32 columns), and from a single input row (T == 1) the
/// fp4 products table (row-major fp4, avx2::fp4_products) or the scaled input (fp8 panels,
/// scaled::scale_input). Null members: not prepared.
struct PreparedInput {
  const float* x_scale = nullptr;  // act_quant scales, row stride ceil(K/32); x then holds q
  const float* fp4_products = nullptr;
  const float* scaled_x = nullptr;
  const uint32_t* fp4_plane_words = nullptr;  // fp4 panels: fp4int::prepare's byte planes
  const float* fp4_block_units = nullptr;     // and per-block units
  const uint32_t* bf16_x_pairs = nullptr;     // fp8 panels: fp8dot512::prepare's input pairs
#if defined(DS41_HOST_AVX512_VNNI)
  const gemm_fp4int512::RowPlanes* fp4_rows = nullptr;  // fp4 panels, T > 1: each row's planes
#endif
#if defined(DS41_HOST_AVX512_BF16)
  const gemm_fp8dot512::RowInputs* fp8_rows = nullptr;  // fp8 panels, T > 1: each row's x' and pairs
#endif
  bool bf16_fused = false;  // bf16 panels, T > 1: gemm512::bf16_products_exact
  const uint32_t* bf16_pairs = nullptr;  // and the dot products' too: each row's pairs (gemm_bf16dot512)
};

/// The vector instructions the host Linear's kernels may use, so that tests and benchmarks can
/// run each level on one machine (the results are the same bits): all this build has (kWidest:
/// with AVX-512 BF16, fp8 decode sums by dot products, host/gemv_fp8dot512.hpp), AVX-512
/// without BF16 (kAvx512: fp8 by multiply-adds, host/gemv_scaled512.hpp; fp4 with VNNI,
/// host/gemv_fp4int512.hpp; f32/bf16 decode 16 rows a vector, host/gemv_panels512.hpp), or AVX2
/// alone. A level the build lacks runs the next one down.
/// kTuned, linear()'s default: per format the level that read cold weights fastest (decode_isa).
enum class VectorIsa { kWidest, kAvx512, kAvx2, kTuned };

/// The level kTuned takes for a decode GEMV (one input row) of format f. A decode step reads
/// each matrix from DRAM (it was last read a token, gigabytes, ago), and there fp8 runs fastest
/// on AVX2's tile, 8 rows a vector: four runs of bench_kernels' BM_DecodeGemv (one Zen 5 VM, 2
/// threads, session 11; 1280 x 5120 / 32768 x 1280 / 5120 x 8192 / 5120 x 2304, medians) read
/// 85 / 92 / 85 / 81% of the stream with it, against 85 / 78 / 85 / 79% by BF16 dot products and
/// 83 / 74 / 83 / 74% by AVX-512 multiply-adds, both 16 rows a vector, which are the faster from
/// L3 (1.2-1.6x). fp4 takes the widest: 70 / 87 / 92 / 83% with AVX-512 VNNI (three later runs,
/// tiles of 2 panels) against 65 / 84 / 78 / 77% with AVX2 alone. bf16 takes the widest too:
/// its 16-row tile read the four shapes 4-10% faster than the AVX2 one, alternating call by call
/// (session 12; f32 the same either way, at the stream read). Prefill (T > 1) takes the widest.
/// (docs/PERFORMANCE.md.)
constexpr VectorIsa decode_isa(WeightFormat f) {
  return f == WeightFormat::kFp8Block32 ? VectorIsa::kAvx2 : VectorIsa::kWidest;
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ), vectorised where the build allows. For fp8/fp4
/// weights x holds act_quant's q and prepared.x_scale its scales (null: raw x, the scalar path
/// quantises on the fly). The decode tiles prefetch rows up to prefetch_end (>= n_end; -1: n_end)
/// as their own: the rows this thread is expected to take next (HostThreadPool::run_owned).
inline void linear_rows(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                        OutRound round, int n_begin, int n_end, PreparedInput prepared = {},
                        VectorIsa isa = VectorIsa::kWidest, int prefetch_end = -1) {
  prefetch_end = std::max(prefetch_end, n_end);
  if (host_ggml::usable(w)) return host_ggml::linear_rows(x, T, x_stride, w, y, y_stride, round, n_begin, n_end);
  const float* xs = block_scaled(w.format) ? prepared.x_scale : nullptr;
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
  using namespace avx2;
  if (xs || !block_scaled(w.format)) {
#if defined(DS41_HOST_AVX512_BF16)
    if (T == 1 && prepared.bf16_x_pairs && scaled::usable(w) && isa == VectorIsa::kWidest)
      return scaled512::gemv_rows(x, xs,
                                  fp8dot512::DotBlockSums{prepared.scaled_x, prepared.bf16_x_pairs,
                                                          w.host_subnormal_blocks, (w.cols + 31) / 32},
                                  w, y, round, n_begin, n_end, prefetch_end);
#endif
#if defined(DS41_HOST_AVX512)
    if (T == 1 && prepared.scaled_x && scaled::usable(w) && isa != VectorIsa::kAvx2)
      return scaled512::gemv_rows(x, xs,
                                  scaled512::FmaBlockSums{prepared.scaled_x, w.host_subnormal_blocks, (w.cols + 31) / 32},
                                  w, y, round, n_begin, n_end, prefetch_end);
#endif
    if (T == 1 && prepared.scaled_x && scaled::usable(w))
      return scaled::gemv_rows(x, xs, prepared.scaled_x, w, y, round, n_begin, n_end, prefetch_end);
#if defined(DS41_HOST_AVX512_VNNI)
    if (T == 1 && prepared.fp4_plane_words && fp4int::usable(w) && isa != VectorIsa::kAvx2)
      return fp4int512::gemv_rows(x, xs, fp4int::Planes{prepared.fp4_plane_words, prepared.fp4_block_units}, w, y,
                                  round, n_begin, n_end, prefetch_end);
#endif
    if (T == 1 && prepared.fp4_plane_words && fp4int::usable(w))
      return fp4int::gemv_rows(x, xs, fp4int::Planes{prepared.fp4_plane_words, prepared.fp4_block_units}, w, y, round,
                               n_begin, n_end, prefetch_end);
#if defined(DS41_HOST_AVX512)
    if (T == 1 && panels512::usable(w) && isa != VectorIsa::kAvx2)
      return panels512::gemv_rows(x, w, y, round, n_begin, n_end);
#endif
#if defined(DS41_HOST_AVX512_BF16)
    if (T > 1 && prepared.fp8_rows && gemm_fp8dot512::usable(w) && isa == VectorIsa::kWidest)
      return gemm_fp8dot512::linear_rows(prepared.fp8_rows, T, w, y, y_stride, round, n_begin, n_end, prefetch_end);
#endif
#if defined(DS41_HOST_AVX512_VNNI)
    if (T > 1 && prepared.fp4_rows && fp4int::usable(w) && isa != VectorIsa::kAvx2)
      return gemm_fp4int512::linear_rows(prepared.fp4_rows, T, w, y, y_stride, round, n_begin, n_end, prefetch_end);
#endif
#if defined(DS41_HOST_AVX512_BF16)
    if (T > 1 && prepared.bf16_pairs && gemm_bf16dot512::usable(w) && isa == VectorIsa::kWidest)
      return gemm_bf16dot512::linear_rows(x, prepared.bf16_pairs, T, x_stride, w, y, y_stride, round, n_begin, n_end);
#endif
#if defined(DS41_HOST_AVX512)
    // T > 1 (batched decode, prefill): 16 rows a vector, several input rows per decoded block
    if (T > 1 && gemm512::usable(w) && isa != VectorIsa::kAvx2)
      return gemm512::linear_rows(x, xs, T, x_stride, w, y, y_stride, round, n_begin, n_end, prepared.bf16_fused);
#endif
    if (w.layout == WeightLayout::kPanels8)
      return panels::linear_rows(x, xs, T, x_stride, w, y, y_stride, round, n_begin, n_end);
    switch (w.format) {
      case WeightFormat::kF32:
        return linear_rows_with<F32Columns, false>(x, nullptr, T, x_stride, w, y, y_stride, round, n_begin, n_end, nullptr);
      case WeightFormat::kBF16:
        return linear_rows_with<Bf16Columns, false>(x, nullptr, T, x_stride, w, y, y_stride, round, n_begin, n_end, nullptr);
      case WeightFormat::kFp8Block32:
        return linear_rows_with<Fp8Columns, true>(x, xs, T, x_stride, w, y, y_stride, round, n_begin, n_end, nullptr);
      case WeightFormat::kFp4Block32:
        return linear_rows_with<Fp4Columns, true>(x, xs, T, x_stride, w, y, y_stride, round, n_begin, n_end,
                                                  T == 1 ? prepared.fp4_products : nullptr);
      case WeightFormat::kGgmlBlocks: break;  // host/gemv_ggml.hpp, above
    }
  }
#endif
  linear_rows_scalar(x, xs, T, x_stride, w, y, y_stride, round, n_begin, n_end);
}

/// Input values from which linear() quantises its input rows on the pool rather than inline.
constexpr long kParallelQuantMin = 1L << 15;
/// Below this many multiply-adds a Linear runs on the calling thread: waking the pool costs more.
constexpr long kParallelLinearMinMacs = 1L << 16;
/// Output rows per work item: whole tiles, and whole fp8 32-row scale blocks.
constexpr int kRowsPerItem = 32;

/// Without AVX-512 VNNI (no host/gemm_fp4int512.hpp), up to this many input rows an fp4 Linear
/// whose decode GEMV is the integer one (fp4int: the codes multiplied as bytes) runs as one GEMV
/// per row: each is ~3x the multi-row float tile's speed per row, which decodes every code to a
/// float for only a few rows. bench_kernels BM_BatchLinear, cold, 2 threads (session 14): T = 1 /
/// 2 / 4 / 8 took 184 / 600 / 809 / 1067 us at 1280 x 5120 and 240 / 775 / 832 / 1545 us at 5120
/// x 2304 (a routed expert's w2), so a GEMV per row wins up to T = 4. fp8 and bf16 gain from the
/// multi-row tile from T = 2. The same bits either way.
constexpr long kFp4GemvPerRowMax = 4;

/// Whether an fp8 Linear of T > 1 rows at this level may take the multi-row dot-product tile
/// (host/gemm_fp8dot512.hpp): wherever the build has it at the widest level, on weights packed for
/// the scaled decoder, if every row's input is one it takes (linear() checks).
inline bool fp8_dot_rows(const MatrixView& w, long T, VectorIsa isa) {
#if defined(DS41_HOST_AVX512_BF16)
  return T > 1 && isa == VectorIsa::kWidest && gemm_fp8dot512::usable(w);
#else
  (void)w, (void)T, (void)isa;
  return false;
#endif
}

/// Whether an fp4 Linear of T > 1 rows at this level takes the multi-row integer tile
/// (host/gemm_fp4int512.hpp): wherever the build has it and the level allows AVX-512.
inline bool fp4_integer_rows(const MatrixView& w, long T, VectorIsa isa) {
#if defined(DS41_HOST_AVX512_VNNI)
  return T > 1 && isa != VectorIsa::kAvx2 && fp4int::usable(w);
#else
  (void)w, (void)T, (void)isa;
  return false;
#endif
}

/// b replaced by a buffer of n elements where it holds fewer (linear()'s per-thread buffers: grown,
/// never shrunk, so a sequence's steps allocate nothing after the first).
template <class T>
inline void grow(HostBuffer<T>& b, long n) {
  if (b.size() < static_cast<size_t>(n)) b = HostBuffer<T>(static_cast<size_t>(n));
}

/// y[r, n] = round(x[r, :] · W[n, :]) for r < T, n < W.rows, split over the pool by row blocks.
inline void linear(const float* x, long T, long x_stride, const MatrixView& w, float* y, long y_stride,
                   OutRound round, HostThreadPool& pool, VectorIsa isa = VectorIsa::kTuned) {
  if (T <= 0 || w.rows <= 0) return;
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
  if (T > 1 && T <= kFp4GemvPerRowMax && isa == VectorIsa::kTuned && fp4int::usable(w) &&
      !fp4_integer_rows(w, T, isa)) {
    for (long r = 0; r < T; ++r) linear(x + r * x_stride, 1, x_stride, w, y + r * y_stride, y_stride, round, pool, isa);
    return;
  }
#endif
  if (isa == VectorIsa::kTuned) isa = T == 1 ? decode_isa(w.format) : VectorIsa::kWidest;
  PreparedInput prepared;
  // fp8/fp4: the reference's act_quant of every input row, once (the kernels read q and scales)
  thread_local HostBuffer<float> quantized, quant_scales;
  if (block_scaled(w.format)) {
    const long K = w.cols, kblocks = (K + 31) / 32;
    if (quantized.size() < static_cast<size_t>(T * K)) quantized = HostBuffer<float>(static_cast<size_t>(T * K));
    if (quant_scales.size() < static_cast<size_t>(T * kblocks))
      quant_scales = HostBuffer<float>(static_cast<size_t>(T * kblocks));
    float* q = quantized.data();
    float* qs = quant_scales.data();
#if defined(DS41_HOST_AVX512_VNNI)
    // fp4 rows for the multi-row integer tile: each row's planes, units, biases and plane counts,
    // prepared with its act_quant (on the pool for large inputs)
    thread_local HostBuffer<uint32_t> row_words;
    thread_local HostBuffer<float> row_units;
    thread_local HostBuffer<int32_t> row_bias;
    thread_local HostBuffer<uint8_t> row_plane_counts;
    thread_local std::vector<gemm_fp4int512::RowPlanes> rows;
    const bool integer_rows = fp4_integer_rows(w, T, isa);
    const long nw = gemm_fp4int512::words_per_row(w.cols), nb = gemm_fp4int512::blocks_per_row(w.cols);
    if (integer_rows) {
      grow(row_words, T * nw);
      grow(row_units, T * nb);
      grow(row_bias, T * nb);
      grow(row_plane_counts, T * nb);
      rows.resize(static_cast<size_t>(T));
    }
    uint32_t* words = row_words.data();
    float* units = row_units.data();
    int32_t* bias = row_bias.data();
    uint8_t* plane_counts = row_plane_counts.data();
    gemm_fp4int512::RowPlanes* row_planes = rows.data();
#endif
#if defined(DS41_HOST_AVX512_BF16)
    // fp8 rows for the multi-row dot-product tile: each row's x' and pairs, and whether it took them
    thread_local HostBuffer<float> row_scaled;
    thread_local HostBuffer<uint32_t> row_pairs, row_lifted_pairs;
    thread_local HostBuffer<float> row_part_scales;
    thread_local std::vector<gemm_fp8dot512::RowInputs> fp8_inputs;
    thread_local std::vector<uint8_t> fp8_taken;
    const bool dot_rows = fp8_dot_rows(w, T, isa);
    const long ns = gemm_fp8dot512::scaled_per_row(w.cols), np = gemm_fp8dot512::pairs_per_row(w.cols);
    if (dot_rows) {
      grow(row_scaled, T * ns);
      grow(row_pairs, T * np);
      grow(row_lifted_pairs, T * np);
      grow(row_part_scales, T * kblocks);
      fp8_inputs.resize(static_cast<size_t>(T));
      fp8_taken.assign(static_cast<size_t>(T), 0);
    }
    float* scaled_rows = row_scaled.data();
    uint32_t* pair_rows = row_pairs.data();
    uint32_t* lifted_pair_rows = row_lifted_pairs.data();
    float* part_scale_rows = row_part_scales.data();
    gemm_fp8dot512::RowInputs* inputs = fp8_inputs.data();
    uint8_t* taken = fp8_taken.data();
#endif
    auto quantize = [&](long begin, long end) {
      for (long r = begin; r < end; ++r) {
        act_quant_row_fast(x + r * x_stride, w.cols, q + r * K, qs + r * kblocks);
#if defined(DS41_HOST_AVX512_VNNI)
        if (integer_rows)
          row_planes[r] = gemm_fp4int512::prepare_row(q + r * K, qs + r * kblocks, w.cols, words + r * nw,
                                                      units + r * nb, bias + r * nb, plane_counts + r * nb);
#endif
#if defined(DS41_HOST_AVX512_BF16)
        if (dot_rows) {
          float* xs_r = scaled_rows + r * ns;
          uint32_t* pairs_r = pair_rows + r * np;
          uint32_t* lifted_r = lifted_pair_rows + r * np;
          float* part_scales_r = part_scale_rows + r * kblocks;
          taken[r] = gemm_fp8dot512::prepare_row(q + r * K, K, xs_r, pairs_r) &&
                     gemm_fp8dot512::prepare_part_scales(qs + r * kblocks, kblocks, part_scales_r);
          if (taken[r]) gemm_fp8dot512::lift_pairs(pairs_r, K, lifted_r);
          inputs[r] = gemm_fp8dot512::RowInputs{q + r * K, qs + r * kblocks, xs_r, pairs_r, lifted_r, part_scales_r};
        }
#endif
      }
    };
    if (T * K >= kParallelQuantMin && pool.threads() > 1) pool.run(T, 1, quantize);
    else quantize(0, T);
    x = quantized.data();
    x_stride = K;
    prepared.x_scale = quant_scales.data();
#if defined(DS41_HOST_AVX512_VNNI)
    if (integer_rows) prepared.fp4_rows = row_planes;
#endif
#if defined(DS41_HOST_AVX512_BF16)
    if (dot_rows && std::all_of(taken, taken + T, [](uint8_t t) { return t != 0; })) prepared.fp8_rows = inputs;
#endif
  }
#if defined(DS41_HOST_AVX512)
  if (T > 1 && w.format == WeightFormat::kBF16 && isa != VectorIsa::kAvx2 && gemm512::usable(w)) {
    const host_exact::Bf16Range range = gemm512::input_range(x, T, x_stride, w.cols);
    prepared.bf16_fused = gemm512::bf16_products_exact(range, w);
#if defined(DS41_HOST_AVX512_BF16)
    // where the dot products are the faster sums (gemm_fp8dot512::use_dot_products: not on Intel's
    // Sapphire/Emerald Rapids) and exact: each row's pairs, once for every row worker
    thread_local HostBuffer<uint32_t> bf16_row_pairs;
    if (prepared.bf16_fused && isa == VectorIsa::kWidest && gemm_bf16dot512::usable(w) &&
        gemm_fp8dot512::use_dot_products() && gemm_bf16dot512::sums_stay_normal(range, w)) {
      const long np = gemm_bf16dot512::pairs_per_row(w.cols);
      grow(bf16_row_pairs, T * np);
      for (long r = 0; r < T; ++r) gemm_bf16dot512::prepare_row(x + r * x_stride, w.cols, bf16_row_pairs.data() + r * np);
      prepared.bf16_pairs = bf16_row_pairs.data();
    }
#endif
  }
#endif
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
  thread_local HostBuffer<float> fp4_table, scaled_x, fp4_units;
  thread_local HostBuffer<uint32_t> fp4_words;
  if (T == 1 && fp4int::usable(w)) {
    const fp4int::Planes planes = fp4int::prepare(x, w.cols, fp4_words, fp4_units);
    prepared.fp4_plane_words = planes.group;
    prepared.fp4_block_units = planes.block_unit;
  }
  if (T == 1 && w.format == WeightFormat::kFp4Block32 && w.layout == WeightLayout::kRowMajor) {
    avx2::fp4_products(x, w.cols, fp4_table);
    prepared.fp4_products = fp4_table.data();
  }
  if (T == 1 && w.layout == WeightLayout::kPanels8 && w.host_scaled_decode) {
    if (scaled_x.size() < static_cast<size_t>(w.cols)) scaled_x = HostBuffer<float>(static_cast<size_t>(w.cols));
    if (scaled::scale_input(x, w.cols, scaled_x.data())) prepared.scaled_x = scaled_x.data();
#if defined(DS41_HOST_AVX512_BF16)
    thread_local HostBuffer<uint32_t> bf16_pairs;
    if (prepared.scaled_x && isa == VectorIsa::kWidest && fp8dot512::usable(w) &&
        fp8dot512::prepare(prepared.scaled_x, w.cols, bf16_pairs))
      prepared.bf16_x_pairs = bf16_pairs.data();
#endif
  }
#endif
  const long items = (w.rows + kRowsPerItem - 1) / kRowsPerItem;
  const auto row = [&](long item) { return static_cast<int>(std::min<long>(w.rows, item * kRowsPerItem)); };
  auto run = [&](long begin, long end, long share_end) {
    linear_rows(x, T, x_stride, w, y, y_stride, round, row(begin), row(end), prepared, isa, row(share_end));
  };
  const long macs = T * static_cast<long>(w.rows) * w.cols;
  if (pool.threads() == 1 || macs < kParallelLinearMinMacs || items < 2) return run(0, items, items);
  // ~8 chunks per thread, so that a late thread can still catch up (4 left both cores ~5% idle at
  // the end of a decode GEMV, in cache), but each thread's from one contiguous share of the rows,
  // which its tiles prefetch across chunks: cold, 1280 x 5120 fp4 read 33-35 GB/s in chunks
  // handed out in turn, 37-40 in contiguous halves (one Zen 5 VM, 2 threads, 3 rounds
  // alternating call by call; the other V4.1 shapes and formats alike either way)
  pool.run_owned(items, std::max(1L, items / (8L * pool.threads())), run);
}

}  // namespace ds41::host_gemv
#include "../../core/fp_exact_end.hpp"
