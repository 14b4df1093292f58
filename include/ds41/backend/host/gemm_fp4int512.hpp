// ds41/backend/host/gemm_fp4int512.hpp — the fp4 Linear of several input rows (batched decode,
// verify drafts, prefill) by integer block sums, each 32-column block's codes decoded once for up
// to kRowsPerPass rows, bit-identical to MatrixView::dot.
//
// Why: a routed expert in a batched step gets 1-4 rows, and neither earlier way shared its weight
// decode between them: one integer GEMV per row (host/gemv_fp4int512.hpp) costs T times the
// arithmetic, and the multi-row float tile (host/gemm_panels512.hpp) decodes every code to a float
// and multiplies in floats. bench_kernels BM_BatchLinear, cold, 2 threads, 5120 x 2304 (a routed
// expert's w2), before this tile: T = 1 / 2 / 4 / 8 / 16 took 260 / 486 / 880 / 1727 / 3010 us;
// with it 275 / 445 / 697 / 1240 / 2104 (T = 1 is still the decode GEMV; docs/PERFORMANCE.md).
// A first version of this tile that kept the one-row tile's operands (unsigned input planes,
// signed weights, q's sign applied to the looked-up weights by a masked negation per row) was no
// faster at T = 2: each row still cost 14 vector operations per 128 weights, the one-row tile's 15.
//
// How: the operands of `vpdpbusd` swap roles. The weights are the unsigned bytes, looked up
// biased (2w + 12, in [0, 24]) once per block for all rows; each input row is the signed bytes:
// xi' = |q|·2^9 >> t (fp4int's integer, see host/gemv_fp4int.hpp) in 7-bit planes carrying q's
// sign, so that `vpdpbusd` takes them as a broadcast memory operand and a row costs 4 (at most 6)
// instructions per 128 weights and nothing else. Σ s·xi'·(2w + 12) − 12·Σ s·xi' = Σ s·xi'·2w = S,
// the same integer as the one-row tile's (prepare_row stores 12·Σ s·xi' per block); a block's finish
// (acc + (float(S)·(unit·s_x))·s_w: the one-row tile's (float(S)·unit)·s_x in one rounding, see
// prepare_row) and the float path of blocks without a unit give the one-row tile's bits, lane for
// lane. The lanes are int32 and never wrap (a plane's lane sums 32 products of at most 127·24,
// below 2^17; shifted by 14 below 2^31), so the one-row AVX2 tile's int16-lane test is not needed
// here and prepare_row lets through every block its exactness test allows.
// Compiled where host/gemv_fp4int512.hpp is (AVX-512 F/BW/DQ/VL and VNNI).
#pragma once
#include "../../core/macros.hpp"
#include "broadcast512.hpp"
#include "gemv_fp4int512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512_VNNI)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <immintrin.h>
#include <vector>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::gemm_fp4int512 {

using fp4int::kGroupK;

/// Input rows a pass over a tile's block takes: the block's 8 decoded weight vectors stay in
/// registers for all of them, with one float accumulator per row and each row's 4-6 integer sums.
/// More rows take further passes over the tile, which finds its codes (16 rows x K/2 bytes: 40
/// KiB at K = 5120) in L2.
constexpr int kRowsPerPass = 8;

/// Per 8-column group and plane, two words of signed bytes: columns 0-3, then 4-7.
constexpr int kPlanes = 3;
constexpr int kGroupWords = 2 * kPlanes;

/// One input row as the tile reads it: act_quant's q and scales; per 8-column group the 7-bit
/// planes of s·xi' (kGroupWords words); per 32-column block the unit 2^(t-10) times the block's
/// s_x (0: the float path), 12·Σ s·xi' and the number of planes the block needs (2 or 3).
struct RowPlanes {
  const float* q = nullptr;
  const float* x_scale = nullptr;
  const uint32_t* words = nullptr;
  const float* unit_scales = nullptr;
  const int32_t* bias = nullptr;
  const uint8_t* planes = nullptr;
};

/// Sizes of one row's prepared data at K columns.
inline long words_per_row(int K) { return static_cast<long>((K + 31) / 32) * 4 * kGroupWords; }
inline long blocks_per_row(int K) { return (K + 31) / 32; }

/// The planes, unit scales, biases and plane counts of one row (act_quant's q and scales) into
/// caller-owned storage (words_per_row words, blocks_per_row of each of the others). The unit
/// scale 2^(t-10)·s_x lets the finish take one multiply where it took two: float(S)·2^(t-10) is
/// exact (|S| <= 2^24), so (float(S)·2^(t-10))·s_x and float(S)·(2^(t-10)·s_x) are one rounding
/// of the same product wherever 2^(t-10)·s_x is a normal float (exact); a block where it is not
/// (s_x zero, tiny, huge or not finite) takes the float path. Measured on one Zen 4 core, 1024 x
/// 2048 in L2/L3, T = 2 / 3 / 5: the multiply gone took 0.95x the time. A full block takes the
/// integer path where fp4int's exactness argument holds: every xi = |q|·2^9 is an integer (q is
/// act_quant's e4m3; a NaN q converts to 2^31 and fails), t the lowest set bit of any, xi >> t below 2^21 (three planes)
/// and 12·Σ (xi >> t) <= 2^24 (every partial float sum exact). The K tail takes the float path.
inline RowPlanes prepare_row(const float* q, const float* x_scale, int K, uint32_t* words, float* unit_scales,
                             int32_t* bias, uint8_t* planes) {
  const int kblocks = static_cast<int>(blocks_per_row(K));
  const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512i seven = _mm512_set1_epi32(0x7F), zero = _mm512_setzero_si512();
  for (int b = 0; b < kblocks; ++b) {
    unit_scales[b] = 0.0f;
    bias[b] = 0;
    planes[b] = 2;
    if (32 * b + 32 > K) continue;
    const float unit_scale = x_scale[b] * 0x1p-10f;  // at t = 0; 2^t more below, t <= 17
    if (!std::isnormal(unit_scale) || !std::isnormal(unit_scale * 0x1p17f)) continue;
    __m512i xi[2], low = zero;
    __mmask16 negative[2];
    DS41_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512 v = _mm512_loadu_ps(q + 32 * b + 16 * h);
      xi[h] = _mm512_cvttps_epi32(_mm512_mul_ps(_mm512_and_ps(v, magnitude), _mm512_set1_ps(512.0f)));
      negative[h] = _mm512_movepi32_mask(_mm512_castps_si512(v));  // sign bits, as std::signbit
      low = _mm512_or_si512(low, xi[h]);
    }
    const uint32_t low_bits = static_cast<uint32_t>(_mm512_reduce_or_epi32(low));
    if (low_bits >> 31) continue;  // NaN
    const int t = low_bits ? __builtin_ctz(low_bits) : 0;
    const __m128i shift = _mm_cvtsi32_si128(t);
    xi[0] = _mm512_srl_epi32(xi[0], shift);
    xi[1] = _mm512_srl_epi32(xi[1], shift);
    const uint32_t top = static_cast<uint32_t>(_mm512_reduce_max_epu32(_mm512_max_epu32(xi[0], xi[1])));
    const uint64_t sum = static_cast<uint32_t>(_mm512_reduce_add_epi32(_mm512_add_epi32(xi[0], xi[1])));  // < 2^23
    if (top >= (1u << 21) || !fp4int::sum_is_exact(sum)) continue;
    int32_t signed_sum = 0;
    DS41_UNROLL for (int h = 0; h < 2; ++h) {
      const __m512i s = _mm512_mask_sub_epi32(xi[h], negative[h], zero, xi[h]);
      signed_sum += _mm512_reduce_add_epi32(s);
      for (int p = 0; p < kPlanes; ++p) {  // s·(plane p of xi'), 16 bytes: groups 2h and 2h + 1, columns 0-3 then 4-7
        const __m512i plane = _mm512_and_si512(_mm512_srli_epi32(xi[h], 7 * p), seven);
        const __m128i bytes = _mm512_cvtepi32_epi8(_mm512_mask_sub_epi32(plane, negative[h], zero, plane));
        uint32_t* g0 = words + (static_cast<size_t>(b) * 4 + 2 * h) * kGroupWords + 2 * p;
        _mm_storel_epi64(reinterpret_cast<__m128i*>(g0), bytes);
        _mm_storel_epi64(reinterpret_cast<__m128i*>(g0 + kGroupWords), _mm_unpackhi_epi64(bytes, bytes));
      }
    }
    unit_scales[b] = unit_scale * bits_f32(static_cast<uint32_t>(t + 127) << 23);  // 2^(t-10)·s_x, exact
    bias[b] = 12 * signed_sum;
    planes[b] = top >= (1u << 14) ? 3 : 2;
  }
  return RowPlanes{q, x_scale, words, unit_scales, bias, planes};
}

/// 2w + 12 for each e2m1 code (the nibble indexes it; sign bit 3), as a vpshufb table.
inline __m128i biased_weight_times_2() {
  return _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
}

/// The biased weights of one block of two panels (group pairs q0 .. q0 + 3): wl[g] the low
/// nibbles (columns 0-3 of group g), wh[g] the high ones (4-7). With AVX-512 VBMI both lookups
/// are `vpermb` into a 64-byte table (the 16 values repeated: only the nibble's 4 bits matter)
/// and the high nibbles come down by `vpmultishiftqb`: all on the shuffle port, none of the masks
/// and 16-bit shifts of the vpshufb way, which share the integer port with every `vpdpbusd`.
DS41_ALWAYS_INLINE void decode_block(const uint8_t* panel_a, const uint8_t* panel_b, int q0, __m512i (&wl)[4],
                                     __m512i (&wh)[4]) {
  const __m512i table = _mm512_broadcast_i32x4(biased_weight_times_2());
#if defined(__AVX512VBMI__)
  const __m512i high_down = _mm512_set1_epi64(0x3C342C241C140C04LL);  // byte j of a word <- bits 8j + 4 ..
  DS41_UNROLL for (int g = 0; g < 4; ++g) {
    const __m512i raw = scaled512::load_group_pair(panel_a, panel_b, q0 + g);
    wl[g] = _mm512_permutexvar_epi8(raw, table);
    wh[g] = _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(high_down, raw), table);
  }
#else
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  DS41_UNROLL for (int g = 0; g < 4; ++g) {
    const __m512i raw = scaled512::load_group_pair(panel_a, panel_b, q0 + g);
    wl[g] = _mm512_shuffle_epi8(table, _mm512_and_si512(raw, nibble));
    wh[g] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble));
  }
#endif
}

/// float(S) of one row's integer block from the block's biased weights: per plane the low and
/// the high nibbles' products in two chains (integer sums in any order are the same integers;
/// one chain a plane measured ~9% slower at T = 2-8, four ~3% slower: the added adds), the
/// planes weighted 2^7p, less 12·Σ s·xi'.
template <int kPlanesUsed>
DS41_ALWAYS_INLINE __m512 integer_block(const RowPlanes& row, int bi, const __m512i (&wl)[4], const __m512i (&wh)[4]) {
  const uint32_t* x = row.words + static_cast<size_t>(bi) * 4 * kGroupWords;
  __m512i low[kPlanesUsed], high[kPlanesUsed];
  for (int p = 0; p < kPlanesUsed; ++p) low[p] = high[p] = _mm512_setzero_si512();
  DS41_UNROLL for (int g = 0; g < 4; ++g)  // each word broadcast inside vpdpbusd (host/broadcast512.hpp)
    for (int p = 0; p < kPlanesUsed; ++p) {
      low[p] = dpbusd_broadcast(low[p], wl[g], x + g * kGroupWords + 2 * p);
      high[p] = dpbusd_broadcast(high[p], wh[g], x + g * kGroupWords + 2 * p + 1);
    }
  __m512i sum = _mm512_add_epi32(_mm512_add_epi32(low[0], high[0]), _mm512_slli_epi32(_mm512_add_epi32(low[1], high[1]), 7));
  if constexpr (kPlanesUsed == 3)
    sum = _mm512_add_epi32(sum, _mm512_slli_epi32(_mm512_add_epi32(low[2], high[2]), 14));
  return _mm512_cvtepi32_ps(_mm512_sub_epi32(sum, _mm512_set1_epi32(row.bias[bi])));
}

/// Output rows [8·NP: panels p0, p0 + NP) of R input rows: y + r·y_stride gets row r's 8·NP
/// values (NP = 1: the vector's upper half repeats the panel and is not stored). The `ahead`
/// panels after the tile are prefetched (fp4int512::gemv_tile). A block where every row takes
/// the integer path runs straight through, its rows unrolled, each row's 2 or 3 planes chosen
/// by a branch; one where some row takes the float path (the K tail, a block fp4int's test
/// declines) goes row by row. (Measured against the row-by-row loop with the vpshufb decode for
/// every block, one thread, 1024 x 2048 in L2, best of 1000 calls: T = 2 / 3 / 4 / 8 in 90 / 127 /
/// 168 / 298 -> 83 / 113 / 151 / 273 us.) Why blocks with a third plane are not sent row by row:
/// 14% of the row-blocks of bench_layer's batch-8 expert inputs need one (a SwiGLU product's wide
/// spread), so at T = 2 a quarter of the blocks went there, 39% of the tile's samples (perf);
/// unrolled, one Zen 4 core, 1024 x 2048 in L2, inputs a product of two Gaussians (~14% third
/// planes), best of 80 x 40 calls, alternating 4 times: T = 2 / 3 / 5 in 75.5 / 105.8 / 176.4 ->
/// 69.6 / 100.9 / 162.8 us (each the best of its mode on this VM).
template <int R, int NP>
void tile_rows(const RowPlanes* rows, const MatrixView& w, long p0, int ahead, float* y, long y_stride,
               OutRound round) {
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel_a = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const uint8_t* panel_b = panel_a + (NP - 1) * pb;
  const long kblocks = (K + 31) / 32;
  const uint8_t* scales = w.host_fp4_scales_e8m0;
  __m512 acc[R];
  DS41_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  for (int kb = 0; kb < K; kb += 32) {
    const int bi = kb / 32;
    DS41_UNROLL for (int v = 0; v < NP; ++v)  // as fp4int512::gemv_tile (written out there for GCC's sake)
      panels::prefetch_ahead(panels::group_at(panel_a + v * pb, kb / kGroupK), 32 / kGroupK * 32);
    for (int v = 0; v < ahead; ++v) {
      panels::prefetch_l2(panels::group_at(panel_a + (NP + v) * pb, kb / kGroupK), 32 / kGroupK * 32);
      const uint8_t* next_scales = panels::fp4_block_scales_at(scales, kblocks, p0 + NP + v, bi);
      if (bi == 0 || (reinterpret_cast<uintptr_t>(next_scales) & 63) == 0) panels::prefetch_l2(next_scales, kPanelRows);
    }
    const __m512 sw = fp4int512::scales_pair_to_f32(panels::fp4_block_scales_at(scales, kblocks, p0, bi),
                                                    panels::fp4_block_scales_at(scales, kblocks, p0 + NP - 1, bi));
    bool integer = true, three = false, any_integer = false;
    DS41_UNROLL for (int r = 0; r < R; ++r) {
      const bool has_unit = rows[r].unit_scales[bi] != 0.0f;
      integer &= has_unit;
      any_integer |= has_unit;
      three |= rows[r].planes[bi] == 3;
    }
    // never decoded: the K tail (its unit is 0 in every row), whose groups may lie past the panel
    __m512i wl[4], wh[4];
    if (integer) [[likely]] {  // every row by integers: unrolled, the rows' planes summed alike
      decode_block(panel_a, panel_b, kb / kGroupK, wl, wh);
      if (!three) [[likely]] {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          acc[r] = scaled512::add_block(acc[r], integer_block<2>(rows[r], bi, wl, wh),
                                        _mm512_set1_ps(rows[r].unit_scales[bi]), sw);
      } else {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const __m512 part = rows[r].planes[bi] == 3 ? integer_block<3>(rows[r], bi, wl, wh)
                                                       : integer_block<2>(rows[r], bi, wl, wh);
          acc[r] = scaled512::add_block(acc[r], part, _mm512_set1_ps(rows[r].unit_scales[bi]), sw);
        }
      }
      continue;
    }
    if (any_integer) decode_block(panel_a, panel_b, kb / kGroupK, wl, wh);
    DS41_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 sx = _mm512_set1_ps(rows[r].x_scale[bi]);
      if (rows[r].unit_scales[bi] != 0.0f) {
        const __m512 part = rows[r].planes[bi] == 3 ? integer_block<3>(rows[r], bi, wl, wh)
                                                     : integer_block<2>(rows[r], bi, wl, wh);
        acc[r] = scaled512::add_block(acc[r], part, _mm512_set1_ps(rows[r].unit_scales[bi]), sw);
      } else {
        __m256 part[2];
        if constexpr (NP == 2) {
          fp4int::float_block_sums<2>(rows[r].q, panel_a, pb, kb, K, part);
        } else {  // one panel (the last of a view): its sums in both halves, the upper not stored
          __m256 one[1];
          fp4int::float_block_sums<1>(rows[r].q, panel_a, pb, kb, K, one);
          part[0] = part[1] = one[0];
        }
        const __m512 pair = _mm512_insertf32x8(_mm512_castps256_ps512(part[0]), part[1], 1);
        acc[r] = scaled512::add_block(acc[r], pair, sx, sw);
      }
    }
  }
  DS41_UNROLL for (int r = 0; r < R; ++r) {  // lanes 0-7 the first panel's rows, 8-15 the second's
    panels::store_rounded(_mm512_castps512_ps256(acc[r]), y + r * y_stride, round);
    if constexpr (NP == 2) panels::store_rounded(_mm512_extractf32x8_ps(acc[r], 1), y + r * y_stride + 8, round);
  }
}

/// Rows [n_begin, n_end) of y = round(q · Wᵀ) for the T prepared input rows (row r into
/// y + r·y_stride): each tile of two panels (or a last single one) in passes of kRowsPerPass
/// rows; rows off the panels (a slice's edges) by the scalar path.
inline void linear_rows(const RowPlanes* rows, long T, const MatrixView& w, float* y, long y_stride, OutRound round,
                        int n_begin, int n_end, int prefetch_end) {
  const long pb = panel_bytes(w.format, w.cols);
  const auto scalar = [&](int from, int to) {
    for (long r = 0; r < T; ++r)
      linear_rows_scalar(rows[r].q, rows[r].x_scale, 1, w.cols, w, y + r * y_stride, 0, round, from, to);
  };
  panels::walk_panel_rows<2>(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, prefetch_end, pb);
        for (long r = 0; r < T; r += kRowsPerPass) {
          const RowPlanes* pass = rows + r;
          float* yr = y + r * y_stride + n;
          const int ahead_now = r + kRowsPerPass >= T ? ahead : 0;  // the next tile: once, on the last pass
          switch (std::min<long>(kRowsPerPass, T - r)) {
            case 1: tile_rows<1, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            case 2: tile_rows<2, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            case 3: tile_rows<3, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            case 4: tile_rows<4, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            case 5: tile_rows<5, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            case 6: tile_rows<6, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            case 7: tile_rows<7, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            default: tile_rows<8, NP>(pass, w, p0, ahead_now, yr, y_stride, round); break;
          }
        }
      },
      scalar);
}

/// The descriptor (host/linear_call.hpp): the fp4 multi-row integer tile (T > 1, VNNI). prepare:
/// each row's planes, units, biases and plane counts.
struct Rows {
  static constexpr const char* kName = "fp4 multi-row integer tile (AVX-512 VNNI)";
  struct Prepared {
    const RowPlanes* rows = nullptr;
  };
  static bool usable(const LinearCall& c) { return c.T > 1 && c.isa != VectorIsa::kAvx2 && fp4int::usable(c.w); }
  static bool prepare(const LinearCall& c, Prepared& p) {
    thread_local HostBuffer<uint32_t> row_words;
    thread_local HostBuffer<float> row_units;
    thread_local HostBuffer<int32_t> row_bias;
    thread_local HostBuffer<uint8_t> row_plane_counts;
    thread_local std::vector<RowPlanes> rows;
    const int K = c.w.cols;
    const long kblocks = (K + 31) / 32, nw = words_per_row(K), nb = blocks_per_row(K);
    grow(row_words, c.T * nw);
    grow(row_units, c.T * nb);
    grow(row_bias, c.T * nb);
    grow(row_plane_counts, c.T * nb);
    rows.resize(static_cast<size_t>(c.T));
    // The rows may run on the pool's threads, where these thread_local names would be each
    // thread's own (empty) buffers: the lambda takes this thread's by pointer.
    uint32_t* const words = row_words.data();
    float* const units = row_units.data();
    int32_t* const bias = row_bias.data();
    uint8_t* const plane_counts = row_plane_counts.data();
    RowPlanes* const out = rows.data();
    for_each_input_row(c, [=, &c](long r) {
      out[r] = prepare_row(c.x + r * c.x_stride, c.xs + r * kblocks, K, words + r * nw, units + r * nb, bias + r * nb,
                           plane_counts + r * nb);
    });
    p.rows = rows.data();
    return true;
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    gemm_fp4int512::linear_rows(p.rows, c.T, c.w, c.y, c.y_stride, c.round, n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::gemm_fp4int512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::gemm_fp4int512 {
struct Rows : NotBuilt {};
}  // namespace ds41::host_gemv::gemm_fp4int512
#endif
