// ds41/backend/host/gemv_fp4int512.hpp — the fp4 decode GEMV's integer block sums
// (host/gemv_fp4int.hpp) on 512-bit vectors with VNNI, bit-identical to MatrixView::dot.
//
// Why: with cold weights the AVX2 integer path is bound by its arithmetic on a Zen 5 core
// (5120 x 8192: 763 us where the same bytes walked without arithmetic take 337 us, README
// "Performance"). Here a vector holds two panels' groups (16 rows, as host/gemv_scaled512.hpp),
// and `vpdpbusd` multiplies the plane bytes by the weights and adds each lane's four products
// into its int32 sum in one instruction, where AVX2 takes `vpmaddubsw` and two `vpaddw`.
//
// Same bits: the blocks taken, the planes, the sign folding and the weight lookups are
// fp4int's (prepare() is shared), and each lane's integer sum is the same integer: fp4int's int16
// lanes are exact for every block prepare() lets through (its third test), and int32 sums of the
// same products cannot wrap (|S| <= 2^24). The tile (gemv_tile) finishes each block 16 rows a
// vector with the AVX2 tile's operations lane for lane (from L3, one thread, 1280 x 5120: 95.8
// -> 88.0 us against finishing each 8-row panel on ymm lanes; cold alike); it shares the
// float-path blocks (fp4int::float_block_sums).
// Compiled when the translation unit has AVX-512 F, BW, DQ, VL and VNNI (Ice Lake and later
// Intel cores, Zen 4 and later).
#pragma once
#include "gemv_fp4int.hpp"
#include "gemv_scaled512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512) && defined(__AVX512VNNI__)
#define DS41_HOST_AVX512_VNNI 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::fp4int512 {

using fp4int::kGroupK;
using fp4int::kGroupWords;

/// fp4int::block_sums for panel pairs (panel0 + 2v·pb, + (2v + 1)·pb), v < NV: lanes 0-7 of
/// sum[v] the first panel's rows, 8-15 the second's.
template <int NV>
inline void block_sums(const uint8_t* panel0, long pb, const uint32_t* words, int g0, __m512i (&sum)[NV]) {
  const __m512i w2 = _mm512_broadcast_i32x4(fp4int::weight_times_2());
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // plane 0 (low bytes of xi >> t) and plane 1 (high bytes) in int32, each as two sums (the low
  // and the high nibbles' products): integer sums in any order are the same integers, and four
  // chains per vector rather than two leave less of vpdpbusd's latency exposed (from L3, one
  // thread, 1280 x 5120: 95.6 -> 90.3 us)
  __m512i s0[NV], s1[NV], t0[NV], t1[NV];
  DS41_UNROLL for (int v = 0; v < NV; ++v) s0[v] = s1[v] = t0[v] = t1[v] = _mm512_setzero_si512();
  for (int g = g0; g < g0 + 32 / kGroupK; ++g) {
    const uint32_t* x = words + static_cast<size_t>(g) * kGroupWords;
    const __m512i x0 = _mm512_set1_epi32(static_cast<int>(x[0])), x1 = _mm512_set1_epi32(static_cast<int>(x[1]));
    const __m512i x2 = _mm512_set1_epi32(static_cast<int>(x[2])), x3 = _mm512_set1_epi32(static_cast<int>(x[3]));
    const __m512i sign = _mm512_set1_epi32(static_cast<int>(x[4]));
    DS41_UNROLL for (int v = 0; v < NV; ++v) {
      const __m512i raw = _mm512_xor_si512(
          scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, g), sign);
      const __m512i wl = _mm512_shuffle_epi8(w2, _mm512_and_si512(raw, nibble));
      const __m512i wh = _mm512_shuffle_epi8(w2, _mm512_and_si512(_mm512_srli_epi16(raw, 4), nibble));
      s0[v] = _mm512_dpbusd_epi32(s0[v], x0, wl);
      t0[v] = _mm512_dpbusd_epi32(t0[v], x1, wh);
      s1[v] = _mm512_dpbusd_epi32(s1[v], x2, wl);
      t1[v] = _mm512_dpbusd_epi32(t1[v], x3, wh);
    }
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v)
    sum[v] = _mm512_add_epi32(_mm512_add_epi32(s0[v], t0[v]), _mm512_slli_epi32(_mm512_add_epi32(s1[v], t1[v]), 8));
}

/// Two panels' 8 e8m0 scale bytes each as floats, a's in lanes 0-7 and b's in 8-15
/// (panels::fp4_scales_to_f32 on 16 lanes).
inline __m512 scales_pair_to_f32(const uint8_t* a, const uint8_t* b) {
  const __m128i bytes = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a)),
                                           _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b)));
  const __m512i bits = _mm512_slli_epi32(_mm512_cvtepu8_epi32(bytes), 23);
  return _mm512_castsi512_ps(_mm512_max_epi32(bits, _mm512_set1_epi32(0x00400000)));
}

/// fp4int::gemv_tile on NV panel pairs, 16 rows a vector from the integer sums to the block
/// finish: the same operations per lane (part = float(S)·unit, then acc + (part·s_x)·s_w), half
/// as many of them as finishing each 8-row panel apart. Float-path blocks sum per panel
/// (panels::add_groups) and finish in pairs.
template <int NV>
void gemv_tile(const float* q, const float* x_scale, const fp4int::Planes& planes, const MatrixView& w, long p0,
               int ahead, float* y, OutRound round) {
  constexpr int NP = 2 * NV;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const long kblocks = (K + 31) / 32;
  __m512 acc[NV];
  DS41_UNROLL for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  const uint8_t* scales = w.host_fp4_scales_e8m0;
  const auto pair_scales = [&](int v, int bi) {  // panel p0 + 2v's 8 row scales, then p0 + 2v + 1's
    return scales_pair_to_f32(panels::fp4_block_scales_at(scales, kblocks, p0 + 2 * v, bi),
                              panels::fp4_block_scales_at(scales, kblocks, p0 + 2 * v + 1, bi));
  };
  for (int kb = 0; kb < K; kb += 32) {
    const int bi = kb / 32;
    DS41_UNROLL for (int v = 0; v < NP; ++v)  // as fp4int::gemv_tile (which says why the loops are written out)
      panels::prefetch_ahead(panels::group_at(panel0 + v * pb, kb / kGroupK), 32 / kGroupK * 32);
    for (int v = 0; v < ahead; ++v) {
      panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / kGroupK), 32 / kGroupK * 32);
      const uint8_t* next_scales = panels::fp4_block_scales_at(scales, kblocks, p0 + NP + v, bi);
      if (bi == 0 || (reinterpret_cast<uintptr_t>(next_scales) & 63) == 0) panels::prefetch_l2(next_scales, kPanelRows);
    }
    const __m512 sx = _mm512_set1_ps(x_scale[bi]);
    const float unit = planes.block_unit[bi];
    if (unit != 0.0f) {
      const __m512 u = _mm512_set1_ps(unit);
      __m512i sum[NV];
      block_sums<NV>(panel0, pb, planes.group, kb / kGroupK, sum);
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        const __m512 part = _mm512_mul_ps(_mm512_cvtepi32_ps(sum[v]), u);
        acc[v] = scaled512::add_block(acc[v], part, sx, pair_scales(v, bi));
      }
    } else {
      __m256 part[NP];
      fp4int::float_block_sums<NP>(q, panel0, pb, kb, K, part);
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        const __m512 pair = _mm512_insertf32x8(_mm512_castps256_ps512(part[2 * v]), part[2 * v + 1], 1);
        acc[v] = scaled512::add_block(acc[v], pair, sx, pair_scales(v, bi));
      }
    }
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v) {  // lanes 0-7 the first panel's rows, 8-15 the second's
    panels::store_rounded(_mm512_castps512_ps256(acc[v]), y + 16 * v, round);
    panels::store_rounded(_mm512_extractf32x8_ps(acc[v], 1), y + 16 * v + 8, round);
  }
}

/// Panels a tile of gemv_rows takes: 2, one vector of 16 rows. Cold (interleaved harness, 3
/// rounds, 2 threads, stream 43-49 GB/s; 1280 x 5120 / 32768 x 1280 / 5120 x 8192 / 5120 x 2304)
/// tiles of 2 panels read 36.3 / 44.2 / 40.2 / 42.4, 35.6 / 41.3 / 45.1 / 38.3, 34.4 / 40.8 /
/// 41.0 / 35.1 GB/s where tiles of 4 (two vectors, panels::kTilePanels) read 34.9 / 41.2 / 37.2
/// / 38.7, 33.7 / 38.6 / 36.3 / 33.6, 33.1 / 38.0 / 35.3 / 28.5: half as many streams at once
/// (codes and scales per panel). Still so after panels_to_prefetch's limit rose to 128 KiB (so
/// that tiles of 4 prefetch the next one too, at K up to 8192), session 12, alternating call by
/// call, 3 rounds, stream 47-48: 2 panels 40.5-41.7 / 39.1-41.9 / 42.2-44.0 / 40.6-43.7, 4
/// panels 36.2-37.1 / 37.2-39.3 / 35.3-37.1 / 37.3-40.6. From L3 (one copy of 1280 x 5120) tiles of 4 are the faster: one thread 90 against
/// 104 us, two 50-56 against 59-66; a decode GEMV's weights come from DRAM.
constexpr int kTilePanels = 2;

/// fp4int::gemv_rows with each tile's integer blocks summed 16 rows a vector; a single panel by fp4int's tile.
inline void gemv_rows(const float* q, const float* x_scale, const fp4int::Planes& planes, const MatrixView& w,
                      float* y, OutRound round, int n_begin, int n_end, int prefetch_end) {
  panels::walk_panel_rows<kTilePanels>(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, prefetch_end, panel_bytes(w.format, w.cols));
        if constexpr (NP % 2 == 0) fp4int512::gemv_tile<NP / 2>(q, x_scale, planes, w, p0, ahead, y + n, round);
        else fp4int::gemv_tile<NP>(q, x_scale, planes, w, p0, ahead, y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

/// The descriptor (host/linear_call.hpp): the fp4 integer decode GEMV, 16 rows a vector (VNNI).
struct DecodeGemv {
  static constexpr const char* kName = "fp4 integer decode GEMV (AVX-512 VNNI)";
  using Prepared = fp4int::DecodeGemv::Prepared;
  static bool usable(const LinearCall& c) { return c.T == 1 && fp4int::usable(c.w) && c.isa != VectorIsa::kAvx2; }
  static bool prepare(const LinearCall& c, Prepared& p) { return fp4int::DecodeGemv::prepare(c, p); }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    fp4int512::gemv_rows(c.x, c.xs, p.planes, c.w, c.y, c.round, n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::fp4int512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::fp4int512 {
struct DecodeGemv : NotBuilt {};
}  // namespace ds41::host_gemv::fp4int512
#endif
