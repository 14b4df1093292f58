// ds41/backend/host/gemv_fp4int.hpp — the host decode GEMV (one input row) of fp4 panels summed
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
// of q folded into the code's sign bit), pairs widened by `vpmaddwd`. About 16 operations per 64
// weights against ~35 for the float table decoder (host/gemv_panels.hpp Fp4Columns).
//
// Panel order (host/panels.hpp): a 32-byte group holds 8 rows x 8 columns, byte 4(i%4) + j +
// 16(i/4) = row i's codes for columns j (low nibble) and j + 4 (high), fp4_panel_code_byte. Row
// i's four bytes are consecutive, the pairs `vpmaddubsw` adds, so a group needs no shuffle before
// its nibbles are looked up (a transpose here cost 4-8% in cache).
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <cstdint>
#include "../../core/linear_math.hpp"
#include "buffer.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#include "gemv_panels.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::fp4int {

constexpr int kGroupK = 8;      // columns per 32-byte fp4 panel group
constexpr int kGroupWords = 5;  // per group: plane 0 columns 0-3, 4-7; plane 1 the same; sign mask

/// What prepare() derives from act_quant's q for one input row.
struct Planes {
  const uint32_t* group = nullptr;  // [K/8][kGroupWords]
  const float* block_unit = nullptr;  // [ceil(K/32)]: 2^(t-10) where the block sums in integers, 0 where not
};

/// Whether a block whose Σ (xi >> t) is `sum` sums exactly in float32 in any order: |w2| <= 12,
/// so every partial sum stays within 12·sum units of 2^(t-10), which must fit 24 bits (top of file).
/// The one-row tiles' and the multi-row tile's (host/gemm_fp4int512.hpp) shared bound.
constexpr bool sum_is_exact(uint64_t sum) { return sum * 12 <= (1u << 24); }

/// prepare() for one full 32-column block of q: writes its 4 groups' words and returns the unit
/// 2^(t-10), or 0 when the block must take the float path. The tests:
/// - xi = |q|·2^9 is an integer below 2^18 (e4m3 values are multiples of 2^-9 below 2^9); a NaN
///   q (from a row to which act_quant gave a NaN scale) converts to 2^31 and fails;
/// - t = the lowest set bit of any xi; after >> t every xi < 2^16 (two byte planes), and
///   12·Σ xi <= 2^24 (every partial float sum is exact, see the top of the file);
/// - block_sums' int16 lanes hold the whole block. `vpmaddubsw` + `vpaddw` accumulate, per row and
///   plane, the products of 16 columns in one lane: columns {0, 1, 4, 5} + 8g or {2, 3, 6, 7} + 8g
///   of the block's 4 groups g. The adds wrap modulo 2^16, so the final lane is exact whenever the
///   true sum fits: 12·Σ plane bytes <= 32767 (|w2| <= 12; a maddubs pair sum is at most
///   2·255·12, never saturated). For Gaussian and for SwiGLU-like bf16 activations (2880 blocks
///   each) it turned away no block that passed the other tests.
inline float prepare_block(const float* q, uint32_t* words) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256i byte_mask = _mm256_set1_epi32(0xFF);
  __m256 qv[4];
  __m256i xi[4], low = _mm256_setzero_si256();
  DS41_UNROLL for (int g = 0; g < 4; ++g) {  // one group (8 columns) per vector
    qv[g] = _mm256_loadu_ps(q + kGroupK * g);
    xi[g] = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_and_ps(qv[g], magnitude), _mm256_set1_ps(512.0f)));
    low = _mm256_or_si256(low, xi[g]);
  }
  alignas(32) uint32_t lanes[4][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[0]), low);
  uint32_t low_bits = 0;
  for (uint32_t v : lanes[0]) low_bits |= v;
  if (low_bits >> 31) return 0.0f;  // NaN
  const int t = low_bits ? __builtin_ctz(low_bits) : 0;
  const __m128i shift = _mm_cvtsi32_si128(t);
  __m256i top = _mm256_setzero_si256(), sum = top, plane0 = top, plane1 = top;  // per column position
  DS41_UNROLL for (int g = 0; g < 4; ++g) {
    xi[g] = _mm256_srl_epi32(xi[g], shift);
    top = _mm256_max_epu32(top, xi[g]);
    sum = _mm256_add_epi32(sum, xi[g]);
    plane0 = _mm256_add_epi32(plane0, _mm256_and_si256(xi[g], byte_mask));
    plane1 = _mm256_add_epi32(plane1, _mm256_srli_epi32(xi[g], 8));
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[0]), top);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[1]), sum);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[2]), plane0);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes[3]), plane1);
  uint32_t top_all = 0, sum_all = 0;
  DS41_UNROLL for (int c = 0; c < 8; ++c) {
    top_all = std::max(top_all, lanes[0][c]);
    sum_all += lanes[1][c];  // < 32·2^18: no overflow
  }
  if (top_all >= (1u << 16) || !sum_is_exact(sum_all)) return 0.0f;
  for (int p = 2; p < 4; ++p)  // per plane, the two lane classes {0, 1, 4, 5} and {2, 3, 6, 7}
    for (int c = 0; c < 4; c += 2)
      if ((lanes[p][c] + lanes[p][c + 1] + lanes[p][c + 4] + lanes[p][c + 5]) * 12 > 32767) return 0.0f;
  // in each 128-bit lane (4 columns): bytes 0-3 = the columns' low bytes, 4-7 = their second bytes
  const __m256i planes = panels::byte_table(0, 4, 8, 12, 1, 5, 9, 13, -1, -1, -1, -1, -1, -1, -1, -1);
  // spread[n]: bit j of n to bit 0 of byte j
  static constexpr uint32_t spread[16] = {0x00000000, 0x00000001, 0x00000100, 0x00000101, 0x00010000, 0x00010001,
                                          0x00010100, 0x00010101, 0x01000000, 0x01000001, 0x01000100, 0x01000101,
                                          0x01010000, 0x01010001, 0x01010100, 0x01010101};
  DS41_UNROLL for (int g = 0; g < 4; ++g) {
    const __m256i b = _mm256_shuffle_epi8(xi[g], planes);
    const uint32_t negative = static_cast<uint32_t>(_mm256_movemask_ps(qv[g]));  // sign bits, as std::signbit
    uint32_t* w = words + static_cast<size_t>(g) * kGroupWords;
    w[0] = static_cast<uint32_t>(_mm256_extract_epi32(b, 0));  // plane 0, columns 0-3
    w[1] = static_cast<uint32_t>(_mm256_extract_epi32(b, 4));  // plane 0, columns 4-7
    w[2] = static_cast<uint32_t>(_mm256_extract_epi32(b, 1));  // plane 1, columns 0-3
    w[3] = static_cast<uint32_t>(_mm256_extract_epi32(b, 5));  // plane 1, columns 4-7
    w[4] = spread[negative & 15] * 0x08u | spread[negative >> 4] * 0x80u;  // into the codes' sign bits
  }
  // 2^(t-10), t <= 17, by its bits: std::ldexp is a libm call, +18% on the whole of prepare()
  return bits_f32(static_cast<uint32_t>(t - 10 + 127) << 23);
}

/// The byte planes, sign masks and per-block units of q (K values) into the buffers.
inline Planes prepare(const float* q, int K, HostBuffer<uint32_t>& words, HostBuffer<float>& units) {
  const int groups = K / kGroupK, kblocks = (K + 31) / 32;
  if (words.size() < static_cast<size_t>(groups) * kGroupWords) words = HostBuffer<uint32_t>(static_cast<size_t>(groups) * kGroupWords);
  if (units.size() < static_cast<size_t>(kblocks)) units = HostBuffer<float>(static_cast<size_t>(kblocks));
  for (int b = 0; b < kblocks; ++b)  // the K tail takes the float path
    units[b] = 32 * b + 32 <= K ? prepare_block(q + 32 * b, words.data() + static_cast<size_t>(b) * 4 * kGroupWords) : 0.0f;
  return Planes{words.data(), units.data()};
}

/// 2w for each e2m1 code (the nibble indexes it; sign bit 3), as a vpshufb table.
inline __m128i weight_times_2() { return _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12); }

/// Σ over the 32-column block at group g0 (4 groups) of panels panel0 + v·pb, v < NI: the
/// integers S of S·2^(t-10). The panels advance in lock-step, so that their independent sums
/// interleave in program order rather than only in the out-of-order window (one core, in cache:
/// 21 -> 24 Gweights/s through host_gemv::linear, register spills and all). Each plane sums the
/// whole block in 16-bit lanes (prepare_block's third test) and widens once: +13% in cache over
/// widening every 2 groups, which also held 4 more int32 sums live.
template <int NI>
inline void block_sums(const uint8_t* panel0, long pb, const uint32_t* words, int g0, __m256i (&sum)[NI]) {
  const __m256i w2 = _mm256_broadcastsi128_si256(weight_times_2());
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256i s0[NI], s1[NI];  // plane 0 (low bytes of xi >> t), plane 1 (high bytes)
  DS41_UNROLL for (int v = 0; v < NI; ++v) s0[v] = s1[v] = _mm256_setzero_si256();
  for (int g = g0; g < g0 + 32 / kGroupK; ++g) {
    const uint32_t* x = words + static_cast<size_t>(g) * kGroupWords;
    const __m256i x0 = _mm256_set1_epi32(static_cast<int>(x[0])), x1 = _mm256_set1_epi32(static_cast<int>(x[1]));
    const __m256i x2 = _mm256_set1_epi32(static_cast<int>(x[2])), x3 = _mm256_set1_epi32(static_cast<int>(x[3]));
    const __m256i sign = _mm256_set1_epi32(static_cast<int>(x[4]));
    DS41_UNROLL for (int v = 0; v < NI; ++v) {
      // the sign of q into the code's sign bit (row i's four bytes lie consecutively)
      const __m256i raw = _mm256_xor_si256(panels::load_group(panel0 + v * pb, g), sign);
      const __m256i wl = _mm256_shuffle_epi8(w2, _mm256_and_si256(raw, nibble));
      const __m256i wh = _mm256_shuffle_epi8(w2, _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble));
      s0[v] = _mm256_add_epi16(s0[v], _mm256_add_epi16(_mm256_maddubs_epi16(x0, wl), _mm256_maddubs_epi16(x1, wh)));
      s1[v] = _mm256_add_epi16(s1[v], _mm256_add_epi16(_mm256_maddubs_epi16(x2, wl), _mm256_maddubs_epi16(x3, wh)));
    }
  }
  // plane 0 + 256 · plane 1 in int32: |lane pair| · 256 < 2^31
  const __m256i ones = _mm256_set1_epi16(1), by256 = _mm256_set1_epi16(256);
  DS41_UNROLL for (int v = 0; v < NI; ++v) sum[v] = _mm256_add_epi32(_mm256_madd_epi16(s0[v], ones), _mm256_madd_epi16(s1[v], by256));
}

/// part[v] = the float path's sum of the block at kb of panel panel0 + v·pb (the same sums as
/// panels::gemv_tile), for a block without an integer unit.
template <int NP>
inline void float_block_sums(const float* q, const uint8_t* panel0, long pb, int kb, int K, __m256 (&part)[NP]) {
  DS41_UNROLL for (int v = 0; v < NP; ++v) part[v] = _mm256_setzero_ps();
  if (kb + 32 <= K)
    panels::add_groups<panels::Fp4Columns, NP, false>(q, panel0, pb, kb / kGroupK, (kb + 32) / kGroupK, K, part);
  else
    panels::add_groups<panels::Fp4Columns, NP, true>(q, panel0, pb, kb / kGroupK, (K + kGroupK - 1) / kGroupK, K, part);
}

/// Decode GEMV of panels [p0, p0 + NP): q and its block scales x_scale (act_quant), planes from
/// prepare(q). Blocks with a unit are summed by block_sums (one int32 vector of 8 rows per
/// panel); blocks without one take the float path. The `ahead` panels after the tile are
/// prefetched. (host/gemv_fp4int512.hpp has the 16-rows-a-vector tile.)
template <int NP>
void gemv_tile(const float* q, const float* x_scale, const Planes& planes, const MatrixView& w, long p0, int ahead,
               float* y, OutRound round) {
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const long kblocks = (K + 31) / 32;
  __m256 acc[NP];
  DS41_UNROLL for (int v = 0; v < NP; ++v) acc[v] = _mm256_setzero_ps();
  // each branch applies its own scales: a part[] array live across the join cost ~5% in cache
  const uint8_t* scales = w.host_fp4_scales_e8m0;
  const auto row_scales = [&](int v, int bi) {
    return panels::fp4_scales_to_f32(panels::fp4_block_scales_at(scales, kblocks, p0 + v, bi));
  };
  for (int kb = 0; kb < K; kb += 32) {
    const int bi = kb / 32;
    // (written out in each tile: GCC 12 at -O3 dropped every prefetch of these loops, the L2
    // ones too, when they sat in a helper function; fp4 32768 x 1280 then read at 25 GB/s, not 40)
    DS41_UNROLL for (int v = 0; v < NP; ++v)  // this block's codes, panels::kPrefetchAhead on
      panels::prefetch_ahead(panels::group_at(panel0 + v * pb, kb / kGroupK), 32 / kGroupK * 32);
    for (int v = 0; v < ahead; ++v) {  // the next tile's codes of this block (4 groups), and its scales a line at a time
      panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / kGroupK), 32 / kGroupK * 32);
      const uint8_t* next_scales = panels::fp4_block_scales_at(scales, kblocks, p0 + NP + v, bi);
      if (bi == 0 || (reinterpret_cast<uintptr_t>(next_scales) & 63) == 0) panels::prefetch_l2(next_scales, kPanelRows);
    }
    const __m256 sx = _mm256_broadcast_ss(x_scale + bi);
    const float unit = planes.block_unit[bi];
    if (unit != 0.0f) {
      const __m256 u = _mm256_set1_ps(unit);
      __m256i sum[NP];
      block_sums<NP>(panel0, pb, planes.group, kb / kGroupK, sum);
      DS41_UNROLL for (int v = 0; v < NP; ++v)
        acc[v] = panels::add_block(acc[v], _mm256_mul_ps(_mm256_cvtepi32_ps(sum[v]), u), sx, row_scales(v, bi));
    } else {
      __m256 part[NP];
      float_block_sums<NP>(q, panel0, pb, kb, K, part);
      DS41_UNROLL for (int v = 0; v < NP; ++v)
        acc[v] = panels::add_block(acc[v], part[v], sx, row_scales(v, bi));
    }
  }
  DS41_UNROLL for (int v = 0; v < NP; ++v) panels::store_rounded(acc[v], y + 8 * v, round);
}

/// Whether this call may take the integer path (besides planes having been prepared).
inline bool usable(const MatrixView& w) { return w.format == WeightFormat::kFp4Block32 && w.layout == WeightLayout::kPanels8; }

/// Rows [n_begin, n_end) of y = round(q · Wᵀ) for one input row (act_quant's q and scales);
/// rows up to prefetch_end are prefetched as this walk's (scaled::gemv_rows).
inline void gemv_rows(const float* q, const float* x_scale, const Planes& planes, const MatrixView& w, float* y,
                      OutRound round, int n_begin, int n_end, int prefetch_end) {
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        gemv_tile<NP>(q, x_scale, planes, w, p0, panels::panels_to_prefetch(n, NP, prefetch_end, panel_bytes(w.format, w.cols)), y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

/// The descriptor (host/linear_call.hpp): the fp4 decode GEMV by integer products, 8 rows a vector.
/// prepare: the input row's byte planes and block units (prepare above) in this thread's workspace.
struct DecodeGemv {
  static constexpr const char* kName = "fp4 integer decode GEMV (AVX2)";
  struct Prepared {
    Planes planes;
  };
  static bool usable(const LinearCall& c) { return c.T == 1 && fp4int::usable(c.w); }
  static bool prepare(const LinearCall& c, Prepared& p) {
    thread_local HostBuffer<uint32_t> words;
    thread_local HostBuffer<float> units;
    p.planes = fp4int::prepare(c.x, c.w.cols, words, units);
    return p.planes.group != nullptr;  // none where K holds no whole group (the float tiles then)
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    fp4int::gemv_rows(c.x, c.xs, p.planes, c.w, c.y, c.round, n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::fp4int
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::fp4int {
struct DecodeGemv : NotBuilt {};
}  // namespace ds41::host_gemv::fp4int
#endif
