// ds41/backend/host/gemv_rowmajor.hpp — the host Linear's tiles over row-major weights (f32, bf16,
// fp8, fp4), vectorised across output rows, with results bit-identical to MatrixView::dot. The
// reasoning below holds for every host kernel (panels, GGUF blocks) too.
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
// Compiled for AVX2 when the translation unit has __AVX2__ and __FMA__ (e.g. -march=native, see DS41_NATIVE;
// never in nvcc's device pass); without it the descriptor is NotBuilt and linear() takes the scalar
// reference loops. Threads split output-row tiles, never a row's sum (host/gemv.hpp).
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "../../core/linear_math.hpp"
#include "../../core/simd_avx2.hpp"
#include "buffer.hpp"
#include "gemv_panels.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv {



#if defined(DS41_HOST_AVX2)
namespace avx2 {
using ds41::avx2::e4m3_decode8;
using ds41::avx2::transpose8;

constexpr int kBlockK = 32;    // one fp8/fp4 scale block along K
constexpr int kTileVecs = 4;   // 8-row vectors per tile
constexpr int kRowChunk = 16;  // input rows sharing one decoded block

// Column decoders: c[j] = column k + j of rows [n0, n0 + 8) (lane i = row n0 + i), exactly the
// floats MatrixView::stored_value() gives.
struct F32Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kF32;
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const float* p = static_cast<const float*>(w.data) + static_cast<long>(n0) * w.cols + k;
    DS41_UNROLL for (int i = 0; i < 8; ++i) c[i] = _mm256_loadu_ps(p + static_cast<long>(i) * w.cols);
    transpose8(c);
  }
};

struct Bf16Columns {  // bf16 -> f32 is the 16 bits moved to the top half
  static constexpr WeightFormat kFormat = WeightFormat::kBF16;
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const uint16_t* p = static_cast<const uint16_t*>(w.data) + static_cast<long>(n0) * w.cols + k;
    DS41_UNROLL for (int i = 0; i < 8; ++i) {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + static_cast<long>(i) * w.cols));
      c[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
    transpose8(c);
  }
};

// e4m3 -> f32 by core/simd_avx2.hpp's e4m3_decode8, which never makes an f32 subnormal (a multiply
// with a subnormal operand costs ~50% here). Blocks holding a NaN code still take the scalar path.
struct Fp8Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kFp8Block32;
  static void load8(const MatrixView& w, int n0, int k, __m256 c[8]) {
    const uint8_t* p = static_cast<const uint8_t*>(w.data) + static_cast<long>(n0) * w.cols + k;
    DS41_UNROLL for (int i = 0; i < 8; ++i)
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
  DS41_UNROLL for (int i = 0; i < 8; ++i) std::memcpy(&u[i], p + i * stride, 4);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u));
}

// e2m1 -> f32: the magnitude from an 8-entry table (vpermps reads the low 3 bits of each lane),
// the sign bit (nibble bit 3) moved to bit 31.
struct Fp4Columns {
  static constexpr WeightFormat kFormat = WeightFormat::kFp4Block32;
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
  DS41_UNROLL for (int v = 0; v < NV; ++v)
    for (int k8 = 0; k8 < kBlockK; k8 += 8) {
      Columns::load8(w, n0 + 8 * v, kb + k8, c);
      DS41_UNROLL for (int j = 0; j < 8; ++j) wt[k8 + j][v] = c[j];
    }
}

/// The same from scalar reads, for the K tail and fp8 blocks with NaN codes. Kept out of line:
/// each of its 8·NV reads dispatches over every format (the GGUF types' decoders included), and
/// GCC inlined all of them into each linear_tile, three 430 KB functions that made compiling the
/// host Linear take 221 s instead of 31 (g++ 12 -O3 -march=native, Zen 3; session 42). Its callers
/// reach it once a 32-column block, on the cold paths alone.
template <int NV>
__attribute__((noinline)) void decode_block_scalar(const MatrixView& w, int n0, int kb, int kn, __m256 (*wt)[NV]) {
  alignas(32) float col[8];
  for (int k = 0; k < kn; ++k)
    DS41_UNROLL for (int v = 0; v < NV; ++v) {
      DS41_UNROLL for (int i = 0; i < 8; ++i) col[i] = w.stored_value(n0 + 8 * v + i, kb + k);
      wt[k][v] = _mm256_load_ps(col);
    }
}

inline __m256 block_scales8(const MatrixView& w, int n0, int kb) {
  if (w.format == WeightFormat::kFp8Block32) return _mm256_set1_ps(w.scale_row(n0)[kb / 32]);
  alignas(32) float s[8];
  DS41_UNROLL for (int i = 0; i < 8; ++i) s[i] = w.scale_row(n0 + i)[kb / 32];
  return _mm256_load_ps(s);
}

inline void store_rounded(__m256 acc, float* y, OutRound round) {
  alignas(32) float a[8];
  _mm256_store_ps(a, acc);
  DS41_UNROLL for (int i = 0; i < 8; ++i) y[i] = apply_round(a[i], round);
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
      DS41_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = _mm256_setzero_ps();
    for (int kb = 0; kb < K; kb += kBlockK) {
      const int kn = std::min(kBlockK, K - kb);
      bool full = kn == kBlockK;
      if constexpr (std::is_same_v<Columns, Fp8Columns>) full = full && !Fp8Columns::block_has_nan(w, n0, 8 * NV, kb);
      if (full) decode_block<Columns, NV>(w, n0, kb, wt);
      else decode_block_scalar<NV>(w, n0, kb, kn, wt);
      __m256 scale[NV];
      if constexpr (kScaled)
        DS41_UNROLL for (int v = 0; v < NV; ++v) scale[v] = block_scales8(w, n0 + 8 * v, kb);
      for (int r = 0; r < tc; ++r) {
        const float* xr = x + (r0 + r) * x_stride + kb;
        __m256 a[NV];
        DS41_UNROLL for (int v = 0; v < NV; ++v) a[v] = kScaled ? _mm256_setzero_ps() : acc[r][v];
        for (int k = 0; k < kn; ++k) {
          const __m256 xk = _mm256_broadcast_ss(xr + k);
          DS41_UNROLL for (int v = 0; v < NV; ++v) a[v] = _mm256_add_ps(a[v], _mm256_mul_ps(xk, wt[k][v]));
        }
        if constexpr (kScaled) {
          const __m256 sx = _mm256_broadcast_ss(xs + (r0 + r) * kblocks + kb / kBlockK);
          DS41_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = panels::add_block(acc[r][v], a[v], sx, scale[v]);
        } else {
          DS41_UNROLL for (int v = 0; v < NV; ++v) acc[r][v] = a[v];
        }
      }
    }
    for (int r = 0; r < tc; ++r)
      DS41_UNROLL for (int v = 0; v < NV; ++v) store_rounded(acc[r][v], y + (r0 + r) * y_stride + n0 + 8 * v, round);
  }
}

/// Decode GEMV (one input row), bf16/f32/fp8: each 8x8 sub-block is decoded and transposed in
/// registers and consumed at once (no transposed buffer: with one input row nothing reuses it).
template <class Columns, int NV, bool kScaled>
void gemv_tile(const float* x, const float* xs, const MatrixView& w, int n0, float* y, OutRound round) {
  const int K = w.cols;
  __m256 acc[NV];
  DS41_UNROLL for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  int kb = 0;
  for (; kb + kBlockK <= K; kb += kBlockK) {
    if constexpr (std::is_same_v<Columns, Fp8Columns>)
      if (Fp8Columns::block_has_nan(w, n0, 8 * NV, kb)) break;  // the rest by linear_tile's scalar decode
    __m256 part[NV];
    DS41_UNROLL for (int v = 0; v < NV; ++v) part[v] = kScaled ? _mm256_setzero_ps() : acc[v];
    for (int k8 = kb; k8 < kb + kBlockK; k8 += 8)
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        __m256 c[8];
        Columns::load8(w, n0 + 8 * v, k8, c);
        DS41_UNROLL for (int j = 0; j < 8; ++j) part[v] = _mm256_add_ps(part[v], _mm256_mul_ps(_mm256_broadcast_ss(x + k8 + j), c[j]));
      }
    DS41_UNROLL for (int v = 0; v < NV; ++v)
      acc[v] = kScaled ? panels::add_block(acc[v], part[v], _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb))
                       : part[v];
  }
  if (kb < K) {  // K tail (or an fp8 block with a NaN code onwards): scalar-built columns
    alignas(32) __m256 wt[kBlockK][NV];
    for (; kb < K; kb += kBlockK) {
      const int kn = std::min(kBlockK, K - kb);
      decode_block_scalar<NV>(w, n0, kb, kn, wt);
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        __m256 part = kScaled ? _mm256_setzero_ps() : acc[v];
        for (int k = 0; k < kn; ++k) part = _mm256_add_ps(part, _mm256_mul_ps(_mm256_broadcast_ss(x + kb + k), wt[k][v]));
        acc[v] = kScaled ? panels::add_block(acc[v], part, _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb))
                         : part;
      }
    }
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v) store_rounded(acc[v], y + n0 + 8 * v, round);
}

/// Decode GEMV (one input row) for fp4: products[k] holds x[k]·{0, .5, 1, 1.5, 2, 3, 4, 6}, so a
/// column's products are one table lookup and a sign flip (x·(−a) is exactly −(x·a)), no multiply.
template <int NV>
void fp4_gemv_tile(const float* x, const float* xs, const float* products, const MatrixView& w, int n0, float* y,
                   OutRound round) {
  const int K = w.cols;
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  __m256 acc[NV];
  DS41_UNROLL for (int v = 0; v < NV; ++v) acc[v] = _mm256_setzero_ps();
  int kb = 0;
  for (; kb + kBlockK <= K; kb += kBlockK) {
    __m256 part[NV];
    DS41_UNROLL for (int v = 0; v < NV; ++v) part[v] = _mm256_setzero_ps();
    for (int k8 = kb; k8 < kb + kBlockK; k8 += 8) {
      __m256i lanes[NV];
      DS41_UNROLL for (int v = 0; v < NV; ++v) lanes[v] = fp4_nibble_lanes(w, n0 + 8 * v, k8);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const __m256 pk = _mm256_load_ps(products + 8 * (k8 + j));
        DS41_UNROLL for (int v = 0; v < NV; ++v) {
          __m256 p = _mm256_permutevar8x32_ps(pk, _mm256_srli_epi32(lanes[v], 4 * j));
          __m256i s = _mm256_and_si256(_mm256_slli_epi32(lanes[v], 28 - 4 * j), sign);
          part[v] = _mm256_add_ps(part[v], _mm256_xor_ps(p, _mm256_castsi256_ps(s)));
        }
      }
    }
    DS41_UNROLL for (int v = 0; v < NV; ++v)
      acc[v] = panels::add_block(acc[v], part[v], _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb));
  }
  if (kb < K) {  // K tail: scalar-built columns
    alignas(32) __m256 wt[kBlockK][NV];
    decode_block_scalar<NV>(w, n0, kb, K - kb, wt);
    DS41_UNROLL for (int v = 0; v < NV; ++v) {
      __m256 part = _mm256_setzero_ps();
      for (int k = 0; k < K - kb; ++k) part = _mm256_add_ps(part, _mm256_mul_ps(_mm256_broadcast_ss(x + kb + k), wt[k][v]));
      acc[v] = panels::add_block(acc[v], part, _mm256_broadcast_ss(xs + kb / kBlockK), block_scales8(w, n0 + 8 * v, kb));
    }
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v) store_rounded(acc[v], y + n0 + 8 * v, round);
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

/// The descriptor (host/linear_call.hpp): the tiles above over row-major f32, bf16, fp8 and fp4,
/// any T. prepare: for one fp4 input row, its products table (fp4_gemv_tile).
struct RowMajorTiles {
  static constexpr const char* kName = "row-major tiles (AVX2)";
  struct Prepared {
    const float* fp4_products = nullptr;
  };
  static bool usable(const LinearCall& c) {
    return c.w.layout == WeightLayout::kRowMajor && dispatch_format(c.w.format, [](auto tag) {
             return !std::is_void_v<decoder_for_t<decltype(tag)::value, F32Columns, Bf16Columns, Fp8Columns, Fp4Columns>>;
           });
  }
  static bool prepare(const LinearCall& c, Prepared& p) {
    if (c.T == 1 && c.w.format == WeightFormat::kFp4Block32) {
      thread_local HostBuffer<float> table;
      fp4_products(c.x, c.w.cols, table);
      p.fp4_products = table.data();
    }
    return true;
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int) {
    dispatch_format(c.w.format, [&](auto tag) {
      using Columns = decoder_for_t<decltype(tag)::value, F32Columns, Bf16Columns, Fp8Columns, Fp4Columns>;
      constexpr bool kScaled = TraitsOf<decltype(tag)>::kBlockScaled;
      if constexpr (!std::is_void_v<Columns>)
        linear_rows_with<Columns, kScaled>(c.x, kScaled ? c.xs : nullptr, c.T, c.x_stride, c.w, c.y, c.y_stride, c.round,
                                           n_begin, n_end, p.fp4_products);
    });
  }
};

}  // namespace avx2
#else
namespace avx2 {
struct RowMajorTiles : NotBuilt {};
}  // namespace avx2
#endif

}  // namespace ds41::host_gemv
#include "../../core/fp_exact_end.hpp"
