// ds41/backend/host/gemv_scaled.hpp — the host decode GEMV (one input row) of fp8 panels in a
// scaled domain, bit-identical to MatrixView::dot.
//
// Why: the table decoder (host/gemv_panels.hpp: Fp8Columns) spends ~13 shuffle-unit operations
// per 32 codes on byte-table lookups and widening unpacks, and on this CPU family the shuffle
// units, not memory, bound the GEMV (llvm-mca, Zen 3: ~34 cycles per 128 weights). Here a
// pair of columns of 8 rows costs 4 or 5 integer operations, one of which loads the group, and
// two fused multiply-adds (decode_column_pair; the FMA is exact here, see below), spread over all
// four vector pipes, with two 32-column blocks in flight so that 8 independent sums hide the FMA
// latency. Measured, one core, in cache, through host_gemv::linear: table decoder 10.7, scaled
// with multiply + add 12, with a shuffle per pair (from an earlier, column-major panel order)
// ~16.5, this ~18.4 Gweights/s. The loop is bound by how many vector operations this core
// issues per cycle (~4 measured), not by any one pipe: every operation taken out of a pair shows.
// The 2^-120 is paid back without a multiply per weight: x is pre-scaled (x' = x·2^60), so
// x'·w' = x·w·2^-60, and each block's partial sum is scaled back by 2^60 (part'·2^60 = part,
// exactly) before the reference's (part·s_x)·s_w. Every rounding is the reference's, because
// scaling by a power of two commutes with rounding while nothing leaves the normal range: with
// 2^-57 <= |x| < 2^62 (or x == 0) each nonzero product has |x·w·2^-60| >= 2^-126 (|w| >= 2^-9)
// and x' is finite; a partial sum that lands below 2^-126 is the sum of two multiples of 2^-149
// and so exact in both domains. The x of an fp8 Linear are act_quant's e4m3 values (0 or
// 2^-9 <= |q| <= 448), always inside that range, and a product of two e4m3 values has at most
// 4 + 4 significant bits: being normal, x'·w' is exact, so one fused multiply-add rounds once,
// exactly where the reference's add does. Everything else takes the table decoder: an x
// outside the range, a thread running with FTZ or DAZ set (they would flush the scaled domain's
// exact subnormals), and matrices pack() did not mark `host_scaled_decode` (codes often
// subnormal — a multiply with a subnormal operand is slow on this CPU family, and trained weights
// have ~1 in 10^4 such codes, uniform random bytes 1 in 18).
// fp4 does not use this scheme: it needs a byte lookup per code first (e2m1's 0.5 would
// otherwise be an f32 subnormal) and measured 12.4 against the table decoder's 14.3 Gweights/s
// (one core, in cache); fp4 decode GEMVs sum in integers instead (host/gemv_fp4int.hpp).
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <algorithm>
#include <cmath>
#include <cstdint>
#include "../../core/linear_math.hpp"
#include "buffer.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#include "gemv_panels.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::scaled {

constexpr float kInputScale = 0x1p60f;  // x' = x·2^60 (w' = w·2^-120)
constexpr float kPartScale = 0x1p60f;   // part = part'·2^60

inline bool x_in_exact_range(float x) {
  const float a = std::fabs(x);
  return a == 0.0f || (a >= 0x1p-57f && a < 0x1p62f);  // false for NaN and inf
}
/// FTZ or DAZ set on this thread would flush the scaled domain's subnormals; the reference runs without.
inline bool flush_modes_off() { return (_mm_getcsr() & 0x8040u) == 0; }

/// xs = x·2^60 (K floats) if every x is in the exact range; false (xs unusable) if not.
inline bool scale_input(const float* x, int K, float* xs) {
  const __m256 factor = _mm256_set1_ps(kInputScale), abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 lo = _mm256_set1_ps(0x1p-57f), hi = _mm256_set1_ps(0x1p62f), zero = _mm256_setzero_ps();
  __m256 ok_all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    const __m256 v = _mm256_loadu_ps(x + k), a = _mm256_and_ps(v, abs_mask);
    // a == 0 || (a >= 2^-57 && a < 2^62); ordered compares are false for NaN
    const __m256 ok = _mm256_or_ps(_mm256_cmp_ps(a, zero, _CMP_EQ_OQ),
                                   _mm256_and_ps(_mm256_cmp_ps(a, lo, _CMP_GE_OQ), _mm256_cmp_ps(a, hi, _CMP_LT_OQ)));
    ok_all = _mm256_and_ps(ok_all, ok);
    _mm256_storeu_ps(xs + k, _mm256_mul_ps(v, factor));
  }
  if (_mm256_movemask_ps(ok_all) != 0xFF) return false;
  for (; k < K; ++k) {
    if (!x_in_exact_range(x[k])) return false;
    xs[k] = x[k] * kInputScale;
  }
  return true;
}

/// Whether pack() may mark a matrix for the scaled decoder: fp8 with at most 1 code in 512
/// subnormal (a speed choice; the result is exact either way).
inline bool decode_suits(WeightFormat f, const uint8_t* codes, long n_codes) {
  if (f != WeightFormat::kFp8Block32) return false;
  long subnormal = 0;
  for (long i = 0; i < n_codes; ++i) subnormal += e4m3_code_is_subnormal(codes[i]);
  return subnormal * 512 <= n_codes;
}

/// Codes of a 32-byte group `codes` (row d's 4 codes in lane d, panel_code_byte) shifted for
/// keep_weight: vpmulhw by 2^12 (an integer-multiply unit, which folds the group's load) shifts
/// each 16-bit half right by 4 with its sign copied, so the half's high byte c becomes sign |
/// c[6:0] << 4 below three more sign copies. Columns 0 and 1 are the halves' high bytes
/// (j == 0); for columns 2 and 3 (j == 2) a 16-bit shift moves the low bytes up first.
static_assert(panel_code_byte(0, 0) == 3 && panel_code_byte(0, 1) == 1 && panel_code_byte(0, 2) == 2 &&
                  panel_code_byte(0, 3) == 0,
              "shifted_pair takes columns 0-3 from bytes 3, 1, 2, 0 of a row's lane");
inline __m256i shifted_pair(__m256i codes, int j) {
  const __m256i by_2_12 = _mm256_set1_epi16(1 << 12);
  return _mm256_mulhi_epi16(j == 0 ? codes : _mm256_slli_epi16(codes, 8), by_2_12);
}

/// The float w' = w·2^-120 from a lane whose top half holds a shifted code: sign | c[6:0] << 20.
inline __m256 keep_weight(__m256i shifted) {
  return _mm256_castsi256_ps(_mm256_and_si256(shifted, _mm256_set1_epi32(static_cast<int>(0x87F00000u))));
}

/// Columns j and j + 1 (j = 0 or 2) of a group as w': the lanes' high halves give column j,
/// their low halves, moved up, column j + 1 (5 integer operations per 2 columns with no shuffle,
/// or 4 for j == 0).
inline void decode_column_pair(__m256i codes, int j, __m256& wj, __m256& wj1) {
  const __m256i shifted = shifted_pair(codes, j);
  wj = keep_weight(shifted);
  wj1 = keep_weight(_mm256_slli_epi32(shifted, 16));
}

/// Column j (0-3) of a group as w'.
inline __m256 decode_column(__m256i codes, int j) {
  const __m256i shifted = shifted_pair(codes, j & 2);
  return keep_weight(j & 1 ? _mm256_slli_epi32(shifted, 16) : shifted);
}

/// part[b][v] += Σ over the 8 groups from q0[b] (all 4 columns inside K) of panel p0 + v, in K
/// order, for B independent blocks at once. One fused multiply-add is the reference's multiply
/// then add, because x'·w' is exact (see top). Two blocks in flight give 2·NP accumulation chains
/// (a row's sum is a chain of dependent adds, and 4 chains of 4-cycle FMAs leave the pipes idle
/// from cache); gemv_tile takes one, which reads cold weights faster.
template <int B, int NP>
inline void add_blocks(const float* xs, const uint8_t* panel0, long pb, const int (&q0)[B], __m256 (&part)[B][NP]) {
  for (int i = 0; i < panels::kBlockK / 4; ++i)
    for (int j = 0; j < 4; j += 2) {
      __m256 x0[B], x1[B];
      DS41_UNROLL for (int b = 0; b < B; ++b) {
        x0[b] = _mm256_broadcast_ss(xs + 4 * (q0[b] + i) + j);
        x1[b] = _mm256_broadcast_ss(xs + 4 * (q0[b] + i) + j + 1);
      }
      DS41_UNROLL for (int v = 0; v < NP; ++v)
        DS41_UNROLL for (int b = 0; b < B; ++b) {
          __m256 wj, wj1;
          decode_column_pair(panels::load_group(panel0 + v * pb, q0[b] + i), j, wj, wj1);
          part[b][v] = _mm256_fmadd_ps(x1[b], wj1, _mm256_fmadd_ps(x0[b], wj, part[b][v]));
        }
    }
}

/// Decode GEMV of panels [p0, p0 + NP) from the scaled input xs (act_quant's q·2^60) and the
/// input's block scales x_scale into y[0 .. 8·NP), summing each row in the reference's order
/// (dot_fp8_block32: per-32 partial sums in K order, then acc + (part·s_x)·s_w). Padding past K
/// is never added (a +0 could turn -0 into +0). The `ahead` panels after the tile are prefetched.
template <int NP>
void gemv_tile(const float* xs, const float* x_scale, const MatrixView& w, long p0, int ahead, float* y,
               OutRound round) {
  constexpr int g = 4;  // K positions per 32-byte panel group
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  const __m256 part_back = _mm256_set1_ps(kPartScale);
  __m256 acc[NP];
  DS41_UNROLL for (int v = 0; v < NP; ++v) acc[v] = _mm256_setzero_ps();
  const auto finish_block = [&](int kb, const __m256(&part)[NP]) {
    const __m256 sx = _mm256_broadcast_ss(x_scale + kb / 32);
    DS41_UNROLL for (int v = 0; v < NP; ++v)
      acc[v] = panels::add_block(acc[v], _mm256_mul_ps(part[v], part_back), sx, panels::block_scales(w, p0 + v, kb / 32));
  };
  const int whole = K / panels::kBlockK * panels::kBlockK;  // blocks below `whole` lie inside K
  // One block a step, each panel read straight on, the next kPrefetchAhead bytes of each
  // prefetched into L1 and the next tile's block into L2: cold (interleaved harness, 3 rounds, 2
  // threads, stream 38-46 GB/s; 1280 x 5120 / 32768 x 1280 / 5120 x 8192 / 5120 x 2304) 36.6 /
  // 41.6 / 40.5 / 35.9 GB/s (medians) where two blocks a step (two places 256 bytes apart per
  // panel, more chains in flight) read 31.0 / 31.0 / 37.9 / 27.1, and one block without the L1
  // prefetch 35.6 / 41.7 / 41.0 / 29.1. The same trade as scaled512::kBlocksInFlight.
  for (int kb = 0; kb < K; kb += panels::kBlockK) {
    __m256 part[1][NP];
    DS41_UNROLL for (int v = 0; v < NP; ++v) part[0][v] = _mm256_setzero_ps();
    if (kb < whole) {
      DS41_UNROLL for (int v = 0; v < NP; ++v) panels::prefetch_ahead(panels::group_at(panel0 + v * pb, kb / g), panels::kBlockK / g * 32);
      for (int v = 0; v < ahead; ++v)  // the next tile's groups of this block
        panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / g), panels::kBlockK / g * 32);
      add_blocks<1, NP>(xs, panel0, pb, {kb / g}, part);
    } else {  // the K tail, column by column
      for (int k = kb; k < K; ++k) {
        const __m256 xk = _mm256_broadcast_ss(xs + k);
        DS41_UNROLL for (int v = 0; v < NP; ++v)
          part[0][v] = _mm256_fmadd_ps(xk, decode_column(panels::load_group(panel0 + v * pb, k / g), k % g), part[0][v]);
      }
    }
    finish_block(kb, part[0]);
  }
  DS41_UNROLL for (int v = 0; v < NP; ++v) panels::store_rounded(acc[v], y + 8 * v, round);
}

/// Whether this call may take the scaled decoder (besides a scaled input having been prepared).
inline bool usable(const MatrixView& w) {
  return w.format == WeightFormat::kFp8Block32 && w.layout == WeightLayout::kPanels8 && w.host_scaled_decode &&
         flush_modes_off();
}

/// Rows [n_begin, n_end) of y = round(x · Wᵀ) for one input row: act_quant's q and scales
/// x_scale (for rows outside whole panels, by the scalar panel dot) and xs = q·2^60 from
/// scale_input. Rows up to prefetch_end (>= n_end) are prefetched as if they were this walk's
/// (panels_to_prefetch): the caller expects this thread to take them next.
inline void gemv_rows(const float* q, const float* x_scale, const float* xs, const MatrixView& w, float* y,
                      OutRound round, int n_begin, int n_end, int prefetch_end) {
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        gemv_tile<NP>(xs, x_scale, w, p0, panels::panels_to_prefetch(n, NP, prefetch_end, panel_bytes(w.format, w.cols)), y + n, round);
      },
      [&](int from, int to) { linear_rows_scalar(q, x_scale, 1, w.cols, w, y, 0, round, from, to); });
}

/// scale_input's x' of the call's one input row (its q values) in this thread's workspace, or null
/// where the row leaves the range the scaled domain is exact in. The three scaled decode GEMVs'
/// prepare (a later one recomputes it only where an earlier one's own input form failed).
inline const float* prepare_scaled_input(const LinearCall& c) {
  thread_local HostBuffer<float> scaled_x;
  grow(scaled_x, c.w.cols);
  return scale_input(c.x, c.w.cols, scaled_x.data()) ? scaled_x.data() : nullptr;
}

/// The descriptor (host/linear_call.hpp): the fp8 decode GEMV in the scaled domain, 8 rows a vector.
struct DecodeGemv {
  static constexpr const char* kName = "fp8 scaled decode GEMV (AVX2)";
  struct Prepared {
    const float* scaled_x = nullptr;
  };
  static bool usable(const LinearCall& c) { return c.T == 1 && scaled::usable(c.w); }
  static bool prepare(const LinearCall& c, Prepared& p) { return (p.scaled_x = prepare_scaled_input(c)) != nullptr; }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    scaled::gemv_rows(c.x, c.xs, p.scaled_x, c.w, c.y, c.round, n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::scaled
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::scaled {
struct DecodeGemv : NotBuilt {};
}  // namespace ds41::host_gemv::scaled
#endif
