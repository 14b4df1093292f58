// ds41/backend/host_gemv_fp4int.hpp — the host decode GEMV (one input row) of fp4 panels summed
// in integers where that is provably the reference's float sum, bit-identical to MatrixView::dot.
//
// Why: the input of an fp4 Linear is act_quant's e4m3 q (core/quant.hpp), so every product q·w is
// an integer multiple of 2^-10: q·2^9 = xi is an integer below 2^18 and w·2 = w2 one in
// [-12, 12]. If every nonzero xi of a 32-column block is a multiple of 2^t and
// Σ (xi >> t)·12 <= 2^24, every partial sum of the block (any order) is an integer multiple of
// 2^(t-10) of magnitude <= 2^24 units, so float32 holds it exactly and the reference's K-order
// float sum equals the integer sum S·2^(t-10). The test looks at the input only, once per call;
// blocks that fail it (a |q| far below the block's largest, with odd low bits), the K tail and
// non-panel rows take the float path. For the others `vpmaddubsw` multiplies 32 weights at a time:
// xi >> t (< 2^16) as two unsigned byte planes against the weights as signed bytes w2 (the sign
// of q folded into the code's sign bit), pairs widened by `vpmaddwd`. About 18 operations per 64
// weights against ~35 for the float table decoder (host_gemv_panels.hpp Fp4Columns).
//
// Panel order (host_panels.hpp): a 32-byte group holds 8 rows x 8 columns, byte 4j + i%4 + 16(i/4)
// = row i's codes for columns j (low nibble) and j + 4 (high). One in-lane byte transpose puts
// row i's four columns in consecutive bytes, the pairs `vpmaddubsw` adds.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include "../core/linear_math.hpp"
#include "host_buffer.hpp"
#if defined(__AVX2__) && !defined(__CUDA_ARCH__)
#include <immintrin.h>
#include "host_gemv_panels.hpp"

namespace ds41::host_gemv::fp4int {

constexpr int kGroupK = 8;      // columns per 32-byte fp4 panel group
constexpr int kGroupWords = 5;  // per group: plane 0 columns 0-3, 4-7; plane 1 the same; sign mask

/// What prepare() derives from act_quant's q for one input row.
struct Planes {
  const uint32_t* group = nullptr;  // [K/8][kGroupWords]
  const float* block_unit = nullptr;  // [ceil(K/32)]: 2^(t-10) where the block sums in integers, 0 where not
};

/// The byte planes, sign masks and per-block units of q (K values) into the buffers.
inline Planes prepare(const float* q, int K, HostBuffer<uint32_t>& words, HostBuffer<float>& units) {
  const int groups = K / kGroupK, kblocks = (K + 31) / 32;
  if (words.size() < static_cast<size_t>(groups) * kGroupWords) words = HostBuffer<uint32_t>(static_cast<size_t>(groups) * kGroupWords);
  if (units.size() < static_cast<size_t>(kblocks)) units = HostBuffer<float>(static_cast<size_t>(kblocks));
  for (int b = 0; b < kblocks; ++b) {
    const int kb = 32 * b;
    units[b] = 0.0f;
    if (kb + 32 > K) continue;  // the K tail: float path
    uint32_t xi[32], low = 0;
    for (int k = 0; k < 32; ++k) {
      xi[k] = static_cast<uint32_t>(std::fabs(q[kb + k]) * 512.0f);  // exact: e4m3 values are multiples of 2^-9
      low |= xi[k];
    }
    const int t = low ? __builtin_ctz(low) : 0;  // every nonzero xi is a multiple of 2^t
    uint64_t sum = 0;
    uint32_t top = 0;
    for (int k = 0; k < 32; ++k) {
      xi[k] >>= t;
      sum += xi[k];
      top = std::max(top, xi[k]);
    }
    if (top >= (1u << 16) || sum * 12 > (1u << 24)) continue;  // not provably exact: float path
    units[b] = std::ldexp(1.0f, t - 10);
    for (int g = 0; g < 4; ++g) {
      uint32_t* w = words.data() + static_cast<size_t>(kb / kGroupK + g) * kGroupWords;
      w[0] = w[1] = w[2] = w[3] = w[4] = 0;
      for (int j = 0; j < 4; ++j) {
        const int lo = 8 * g + j, hi = lo + 4;
        w[0] |= (xi[lo] & 0xFFu) << (8 * j);
        w[1] |= (xi[hi] & 0xFFu) << (8 * j);
        w[2] |= (xi[lo] >> 8) << (8 * j);
        w[3] |= (xi[hi] >> 8) << (8 * j);
        w[4] |= ((std::signbit(q[kb + lo]) ? 0x08u : 0u) | (std::signbit(q[kb + hi]) ? 0x80u : 0u)) << (8 * j);
      }
    }
  }
  return Planes{words.data(), units.data()};
}

/// Σ over the 32-column block at group g0 (4 groups) of panels panel0 + v·pb, v < NI: the
/// integers S of S·2^(t-10). The panels advance in lock-step, so that their independent sums
/// interleave in program order rather than only in the out-of-order window (one core, in cache:
/// 21 -> 24 Gweights/s through host_gemv::linear, register spills and all).
template <int NI>
inline void block_sums(const uint8_t* panel0, long pb, const uint32_t* words, int g0, __m256i (&sum)[NI]) {
  const __m256i transpose = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15,  //
                                             0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  const __m256i w2 = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,  //
                                      0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m256i nibble = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int v = 0; v < NI; ++v) sum[v] = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {  // two groups per 16-bit run: |lane| <= 2 groups x 2 x 2·255·12 < 2^15
    __m256i s0[NI], s1[NI];
    for (int v = 0; v < NI; ++v) s0[v] = s1[v] = _mm256_setzero_si256();
    for (int gg = 0; gg < 2; ++gg) {
      const int g = g0 + 2 * h + gg;
      const uint32_t* x = words + static_cast<size_t>(g) * kGroupWords;
      const __m256i x0 = _mm256_set1_epi32(static_cast<int>(x[0])), x1 = _mm256_set1_epi32(static_cast<int>(x[1]));
      const __m256i x2 = _mm256_set1_epi32(static_cast<int>(x[2])), x3 = _mm256_set1_epi32(static_cast<int>(x[3]));
      const __m256i sign = _mm256_set1_epi32(static_cast<int>(x[4]));
      for (int v = 0; v < NI; ++v) {
        // the sign of q into the code's sign bit, then row i's four columns into consecutive bytes
        const __m256i raw = _mm256_xor_si256(_mm256_shuffle_epi8(panels::load_group(panel0 + v * pb, g), transpose), sign);
        const __m256i wl = _mm256_shuffle_epi8(w2, _mm256_and_si256(raw, nibble));
        const __m256i wh = _mm256_shuffle_epi8(w2, _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble));
        s0[v] = _mm256_add_epi16(s0[v], _mm256_add_epi16(_mm256_maddubs_epi16(x0, wl), _mm256_maddubs_epi16(x1, wh)));
        s1[v] = _mm256_add_epi16(s1[v], _mm256_add_epi16(_mm256_maddubs_epi16(x2, wl), _mm256_maddubs_epi16(x3, wh)));
      }
    }
    for (int v = 0; v < NI; ++v)  // plane 0 + 256 · plane 1, in int32
      sum[v] = _mm256_add_epi32(sum[v], _mm256_add_epi32(_mm256_madd_epi16(s0[v], ones),
                                                         _mm256_slli_epi32(_mm256_madd_epi16(s1[v], ones), 8)));
  }
}

/// Decode GEMV of panels [p0, p0 + NP): q and its block scales x_scale (act_quant), planes from
/// prepare(q). Blocks without a unit take the float path (panels::add_groups, the same sums as
/// panels::gemv_tile). The `ahead` panels after the tile are prefetched.
template <int NP>
void gemv_tile(const float* q, const float* x_scale, const Planes& planes, const MatrixView& w, long p0, int ahead,
               float* y, OutRound round) {
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  __m256 acc[NP];
  for (int v = 0; v < NP; ++v) acc[v] = _mm256_setzero_ps();
  for (int kb = 0; kb < K; kb += 32) {
    const int bi = kb / 32;
    __m256 part[NP];
    for (int v = 0; v < ahead; ++v) {  // the next tile's codes (4 groups) and scales (8 floats) of this block
      panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / kGroupK), 32 / kGroupK * 32);
      panels::prefetch_l2(panels::fp4_block_scales_at(w.scales, (K + 31) / 32, p0 + NP + v, bi), kPanelRows * sizeof(float));
    }
    const float unit = planes.block_unit[bi];
    if (unit != 0.0f) {
      const __m256 u = _mm256_set1_ps(unit);
      __m256i sum[NP];
      block_sums<NP>(panel0, pb, planes.group, kb / kGroupK, sum);
      for (int v = 0; v < NP; ++v) part[v] = _mm256_mul_ps(_mm256_cvtepi32_ps(sum[v]), u);
    } else {
      for (int v = 0; v < NP; ++v) part[v] = _mm256_setzero_ps();
      if (kb + 32 <= K)
        panels::add_groups<panels::Fp4Columns, NP, false>(q, panel0, pb, kb / kGroupK, (kb + 32) / kGroupK, K, part);
      else
        panels::add_groups<panels::Fp4Columns, NP, true>(q, panel0, pb, kb / kGroupK, (K + kGroupK - 1) / kGroupK, K, part);
    }
    const __m256 sx = _mm256_broadcast_ss(x_scale + bi);
    for (int v = 0; v < NP; ++v) acc[v] = panels::add_block(acc[v], part[v], sx, panels::block_scales(w, p0 + v, bi));
  }
  for (int v = 0; v < NP; ++v) panels::store_rounded(acc[v], y + 8 * v, round);
}

/// Whether this call may take the integer path (besides planes having been prepared).
inline bool usable(const MatrixView& w) { return w.format == WeightFormat::kFp4Block32 && w.layout == WeightLayout::kPanels8; }

/// Rows [n_begin, n_end) of y = round(q · Wᵀ) for one input row (act_quant's q and scales).
inline void gemv_rows(const float* q, const float* x_scale, const Planes& planes, const MatrixView& w, float* y,
                      OutRound round, int n_begin, int n_end) {
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        gemv_tile<NP>(q, x_scale, planes, w, p0, panels::panels_to_prefetch(n, NP, n_end, panel_bytes(w.format, w.cols)), y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

}  // namespace ds41::host_gemv::fp4int
#endif
