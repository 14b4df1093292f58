// ds41/backend/host/rows.hpp — the host's per-item kernels behind two backend operations
// (host.hpp): the hc post-expansion of the residual highway, and the fp8 row gather of the engram
// tables. Each is the shared formula's bits (the device's one-thread-per-element form in
// cuda.hpp), laid out so that the host's loops vectorise and the pool's items are worth waking it.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <cstdint>
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif
#include "../../core/numeric.hpp"
#include "../../core/quant.hpp"
#include "../../core/simd_avx2.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41 {

namespace host_rows {

/// expand_post: elements of one output row per item.
constexpr int kPostChunk = 512;

/// Item `item` of HostBackend::expand_post: a stretch of at most kPostChunk elements of one
/// output row (t, j) — or, when dim < kPostChunk, whole rows, kPostChunk / dim of them — so that
/// the index math is done once per item and the per-element formula splits into loops over d
/// that vectorise. Each element still sees acc = 0, acc += comb·res for i = 0..hc-1 in order,
/// then bf16(post·x + acc): hc_post_element's bits (core/hc_post.hpp).
inline void expand_post_item(long item, const float* x, const float* res, const float* post, const float* comb,
                             long T, int hc, int dim, float* out) {
  const long rows = T * hc;
  const long chunks = dim >= kPostChunk ? (dim + kPostChunk - 1) / kPostChunk : 1;
  const long per_item = dim >= kPostChunk ? 1 : kPostChunk / dim;
  const long group = item / chunks;
  const long d0 = (item - group * chunks) * kPostChunk;
  const int n = static_cast<int>(dim - d0 < kPostChunk ? dim - d0 : kPostChunk);
  const long row1 = (group + 1) * per_item < rows ? (group + 1) * per_item : rows;
  for (long row = group * per_item; row < row1; ++row) {  // row = t·hc + j
    const long t = row / hc;
    const int j = static_cast<int>(row - t * hc);
    float acc[kPostChunk];
    for (int d = 0; d < n; ++d) acc[d] = 0.0f;
    for (int i = 0; i < hc; ++i) {
      const float ci = comb[(t * hc + i) * hc + j];
      const float* ri = res + (t * hc + i) * dim + d0;
      for (int d = 0; d < n; ++d) acc[d] += ci * ri[d];
    }
    const float p = post[t * hc + j];
    const float* xt = x + t * dim + d0;
    float* o = out + row * dim + d0;
    for (int d = 0; d < n; ++d) o[d] = bf16_round(p * xt[d] + acc[d]);
  }
}
/// Items of HostBackend::expand_post.
inline long expand_post_items(long T, int hc, int dim) {
  if (dim <= 0) return 0;
  const long rows = T * hc;
  const long chunks = dim >= kPostChunk ? (dim + kPostChunk - 1) / kPostChunk : 1;
  const long per_item = dim >= kPostChunk ? 1 : kPostChunk / dim;
  return (rows + per_item - 1) / per_item * chunks;
}

constexpr long kGatherPrefetchRows = 4;     // fp8 row gather: rows prefetched this many rows ahead
constexpr long kGatherItemElements = 8192;  // fp8 row gather: elements per for_each item

}  // namespace host_rows

namespace engram_host {

/// o[d] = bf16(e4m3_decode(c[d]) · s[d / 32]) for d < hd: fp8_row_value (numeric.hpp) for one
/// row on the host. Only how a code becomes its float changes (the same exact value); the product
/// and the bf16 rounding are the formula's, so the bits are the same.
inline void dequant_row(const uint8_t* c, const float* s, int hd, float* o) {
  int d0 = 0;
#if defined(DS41_HOST_AVX2)
  // 8 codes per step (never straddling a 32-wide scale): the exact decoded floats, then the
  // formula's product and bf16 rounding
  for (; d0 + 8 <= hd; d0 += 8) {
    const __m256 a = avx2::e4m3_decode8(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c + d0))));
    _mm256_storeu_ps(o + d0, avx2::bf16_round8(_mm256_mul_ps(a, _mm256_set1_ps(s[d0 / 32]))));
  }
#endif
  const float* lut = e4m3_decode_table();
  for (; d0 < hd; ++d0) o[d0] = bf16_round(lut[c[d0]] * s[d0 / 32]);
}

/// Asks for row r's codes and scales ahead of use (rows are random in a table of hundreds of MB).
/// Always inlined (backend/host/prefetch_l2.hpp says why).
DS41_ALWAYS_INLINE void prefetch_row(const uint8_t* c, const float* s, long r, int hd) {
#if defined(__GNUC__)
  const uint8_t* p = c + r * hd;
  for (int k = 0; k < hd; k += 64) __builtin_prefetch(p + k);
  __builtin_prefetch(s + r * (hd / 32));
#else
  (void)c, (void)s, (void)r, (void)hd;
#endif
}

}  // namespace engram_host

}  // namespace ds41
#include "../../core/fp_exact_end.hpp"
