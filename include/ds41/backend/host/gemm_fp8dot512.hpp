// ds41/backend/host/gemm_fp8dot512.hpp — the fp8 Linear of several input rows (batched decode,
// verify drafts, prefill) by the scaled domain's BF16 dot products, each decoded weight vector
// used by up to kRowsPerPass rows, bit-identical to MatrixView::dot.
//
// Why: the dense Linears of a batched decode step (T = 2-16 rows) ran on the multi-row float tile
// (host/gemm_panels512.hpp), a multiply and an add per weight and row after decoding each code to
// a float; at batch 8 they were about 40% of the step (bench_layer BM_V41DecodeBatch, perf). The
// decode GEMV's dot-product path (host/gemv_fp8dot512.hpp) does two of a row's K-order
// multiply-adds per `vdpbf16ps` on weights that need only an AND and a shift to become bf16.
//
// How: fp8dot512::dot_blocks' operations and order per lane, with the codes of each group pair
// decoded once for all the pass's rows, each row's input pairs a broadcast operand. Same bits as
// the one-row path for the same reasons (see host/gemv_fp8dot512.hpp): per row the chain is
// scaled512's multiply-add for multiply-add in K order; blocks holding a subnormal code take
// scaled512::add_blocks for every row; the K tail is summed column by column; each block's finish
// is scaled512::gemv_tile's. Rows whose input the dot products cannot take (scale_input or
// fp8dot512::prepare declines it) never reach here: gemv.hpp's linear() then takes the float tile
// for the whole call.
// Compiled where host/gemv_fp8dot512.hpp is (AVX-512 F/BW/DQ/VL and BF16).
#pragma once
#include "gemv_fp8dot512.hpp"
#if defined(DS41_HOST_AVX512_BF16)
#include <algorithm>
#include <cstdint>
#include <immintrin.h>

namespace ds41::host_gemv::gemm_fp8dot512 {

/// Input rows a pass takes: with two vectors of 16 output rows (a tile of 4 panels), 4 rows keep
/// 8 dot-product chains (each lane's chain is a K-order sequence, so the chains of more rows and
/// panels are what hides `vdpbf16ps`' latency) and their 8 accumulators in registers.
constexpr int kRowsPerPass = 4;

/// One input row as the tile reads it: act_quant's q and scales, x' = q·2^60 (scaled::scale_input)
/// and its bf16 pairs (fp8dot512::prepare).
struct RowInputs {
  const float* q = nullptr;
  const float* x_scale = nullptr;
  const float* xs = nullptr;
  const uint32_t* pairs = nullptr;
};

/// Values of one row's prepared data at K columns: x' (K), pairs (fp8dot512::prepare's).
inline long scaled_per_row(int K) { return K; }
inline long pairs_per_row(int K) { return K / 32 * 16 + 1; }

/// x' and its pairs for one row into caller-owned storage; false where the dot products cannot
/// take it (a value outside the scaled domain's range or not a bf16 there).
inline bool prepare_row(const float* q, int K, float* xs, uint32_t* pairs) {
  return scaled::scale_input(q, K, xs) && fp8dot512::prepare_into(xs, K, pairs);
}

/// Whether a call of T > 1 rows on w may take this tile (besides every row's prepare_row).
inline bool usable(const MatrixView& w) { return scaled::usable(w) && fp8dot512::usable(w); }

/// Output rows [16·NV: panels p0 .. p0 + 2·NV) of R input rows: y + r·y_stride gets row r's values.
/// The `ahead` panels after the tile are prefetched (scaled512::gemv_tile).
template <int R, int NV>
void tile_rows(const RowInputs* rows, const MatrixView& w, long p0, int ahead, float* y, long y_stride,
               OutRound round) {
  constexpr int g = 4;  // K positions per 32-byte panel group
  constexpr int NP = 2 * NV;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const long kblocks = (K + 31) / 32;
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const __m512 part_back = _mm512_set1_ps(scaled::kPartScale);
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0x87F0));  // sign | c[6:0] << 4
  __m512 acc[R][NV];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  const int whole = K / panels::kBlockK * panels::kBlockK;
  for (int kb = 0; kb < K; kb += panels::kBlockK) {
    constexpr int span = panels::kBlockK / g * 32;  // bytes of a panel's block
    for (int v = 0; v < ahead; ++v) panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / g), span);
    for (int v = 0; v < NP; ++v) panels::prefetch_ahead(panels::group_at(panel0 + v * pb, kb / g), span);
    __m512 part[R][NV];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < NV; ++v) part[r][v] = _mm512_setzero_ps();
    bool subnormal = false;
    if (kb < whole)
      for (int v = 0; v < NP; ++v) subnormal |= w.host_subnormal_blocks[(p0 + v) * kblocks + kb / 32] != 0;
    if (kb >= whole) {  // the K tail, column by column (scaled512::gemv_tile)
      for (int k = kb; k < K; ++k)
        for (int v = 0; v < NV; ++v) {
          const __m512 wk = scaled512::decode_column(
              scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, k / g), k % g);
          for (int r = 0; r < R; ++r) part[r][v] = _mm512_fmadd_ps(_mm512_set1_ps(rows[r].xs[k]), wk, part[r][v]);
        }
    } else if (subnormal) {
      for (int r = 0; r < R; ++r) {
        __m512 one[1][NV];
        for (int v = 0; v < NV; ++v) one[0][v] = part[r][v];
        scaled512::add_blocks<1, NV>(rows[r].xs, panel0, pb, {kb / g}, one);
        for (int v = 0; v < NV; ++v) part[r][v] = one[0][v];
      }
    } else {
      for (int i = 0; i < panels::kBlockK / g; ++i) {
        const int q = kb / g + i;
        __m512i w01[NV], w23[NV];
        for (int v = 0; v < NV; ++v) {  // fp8dot512::dot_blocks' decode
          const __m512i codes = scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q);
          w01[v] = _mm512_and_si512(_mm512_srai_epi16(codes, 4), keep);
          w23[v] = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(codes, 8), 4), keep);
        }
        for (int r = 0; r < R; ++r) {
          const uint32_t* x = rows[r].pairs + 2 * q;
          const __m512bh x01 = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[0]));
          const __m512bh x23 = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[1]));
          for (int v = 0; v < NV; ++v)
            part[r][v] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(part[r][v], (__m512bh)w01[v], x01), (__m512bh)w23[v], x23);
        }
      }
    }
    for (int v = 0; v < NV; ++v) {  // scaled512::gemv_tile's finish
      const __m512 sw = scaled512::block_scales_pair(w, p0 + 2 * v, kb / 32);
      for (int r = 0; r < R; ++r) {
        const __m512 sx = _mm512_set1_ps(rows[r].x_scale[kb / 32]);
        acc[r][v] = scaled512::add_block(acc[r][v], _mm512_mul_ps(part[r][v], part_back), sx, sw);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {  // lanes 0-7 the first panel's rows, 8-15 the second's
      panels::store_rounded(_mm512_castps512_ps256(acc[r][v]), y + r * y_stride + 16 * v, round);
      panels::store_rounded(_mm512_extractf32x8_ps(acc[r][v], 1), y + r * y_stride + 16 * v + 8, round);
    }
}

/// Rows [n_begin, n_end) of y = round(q · Wᵀ) for the T prepared input rows (row r into
/// y + r·y_stride): tiles of 4 panels (2 vectors) in passes of kRowsPerPass rows, a single panel
/// row by row by the AVX2 scaled tile, rows off the panels by the scalar path.
inline void linear_rows(const RowInputs* rows, long T, const MatrixView& w, float* y, long y_stride, OutRound round,
                        int n_begin, int n_end, int prefetch_end) {
  static_assert(panels::kTilePanels == 4, "a tile of 4 panels is 2 vectors of 16 rows");
  const long pb = panel_bytes(w.format, w.cols);
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, prefetch_end, pb);
        if constexpr (NP == 4) {
          for (long r = 0; r < T; r += kRowsPerPass) {
            const RowInputs* pass = rows + r;
            float* yr = y + r * y_stride + n;
            const int ahead_now = r + kRowsPerPass >= T ? ahead : 0;  // the next tile: once, on the last pass
            switch (std::min<long>(kRowsPerPass, T - r)) {
              case 1: tile_rows<1, 2>(pass, w, p0, ahead_now, yr, y_stride, round); break;
              case 2: tile_rows<2, 2>(pass, w, p0, ahead_now, yr, y_stride, round); break;
              case 3: tile_rows<3, 2>(pass, w, p0, ahead_now, yr, y_stride, round); break;
              default: tile_rows<4, 2>(pass, w, p0, ahead_now, yr, y_stride, round); break;
            }
          }
        } else {
          for (long r = 0; r < T; ++r)
            scaled::gemv_tile<NP>(rows[r].xs, rows[r].x_scale, w, p0, r + 1 == T ? ahead : 0, y + r * y_stride + n, round);
        }
      },
      [&](int from, int to) {
        for (long r = 0; r < T; ++r)
          linear_rows_scalar(rows[r].q, rows[r].x_scale, 1, w.cols, w, y + r * y_stride, 0, round, from, to);
      });
}

}  // namespace ds41::host_gemv::gemm_fp8dot512
#endif
