// ds41/backend/host/gemv_scaled512.hpp — the scaled-domain fp8 decode GEMV (host/gemv_scaled.hpp)
// with 512-bit vectors: two panels (16 rows) per vector, bit-identical to MatrixView::dot.
//
// Why: the AVX2 decoder is bound by how many vector operations a core issues (~8 per column pair
// of 8 rows), not by one pipe. A zmm lane does the same per-row work as a ymm lane, so 16 rows
// per vector need about half the operations per weight: one 256-bit load and one
// insert-with-load per two panels' group (the two panels lie pb bytes apart), and the same
// shifts, masks and exact fused multiply-adds as decode_column_pair, now on 16 lanes. Each
// panel is also prefetched a few KiB ahead of its use (panels::kPrefetchAhead), and a tile step
// sums one 32-column block (kBlocksInFlight says why). Where the build has AVX-512 BF16 the block
// sums are dot products instead (host/gemv_fp8dot512.hpp: FmaBlockSums is one policy of the
// tile). Measured (one Zen 5 VM, 2 threads): from L3 this runs ~1.6x the AVX2 decoder at two
// blocks a step (1280 x 5120: 105 -> 67 us); with cold weights it and the dot products read at
// ~36-45 GB/s where the plain stream read gets 43-50 (docs/PERFORMANCE.md).
//
// Lanes 0-7 are panel p's rows, lanes 8-15 panel p + 1's; each lane is its row's own chain in K
// order, exactly the operations of the AVX2 tile (every guard, the 2^60 scalings and the block
// finish acc + (part·s_x)·s_w are the same, lane for lane), so both give the reference's bits.
// Only the fp8 block scale differs per half: p and p + 1 may lie in different 32-row blocks
// when a row slice starts off a 32-row boundary. Compiled when the translation unit has AVX-512
// F, BW, DQ and VL (Skylake-SP and later Intel cores, Zen 4 and later); a single panel left at a
// walk's end takes the AVX2 tile.
#pragma once
#include <cstdint>
#include "gemv_scaled.hpp"
#include "linear_call.hpp"
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__) && defined(__FMA__) && \
    !defined(__CUDA_ARCH__)
#define DS41_HOST_AVX512 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::scaled512 {

using panels::prefetch_ahead;

/// Group q of panels a and b (32 bytes each) as one vector: a's in the low half, b's in the high.
inline __m512i load_group_pair(const uint8_t* panel_a, const uint8_t* panel_b, int q) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(panels::load_group(panel_a, q)), panels::load_group(panel_b, q), 1);
}

/// acc + (part·s_x)·s_w on 16 lanes, each operation rounded on its own (panels::add_block; the
/// block finish of every 512-bit fp8/fp4 tile).
inline __m512 add_block(__m512 acc, __m512 part, __m512 s_x, __m512 s_w) {
  return _mm512_add_ps(acc, _mm512_mul_ps(_mm512_mul_ps(part, s_x), s_w));
}

/// scaled::shifted_pair on 16 lanes (the same bytes, panel_code_byte's order).
inline __m512i shifted_pair(__m512i codes, int j) {
  const __m512i by_2_12 = _mm512_set1_epi16(1 << 12);
  return _mm512_mulhi_epi16(j == 0 ? codes : _mm512_slli_epi16(codes, 8), by_2_12);
}

/// scaled::keep_weight on 16 lanes: w' = w·2^-120 from sign | c[6:0] << 20 in a lane's top half.
inline __m512 keep_weight(__m512i shifted) {
  return _mm512_castsi512_ps(_mm512_and_si512(shifted, _mm512_set1_epi32(static_cast<int>(0x87F00000u))));
}

/// kLiftScale·w' for a column keep_weight decoded: every lane a normal f32 or zero. Why: w' is an
/// f32 subnormal exactly where the code is a subnormal e4m3 (m·2^-9), and on Intel cores a
/// multiply or multiply-add with a subnormal operand is a microcode assist: one Emerald Rapids VM
/// took ~80 ns for each such zmm multiply-add against ~0.2 ns (16 lanes, 8 chains, register-only).
/// A trained weight's ~1 subnormal code in 10^4 puts one in ~1 of 16 vectors' 32-column blocks,
/// and at T = 8 its column feeds 8 multiply-adds: lifting those blocks took the multi-row fp8 tile
/// (multiply-adds, one core, 512 x 2048 warm, the bench's codes: 1 subnormal in 10^4) from
/// 201-206 to 172-174 us at T = 8 (1 in 900: 573 to 287), T = 1 unchanged. A lifted column is multiplied
/// by x'/kLiftScale (lift_input): the product is the same exact number, so the fused multiply-add
/// rounds the same sum to the same bits. Normal lanes get 24 added to their exponent field (w' is
/// at most 448·2^-120); a subnormal lane's magnitude bits m·2^20, read as an integer (exact in
/// f32) times 2^-125, are m·2^-129·2^24; the sign is put back (zeros stay zeros of their sign).
constexpr float kLiftScale = 0x1p24f;
inline __m512 lift_weight(__m512 w) {
  const __m512i bits = _mm512_castps_si512(w), sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i magnitude = _mm512_andnot_si512(sign, bits);
  const __mmask16 normal = _mm512_test_epi32_mask(bits, _mm512_set1_epi32(0x7F800000));
  const __m512 from_subnormal = _mm512_mul_ps(_mm512_cvtepi32_ps(magnitude), _mm512_set1_ps(0x1p-125f));
  const __m512i lifted = _mm512_mask_add_epi32(_mm512_castps_si512(from_subnormal), normal, magnitude, _mm512_set1_epi32(24 << 23));
  return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(lifted, bits, sign, 0xF8));  // lifted | (bits & sign)
}
/// The input a lifted column is multiplied by: x'·2^-24 (scale_input's x' is 0 or 2^3 <= |x'| < 2^122: exact, normal).
inline float lift_input(float xs) { return xs * (1.0f / kLiftScale); }

/// Columns j and j + 1 (j = 0 or 2) of a group pair as w' (scaled::decode_column_pair).
inline void decode_column_pair(__m512i codes, int j, __m512& wj, __m512& wj1) {
  const __m512i shifted = shifted_pair(codes, j);
  wj = keep_weight(shifted);
  wj1 = keep_weight(_mm512_slli_epi32(shifted, 16));
}

/// Column j (0-3) of a group pair as w'.
inline __m512 decode_column(__m512i codes, int j) {
  const __m512i shifted = shifted_pair(codes, j & 2);
  return keep_weight(j & 1 ? _mm512_slli_epi32(shifted, 16) : shifted);
}

/// part[b][v] += Σ over the 8 groups from q0[b] of panels p0 + 2v and p0 + 2v + 1, in K order
/// (scaled::add_blocks with 16 rows a vector). Each group pair is loaded once for its 4 columns.
/// kLift: the columns lifted out of the subnormal range (lift_weight), for blocks holding a
/// subnormal code.
template <int B, int NV, bool kLift = false>
inline void add_blocks(const float* xs, const uint8_t* panel0, long pb, const int (&q0)[B], __m512 (&part)[B][NV]) {
  for (int i = 0; i < panels::kBlockK / 4; ++i) {
    __m512i codes[B][NV];
    DS41_UNROLL for (int b = 0; b < B; ++b)
      DS41_UNROLL for (int v = 0; v < NV; ++v) codes[b][v] = load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q0[b] + i);
    for (int j = 0; j < 4; j += 2) {
      __m512 x0[B], x1[B];
      DS41_UNROLL for (int b = 0; b < B; ++b) {
        const float x0s = xs[4 * (q0[b] + i) + j], x1s = xs[4 * (q0[b] + i) + j + 1];
        x0[b] = _mm512_set1_ps(kLift ? lift_input(x0s) : x0s);
        x1[b] = _mm512_set1_ps(kLift ? lift_input(x1s) : x1s);
      }
      DS41_UNROLL for (int v = 0; v < NV; ++v)
        DS41_UNROLL for (int b = 0; b < B; ++b) {
          __m512 wj, wj1;
          decode_column_pair(codes[b][v], j, wj, wj1);
          if constexpr (kLift) {
            wj = lift_weight(wj);
            wj1 = lift_weight(wj1);
          }
          part[b][v] = _mm512_fmadd_ps(x1[b], wj1, _mm512_fmadd_ps(x0[b], wj, part[b][v]));
        }
    }
  }
}

/// The fp8 block scales of panels p and p + 1 for the 32-column block kbi, one per lane.
inline __m512 block_scales_pair(const MatrixView& w, long p, int kbi) {
  return _mm512_insertf32x8(_mm512_set1_ps(*panels::fp8_block_scale_at(w, p, kbi)),
                            _mm256_broadcast_ss(panels::fp8_block_scale_at(w, p + 1, kbi)), 1);
}

/// 32-column blocks a tile step sums side by side. One: the step then reads each of the tile's 4
/// panels straight on, where two blocks at once interleave two places 256 bytes apart per panel,
/// and with cold weights that read slower than the arithmetic saved. Measured (one Zen 5 VM, 2
/// threads, 3 interleaved rounds, GB/s against a 43-49 GB/s stream read; 1 / 2 blocks), fp8 by
/// dot products: 1280x5120 41-43 / 35-36, 5120x8192 43-45 / 34-37, 32768x1280 38-39 / 34,
/// 5120x2304 38-40 / 35-36; 4 blocks read at ~25. From L3 (one copy, one thread) two blocks are
/// the faster, 1280x5120 in 105 against 126 us: the chains of one block leave the FMA
/// latency exposed, but a decode GEMV's weights come from DRAM.
constexpr int kBlocksInFlight = 1;

/// Whether any of blocks q0[b] / 8 of stored panels [p0, p0 + np) holds a subnormal code
/// (MatrixView::host_subnormal_blocks, kblocks a panel; null: none known, taken as none).
template <int B>
inline bool any_subnormal(const uint8_t* subnormal, long kblocks, long p0, int np, const int (&q0)[B]) {
  if (!subnormal) return false;
  bool any = false;
  for (int v = 0; v < np; ++v)
    DS41_UNROLL for (int b = 0; b < B; ++b) any |= subnormal[(p0 + v) * kblocks + q0[b] / 8] != 0;
  return any;
}

/// The block sums of every block by the fused multiply-adds above, from x' = x·2^60 (xs); a tile
/// step whose blocks hold a subnormal code (host_subnormal_blocks) with its columns lifted.
struct FmaBlockSums {
  const float* xs;
  const uint8_t* subnormal = nullptr;  // MatrixView::host_subnormal_blocks (null: every step unlifted)
  long kblocks = 0;                    // 32-column blocks per panel
  /// part[b][v] += the sums of the 8 groups from q0[b] of panels panel0 + 2v, + 2v + 1 (stored
  /// panel p0 is panel0).
  template <int B, int NV>
  void add(const uint8_t* panel0, long pb, long p0, const int (&q0)[B], __m512 (&part)[B][NV]) const {
    if (any_subnormal(subnormal, kblocks, p0, 2 * NV, q0)) return add_blocks<B, NV, true>(xs, panel0, pb, q0, part);
    add_blocks<B, NV>(xs, panel0, pb, q0, part);
  }
};

/// Decode GEMV of panels [p0, p0 + 2·NV) into y[0 .. 16·NV): scaled::gemv_tile, 16 rows a vector,
/// the whole 32-column blocks summed by `sums` (FmaBlockSums; fp8dot512::DotBlockSums), the K
/// tail by multiply-adds from sums.xs.
template <int NV, class Sums>
void gemv_tile(const Sums& sums, const float* x_scale, const MatrixView& w, long p0, int ahead, float* y,
               OutRound round) {
  constexpr int g = 4;  // K positions per 32-byte panel group
  constexpr int NP = 2 * NV;
  const float* xs = sums.xs;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const __m512 part_back = _mm512_set1_ps(scaled::kPartScale);
  __m512 acc[NV];
  DS41_UNROLL for (int v = 0; v < NV; ++v) acc[v] = _mm512_setzero_ps();
  const auto finish_block = [&](int kb, const __m512(&part)[NV]) {
    const __m512 sx = _mm512_set1_ps(x_scale[kb / 32]);
    DS41_UNROLL for (int v = 0; v < NV; ++v) {
      const __m512 sw = block_scales_pair(w, p0 + 2 * v, kb / 32);
      acc[v] = add_block(acc[v], _mm512_mul_ps(part[v], part_back), sx, sw);
    }
  };
  const int whole = K / panels::kBlockK * panels::kBlockK;  // blocks below `whole` lie inside K
  int kb = 0;
  for (; kb + kBlocksInFlight * panels::kBlockK <= whole; kb += kBlocksInFlight * panels::kBlockK) {
    constexpr int B = kBlocksInFlight, span = B * panels::kBlockK / g * 32;  // bytes of a panel's B blocks
    __m512 part[B][NV];
    int q0[B];
    DS41_UNROLL for (int b = 0; b < B; ++b) {
      q0[b] = (kb + b * panels::kBlockK) / g;
      DS41_UNROLL for (int v = 0; v < NV; ++v) part[b][v] = _mm512_setzero_ps();
    }
    for (int v = 0; v < ahead; ++v)  // the next tile's groups of these blocks
      panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / g), span);
    DS41_UNROLL for (int v = 0; v < NP; ++v)  // these blocks' groups, kPrefetchAhead on
      prefetch_ahead(panels::group_at(panel0 + v * pb, kb / g), span);
    sums.template add<B, NV>(panel0, pb, p0, q0, part);
    DS41_UNROLL for (int b = 0; b < B; ++b) finish_block(kb + b * panels::kBlockK, part[b]);
  }
  for (; kb < K; kb += panels::kBlockK) {
    __m512 part[1][NV];
    DS41_UNROLL for (int v = 0; v < NV; ++v) part[0][v] = _mm512_setzero_ps();
    if (kb < whole) {
      sums.template add<1, NV>(panel0, pb, p0, {kb / g}, part);
    } else {  // the K tail, column by column
      for (int k = kb; k < K; ++k) {
        const __m512 xk = _mm512_set1_ps(xs[k]);
        DS41_UNROLL for (int v = 0; v < NV; ++v) {
          const __m512i codes = load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, k / g);
          part[0][v] = _mm512_fmadd_ps(xk, decode_column(codes, k % g), part[0][v]);
        }
      }
    }
    finish_block(kb, part[0]);
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v) {  // lanes 0-7 the first panel's rows, 8-15 the second's
    panels::store_rounded(_mm512_castps512_ps256(acc[v]), y + 16 * v, round);
    panels::store_rounded(_mm512_extractf32x8_ps(acc[v], 1), y + 16 * v + 8, round);
  }
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for one input row (scaled::gemv_rows): tiles of
/// 4 panels as 2 vectors summed by `sums`, a single panel by the AVX2 tile, rows outside whole
/// panels by the scalar panel dot.
template <class Sums = FmaBlockSums>
inline void gemv_rows(const float* q, const float* x_scale, const Sums& sums, const MatrixView& w, float* y,
                      OutRound round, int n_begin, int n_end, int prefetch_end) {
  static_assert(panels::kTilePanels == 4, "a tile of 4 panels is 2 vectors of 16 rows");
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, prefetch_end, panel_bytes(w.format, w.cols));
        if constexpr (NP == 4) gemv_tile<2>(sums, x_scale, w, p0, ahead, y + n, round);
        else scaled::gemv_tile<NP>(sums.xs, x_scale, w, p0, ahead, y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

/// The descriptor (host/linear_call.hpp): the fp8 scaled decode GEMV, 16 rows a vector, block sums by
/// multiply-adds.
struct FmaDecodeGemv {
  static constexpr const char* kName = "fp8 scaled decode GEMV, multiply-adds (AVX-512)";
  using Prepared = scaled::DecodeGemv::Prepared;
  static bool usable(const LinearCall& c) { return c.T == 1 && scaled::usable(c.w) && c.isa != VectorIsa::kAvx2; }
  static bool prepare(const LinearCall& c, Prepared& p) { return scaled::DecodeGemv::prepare(c, p); }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    scaled512::gemv_rows(c.x, c.xs, FmaBlockSums{p.scaled_x, c.w.host_subnormal_blocks, (c.w.cols + 31) / 32}, c.w, c.y, c.round,
              n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::scaled512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::scaled512 {
struct FmaDecodeGemv : NotBuilt {};
}  // namespace ds41::host_gemv::scaled512
#endif
