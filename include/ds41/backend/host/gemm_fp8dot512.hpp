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
// decoded once for all the pass's rows, each row's input pairs a broadcast operand; or, on a core
// whose `vdpbf16ps` is slow (Intel's Sapphire/Emerald Rapids), scaled512::add_blocks'
// multiply-adds, each column decoded once for the pass (BlockSums, dot_products_pay). Same bits as
// the one-row path for the same reasons (see host/gemv_fp8dot512.hpp): per row the chain is
// scaled512's multiply-add for multiply-add in K order; a vector (two panels) whose block holds a
// subnormal code (`vdpbf16ps` takes a subnormal bf16 as zero) has its columns lifted out of the
// subnormal range and its rows' inputs scaled down to match (lifted_dot_blocks, by dot products;
// fma_blocks, by multiply-adds: a multiply with a subnormal operand is a microcode assist on
// Intel cores), while the tile's other vector keeps the plain dot products; the K tail is summed
// column by column; each block's finish is scaled512::gemv_tile's. Rows whose input
// the dot products cannot take (scale_input or fp8dot512::prepare declines it) never reach here:
// gemv.hpp's linear() then takes the float tile for the whole call.
// Compiled where host/gemv_fp8dot512.hpp is (AVX-512 F/BW/DQ/VL and BF16).
#pragma once
#include "../../core/macros.hpp"
#include "broadcast512.hpp"
#include "gemv_fp8dot512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512_BF16)
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <immintrin.h>
#include <vector>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::gemm_fp8dot512 {

/// Input rows a pass takes: with two vectors of 16 output rows (a tile of 4 panels), 8 rows keep
/// 16 dot-product chains in registers (each lane's chain is a K-order sequence, so the chains of
/// more rows and panels are what hide `vdpbf16ps`' latency) and decode each group pair once for
/// all 8; the running sums, touched once per block, stay in memory. Measured against session
/// 16's tile (4 rows a pass, a subnormal block sending the whole tile to one-row multiply-adds),
/// the two binaries alternating twice (bench_kernels BM_BatchLinear, T = 8, cold, 2 threads, one
/// Xeon VM, Emerald Rapids): 1280x5120 1389-1710 -> 1233-1652 us, 32768x1280 8521-8897 ->
/// 7458-7687, 5120x8192 8728-8757 -> 7063-8562, 5120x2304 2281-3218 -> 2004-2120. On that CPU
/// `vdpbf16ps` issues once every ~2 cycles (a zmm multiply-add twice a cycle) and the dot
/// products run near that rate: there the multiply-adds are the faster sums (BlockSums).
constexpr int kRowsPerPass = 8;

/// Passes of at least this many rows take a 4-panel tile's two vectors one after the other by dot
/// products (tile_rows<R, 1, true>), each with its running sums in registers: with both vectors
/// at once those live in memory, a load and a store per row, vector and block, and the block sums
/// are zeroed there too (GCC kept them in memory, the per-vector branch takes their address).
/// Fewer rows keep both vectors: 4 rows of one vector are 4 chains, too few to hide the
/// `vdpbf16ps` latency. Measured on one Zen 4 core (2 vCPUs of an EPYC VM), fp8 T = 8, weights
/// from L2/L3, best of 15 x 200 calls, alternating four times: 1024 x 4096 470-483 -> 417-429 us,
/// 512 x 2048 122-166 -> 110-136; at T = 4 one vector took 1.0-1.17x the time of two.
constexpr int kOneVectorRows = 8;

/// How a pass sums its whole blocks: by dot products (two K-order multiply-adds of a lane per
/// `vdpbf16ps`, a subnormal code's vector lifted), or by the scaled multiply-adds alone
/// (one per `vfmadd`, scaled512::add_blocks' chain, each column decoded once for the pass's rows).
/// Same bits either way: per lane both are the same chain of exact products and roundings.
/// Which is faster depends on the core (dot_products_pay); kTuned asks it, the others force a
/// path (tests run both on any CPU).
enum class BlockSums { kTuned, kDotProducts, kMultiplyAdds };
inline std::atomic<BlockSums>& block_sums_override() {
  static std::atomic<BlockSums> mode{BlockSums::kTuned};
  return mode;
}

/// Whether this core does more multiply-adds a second as `vdpbf16ps` (two a lane) than as zmm
/// `vfmadd` (one): measured once, register-only loops of 16 independent chains, best of 7
/// alternating rounds of 7-30 us. A core that issues `vdpbf16ps` as often as `vfmadd` does
/// twice the work with it; Sapphire/Emerald Rapids issue it once every ~2 cycles against two
/// multiply-adds a cycle (one Xeon VM: 1.2 against 5.1 G instructions/s a core, the loops here
/// 25 against 7 us), and there the multi-row tile by multiply-adds measured mostly 0.7-0.9x the
/// time of the dot products (bench_kernels BM_BatchLinear, T = 4-16: 0.5-1.08 over 24 pairs). The dot products keep the call
/// unless the multiply-adds are 1.5x faster: near a tie the tile's other work decides, and the
/// dot products are what session 16 measured on the Zen 5 VM (0.56-0.96 of its mul+add peak).
inline bool dot_products_pay() {
  static const bool pay = [] {
    using clock = std::chrono::steady_clock;
    auto seconds = [](auto&& loop) {
      const auto t0 = clock::now();
      loop();
      return std::chrono::duration<double>(clock::now() - t0).count();
    };
    constexpr int kIters = 2048, kChains = 16;
    volatile float sink = 0;
    auto dots = [&] {
      __m512 acc[kChains];
      for (auto& a : acc) a = _mm512_setzero_ps();
      __m512bh a = (__m512bh)_mm512_set1_epi32(0x3F803F80), b = (__m512bh)_mm512_set1_epi32(0x3C003C00);
      for (int i = 0; i < kIters; ++i) {
#pragma GCC unroll 16  // the chains in registers (a loop over the array kept them in memory)
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_dpbf16_ps(acc[k], a, b);
        asm volatile("" : "+v"(a), "+v"(b));
      }
      for (auto& c : acc) sink = sink + _mm512_reduce_add_ps(c);
    };
    auto fmas = [&] {
      __m512 acc[kChains];
      for (auto& a : acc) a = _mm512_setzero_ps();
      __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0x1p-8f);
      for (int i = 0; i < kIters; ++i) {
#pragma GCC unroll 16
        for (int k = 0; k < kChains; ++k) acc[k] = _mm512_fmadd_ps(a, b, acc[k]);
        asm volatile("" : "+v"(a), "+v"(b));
      }
      for (auto& c : acc) sink = sink + _mm512_reduce_add_ps(c);
    };
    double dot_s = 1e30, fma_s = 1e30;
    DS41_UNROLL for (int round = 0; round < 7; ++round) {
      dot_s = std::min(dot_s, seconds(dots));
      fma_s = std::min(fma_s, seconds(fmas));
    }
    // multiply-adds a second: 2 per dot-product lane, 1 per fma lane (same instruction count).
    // (Unoptimised builds may not keep the chains in registers; the choice then leans to the dot
    // products, and either gives the same bits.)
    return fma_s * 1.5 > dot_s / 2;
  }();
  return pay;
}

/// The block sums linear_rows takes now: the override, else what dot_products_pay() says.
inline bool use_dot_products() {
  const BlockSums m = block_sums_override().load(std::memory_order_relaxed);
  return m == BlockSums::kTuned ? dot_products_pay() : m == BlockSums::kDotProducts;
}

/// One input row as the tile reads it: act_quant's q and scales, x' = q·2^60 (scaled::scale_input),
/// its bf16 pairs (fp8dot512::prepare), those pairs lifted, x'·2^-24 (lift_pairs), and its block
/// scales times 2^60 (prepare_part_scales).
struct RowInputs {
  const float* q = nullptr;
  const float* x_scale = nullptr;
  const float* xs = nullptr;
  const uint32_t* pairs = nullptr;
  const uint32_t* lifted_pairs = nullptr;
  const float* part_scales = nullptr;
};

/// Values of one row's prepared data at K columns: x' (K), pairs (fp8dot512::prepare's).
inline long scaled_per_row(int K) { return K; }
inline long pairs_per_row(int K) { return K / 32 * 16 + 1; }

/// x' and its pairs for one row into caller-owned storage; false where the dot products cannot
/// take it (a value outside the scaled domain's range or not a bf16 there).
inline bool prepare_row(const float* q, int K, float* xs, uint32_t* pairs) {
  return scaled::scale_input(q, K, xs) && fp8dot512::prepare_into(xs, K, pairs);
}

/// The whole blocks' pairs of a K-column row (prepare_row's, K / 32 · 16 words) as x'·2^-24,
/// the input of lifted_dot_blocks: 24 off each nonzero half's exponent. Exact and normal:
/// prepare_row takes only 0 and 2^10 <= |x'|.
inline void lift_pairs(const uint32_t* pairs, int K, uint32_t* lifted) {
  const __m512i magnitude = _mm512_set1_epi16(0x7FFF), down = _mm512_set1_epi16(24 << 7);
  for (int i = 0; i < K / 32 * 16; i += 16) {  // a block's 16 words a step
    const __m512i p = _mm512_loadu_si512(pairs + i);
    _mm512_storeu_si512(lifted + i, _mm512_mask_sub_epi16(p, _mm512_test_epi16_mask(p, magnitude), p, down));
  }
}

/// s_x·2^60 for each of a row's kblocks block scales s_x, so that a block's finish takes one
/// multiply fewer: (part'·2^60)·s_x, the reference's part·s_x, is part'·(2^60·s_x) in one
/// rounding of the same product wherever 2^60·s_x is exact, i.e. does not overflow (part'·2^60
/// is exact: part' is never subnormal, see host/gemv_fp8dot512.hpp; a NaN or infinite s_x gives
/// the same NaN or infinity either way). False where some s_x reaches 2^68 (act_quant's scales
/// of inputs from ~2^76 up): the call then takes the float tile. Measured on one Zen 4 core,
/// weights from L2/L3, best of 80 x 40 calls, alternating 4 times: T = 8 512 x 2048 108.7-109.1
/// -> 105.2-105.7 us, 1024 x 4096 418-422 -> 397-411; T = 4 1024 x 4096 216-219 -> 206-211.
inline bool prepare_part_scales(const float* x_scale, long kblocks, float* part_scales) {
  bool ok = true;
  for (long b = 0; b < kblocks; ++b) {
    part_scales[b] = x_scale[b] * scaled::kPartScale;
    ok &= !(std::isinf(part_scales[b]) && std::isfinite(x_scale[b]));
  }
  return ok;
}

/// Whether a call of T > 1 rows on w may take this tile (besides every row's prepare_row).
inline bool usable(const MatrixView& w) { return scaled::usable(w) && fp8dot512::usable(w); }

/// fp8dot512::dot_blocks' weight decode of one group pair: columns 0-1 (w01) and 2-3 (w23) as
/// bf16 pairs.
inline void decode_pairs(__m512i codes, __m512i& w01, __m512i& w23) {
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0x87F0));  // sign | c[6:0] << 4
  w01 = _mm512_and_si512(_mm512_srai_epi16(codes, 4), keep);
  w23 = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(codes, 8), 4), keep);
}

/// part[v][r] += row r's sum over the 8 groups from q0 of vector v0 + v's two panels (panels
/// p0 + 2(v0 + v) and the next, from panel0, pb bytes apart), v < NV, by dot products (no
/// subnormal code in them): each group pair decoded once for all R rows, the NV vectors' chains
/// interleaved (more of them in flight). Always inlined: the chains must stay in registers.
template <int R, int NV>
DS41_ALWAYS_INLINE void dot_blocks(const RowInputs* rows, const uint8_t* panel0, long pb, int v0, int q0, __m512 (*part)[R]) {
  for (int q = q0; q < q0 + panels::kBlockK / 4; ++q) {
    __m512i w01[NV], w23[NV];
    DS41_UNROLL for (int v = 0; v < NV; ++v)
      decode_pairs(scaled512::load_group_pair(panel0 + 2 * (v0 + v) * pb, panel0 + (2 * (v0 + v) + 1) * pb, q), w01[v],
                   w23[v]);
    DS41_UNROLL for (int r = 0; r < R; ++r) {
      const uint32_t* x = rows[r].pairs + 2 * q;
      DS41_UNROLL for (int v = 0; v < NV; ++v) part[v][r] = dpbf16_broadcast(dpbf16_broadcast(part[v][r], w01[v], x), w23[v], x + 1);
    }
  }
}

/// A bf16 pair from two decoded columns whose values are bf16 (low 16 bits zero): hi's in the
/// lane's high half, lo's in its low half (decode_pairs' layout).
inline __m512i pair_of(__m512 hi, __m512 lo) {
  return _mm512_or_si512(_mm512_castps_si512(hi), _mm512_srli_epi32(_mm512_castps_si512(lo), 16));
}

/// dot_blocks<R, 1> of vector v0, whose block holds a subnormal code (a subnormal bf16 is zero
/// to `vdpbf16ps`): every column decoded (scaled512::decode_column_pair) and lifted out of the
/// subnormal range (scaled512::lift_weight: w'·2^24, normal, at most 4 significant bits, so a
/// bf16), repacked as decode_pairs' pairs, each row's input its lifted pairs (x'·2^-24): every
/// product the same exact x'·w', the same chain, the same bits. Measured against
/// fma_blocks<R, 1, true> (the multiply-adds this replaced: one a weight, the input scaled
/// row by row), fp8 T = 8, one Zen 4 core, weights from L2/L3 (1-8 MB, ~5% of vector-blocks
/// holding a subnormal code): 0.85-0.95x the time of the whole tile.
template <int R>
DS41_ALWAYS_INLINE void lifted_dot_blocks(const RowInputs* rows, const uint8_t* panel0, long pb, int v0, int q0,
                                          __m512 (*part)[R]) {
  for (int q = q0; q < q0 + panels::kBlockK / 4; ++q) {
    const __m512i codes = scaled512::load_group_pair(panel0 + 2 * v0 * pb, panel0 + (2 * v0 + 1) * pb, q);
    __m512 c[4];
    scaled512::decode_column_pair(codes, 0, c[0], c[1]);
    scaled512::decode_column_pair(codes, 2, c[2], c[3]);
    for (auto& column : c) column = scaled512::lift_weight(column);
    const __m512i w01 = pair_of(c[0], c[1]), w23 = pair_of(c[2], c[3]);
    DS41_UNROLL for (int r = 0; r < R; ++r) {
      const uint32_t* x = rows[r].lifted_pairs + 2 * q;
      part[0][r] = dpbf16_broadcast(dpbf16_broadcast(part[0][r], w01, x), w23, x + 1);
    }
  }
}

/// dot_blocks' sums by scaled512::add_blocks' multiply-adds (the same chain, column by column):
/// a block holding a subnormal code, or every block where the multiply-adds are the faster sums
/// (BlockSums); each column decoded once for all R rows. kLift: the columns lifted out of the
/// subnormal range and the inputs scaled down to match (scaled512::lift_weight: the same bits,
/// without a microcode assist per multiply-add), for blocks that hold a subnormal code.
template <int R, int NV, bool kLift = false>
DS41_ALWAYS_INLINE void fma_blocks(const RowInputs* rows, const uint8_t* panel0, long pb, int v0, int q0, __m512 (*part)[R]) {
  const auto input = [&](int r, int k) { return _mm512_set1_ps(scaled512::lift_input(rows[r].xs[k])); };
  for (int q = q0; q < q0 + panels::kBlockK / 4; ++q)
    for (int j = 0; j < 4; j += 2) {
      __m512 wj[NV], wj1[NV];
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        scaled512::decode_column_pair(
            scaled512::load_group_pair(panel0 + 2 * (v0 + v) * pb, panel0 + (2 * (v0 + v) + 1) * pb, q), j, wj[v], wj1[v]);
        if constexpr (kLift) {
          wj[v] = scaled512::lift_weight(wj[v]);
          wj1[v] = scaled512::lift_weight(wj1[v]);
        }
      }
      DS41_UNROLL for (int r = 0; r < R; ++r) {
        if constexpr (kLift) {
          const __m512 x0 = input(r, 4 * q + j), x1 = input(r, 4 * q + j + 1);
          DS41_UNROLL for (int v = 0; v < NV; ++v) part[v][r] = _mm512_fmadd_ps(x1, wj1[v], _mm512_fmadd_ps(x0, wj[v], part[v][r]));
        } else {  // x' broadcast inside the multiply-adds (host/broadcast512.hpp)
          const float* x = rows[r].xs + 4 * q + j;
          DS41_UNROLL for (int v = 0; v < NV; ++v) part[v][r] = fma_broadcast(fma_broadcast(part[v][r], wj[v], x), wj1[v], x + 1);
        }
      }
    }
}

/// Output rows [16·NV: panels p0 .. p0 + 2·NV) of R input rows: y + r·y_stride gets row r's values,
/// whole blocks by dot products (kDot) or multiply-adds (BlockSums). The `ahead` panels after the
/// tile are prefetched (scaled512::gemv_tile).
template <int R, int NV, bool kDot>
void tile_rows(const RowInputs* rows, const MatrixView& w, long p0, int ahead, float* y, long y_stride,
               OutRound round) {
  constexpr int g = 4;  // K positions per 32-byte panel group
  constexpr int NP = 2 * NV;
  const int K = w.cols;
  const long pb = panel_bytes(w.format, K);
  const long kblocks = (K + 31) / 32;
  const uint8_t* panel0 = static_cast<const uint8_t*>(w.data) + p0 * pb;
  // the running sums: with two vectors of 8 rows the block sums alone fill 16 registers, so these
  // (touched once per block) live in memory; with one vector they fit beside the block sums
  // (kOneVectorRows says why that pays)
  constexpr bool kAccInRegisters = NV == 1;
  __m512 acc_reg[NV][R];
  alignas(64) float acc_mem[kAccInRegisters ? 1 : NV][kAccInRegisters ? 1 : R][16] = {};
  DS41_UNROLL for (int v = 0; v < NV; ++v)
    DS41_UNROLL for (int r = 0; r < R; ++r) acc_reg[v][r] = _mm512_setzero_ps();
  const auto acc_at = [&](int v, int r) {
    if constexpr (kAccInRegisters) return acc_reg[v][r];
    else return _mm512_load_ps(acc_mem[v][r]);
  };
  const int whole = K / panels::kBlockK * panels::kBlockK;
  for (int kb = 0; kb < K; kb += panels::kBlockK) {
    constexpr int span = panels::kBlockK / g * 32;  // bytes of a panel's block
    for (int v = 0; v < ahead; ++v) panels::prefetch_l2(panels::group_at(panel0 + (NP + v) * pb, kb / g), span);
    DS41_UNROLL for (int v = 0; v < NP; ++v) panels::prefetch_ahead(panels::group_at(panel0 + v * pb, kb / g), span);
    __m512 part[NV][R];
    DS41_UNROLL for (int v = 0; v < NV; ++v)
      DS41_UNROLL for (int r = 0; r < R; ++r) part[v][r] = _mm512_setzero_ps();
    bool subnormal[NV] = {}, any = false;  // a subnormal code in vector v's two panels' block
    for (int v = 0; v < NV && kb < whole; ++v) {
      subnormal[v] = (w.host_subnormal_blocks[(p0 + 2 * v) * kblocks + kb / 32] |
                      w.host_subnormal_blocks[(p0 + 2 * v + 1) * kblocks + kb / 32]) != 0;
      any |= subnormal[v];
    }
    if (kb >= whole) {  // the K tail, column by column (scaled512::gemv_tile)
      for (int k = kb; k < K; ++k)
        DS41_UNROLL for (int v = 0; v < NV; ++v) {
          const __m512 wk = scaled512::decode_column(
              scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, k / g), k % g);
          DS41_UNROLL for (int r = 0; r < R; ++r) part[v][r] = _mm512_fmadd_ps(_mm512_set1_ps(rows[r].xs[k]), wk, part[v][r]);
        }
    } else if (!kDot) {  // multiply-adds: both vectors' chains interleaved, each column decoded once
      if (any)
        fma_blocks<R, NV, true>(rows, panel0, pb, 0, kb / g, part);
      else
        fma_blocks<R, NV>(rows, panel0, pb, 0, kb / g, part);
    } else if (any) {  // each vector on its own: dot products, lifted where subnormal
      DS41_UNROLL for (int v = 0; v < NV; ++v)
        if (subnormal[v])
          lifted_dot_blocks<R>(rows, panel0, pb, v, kb / g, part + v);
        else
          dot_blocks<R, 1>(rows, panel0, pb, v, kb / g, part + v);
    } else {  // both vectors' chains interleaved (more of them in flight)
      dot_blocks<R, NV>(rows, panel0, pb, 0, kb / g, part);
    }
    DS41_UNROLL for (int v = 0; v < NV; ++v) {  // scaled512::gemv_tile's finish, 2^60 in the input's scale
      const __m512 sw = scaled512::block_scales_pair(w, p0 + 2 * v, kb / 32);
      DS41_UNROLL for (int r = 0; r < R; ++r) {
        const __m512 sx = _mm512_set1_ps(rows[r].part_scales[kb / 32]);
        const __m512 sum = scaled512::add_block(acc_at(v, r), part[v][r], sx, sw);
        if constexpr (kAccInRegisters) acc_reg[v][r] = sum;
        else _mm512_store_ps(acc_mem[v][r], sum);
      }
    }
  }
  DS41_UNROLL for (int v = 0; v < NV; ++v)
    DS41_UNROLL for (int r = 0; r < R; ++r) {  // lanes 0-7 the first panel's rows, 8-15 the second's
      const __m512 a = acc_at(v, r);
      panels::store_rounded(_mm512_castps512_ps256(a), y + r * y_stride + 16 * v, round);
      panels::store_rounded(_mm512_extractf32x8_ps(a, 1), y + r * y_stride + 16 * v + 8, round);
    }
}

/// Rows [n_begin, n_end) of y = round(q · Wᵀ) for the T prepared input rows (row r into
/// y + r·y_stride): tiles of 4 panels (2 vectors) in passes of kRowsPerPass rows, a single panel
/// row by row by the AVX2 scaled tile, rows off the panels by the scalar path.
inline void linear_rows(const RowInputs* rows, long T, const MatrixView& w, float* y, long y_stride, OutRound round,
                        int n_begin, int n_end, int prefetch_end) {
  static_assert(panels::kTilePanels == 4, "a tile of 4 panels is 2 vectors of 16 rows");
  const long pb = panel_bytes(w.format, w.cols);
  const bool dot = use_dot_products();
  panels::walk_panel_rows(
      w, n_begin, n_end,
      [&]<int NP>(std::integral_constant<int, NP>, int n, long p0) {
        const int ahead = panels::panels_to_prefetch(n, NP, prefetch_end, pb);
        if constexpr (NP == 4) {
          for (long r = 0; r < T; r += kRowsPerPass) {
            const RowInputs* pass = rows + r;
            float* yr = y + r * y_stride + n;
            const int ahead_now = r + kRowsPerPass >= T ? ahead : 0;  // the next tile: once, on the last pass
            const auto pass_of = [&]<int R>(std::integral_constant<int, R>) {
              if (dot && R >= kOneVectorRows) {  // a vector at a time, the second's panels fetched meanwhile
                tile_rows<R, 1, true>(pass, w, p0, 2, yr, y_stride, round);
                tile_rows<R, 1, true>(pass, w, p0 + 2, ahead_now, yr + 16, y_stride, round);
              } else if (dot) {
                tile_rows<R, 2, true>(pass, w, p0, ahead_now, yr, y_stride, round);
              } else {
                tile_rows<R, 2, false>(pass, w, p0, ahead_now, yr, y_stride, round);
              }
            };
            switch (std::min<long>(kRowsPerPass, T - r)) {
              case 1: pass_of(std::integral_constant<int, 1>{}); break;
              case 2: pass_of(std::integral_constant<int, 2>{}); break;
              case 3: pass_of(std::integral_constant<int, 3>{}); break;
              case 4: pass_of(std::integral_constant<int, 4>{}); break;
              case 5: pass_of(std::integral_constant<int, 5>{}); break;
              case 6: pass_of(std::integral_constant<int, 6>{}); break;
              case 7: pass_of(std::integral_constant<int, 7>{}); break;
              default: pass_of(std::integral_constant<int, 8>{}); break;
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

/// The descriptor (host/linear_call.hpp): the fp8 multi-row tile by BF16 dot products (T > 1, at the
/// widest level). prepare: each row's RowInputs; false where some row's values do not suit it.
struct Rows {
  static constexpr const char* kName = "fp8 multi-row tile, BF16 dot products (AVX-512)";
  struct Prepared {
    const RowInputs* rows = nullptr;
  };
  static bool usable(const LinearCall& c) { return c.T > 1 && c.isa == VectorIsa::kWidest && gemm_fp8dot512::usable(c.w); }
  static bool prepare(const LinearCall& c, Prepared& p) {
    thread_local HostBuffer<float> row_scaled, row_part_scales;
    thread_local HostBuffer<uint32_t> row_pairs, row_lifted_pairs;
    thread_local std::vector<RowInputs> inputs;
    thread_local std::vector<uint8_t> taken;
    const int K = c.w.cols;
    const long kblocks = (K + 31) / 32, ns = scaled_per_row(K), np = pairs_per_row(K);
    grow(row_scaled, c.T * ns);
    grow(row_pairs, c.T * np);
    grow(row_lifted_pairs, c.T * np);
    grow(row_part_scales, c.T * kblocks);
    inputs.resize(static_cast<size_t>(c.T));
    taken.assign(static_cast<size_t>(c.T), 0);
    // The rows may run on the pool's threads, where these thread_local names would be each
    // thread's own (empty) buffers: the lambda takes this thread's by pointer.
    float* const scaled = row_scaled.data();
    float* const part_scales = row_part_scales.data();
    uint32_t* const pairs = row_pairs.data();
    uint32_t* const lifted = row_lifted_pairs.data();
    RowInputs* const in = inputs.data();
    uint8_t* const took = taken.data();
    for_each_input_row(c, [=, &c](long r) {
      const float* q = c.x + r * c.x_stride;
      const float* qs = c.xs + r * kblocks;
      float* xs_r = scaled + r * ns;
      uint32_t* pairs_r = pairs + r * np;
      uint32_t* lifted_r = lifted + r * np;
      float* part_scales_r = part_scales + r * kblocks;
      took[r] = prepare_row(q, K, xs_r, pairs_r) && prepare_part_scales(qs, kblocks, part_scales_r);
      if (took[r]) lift_pairs(pairs_r, K, lifted_r);
      in[r] = RowInputs{q, qs, xs_r, pairs_r, lifted_r, part_scales_r};
    });
    if (!std::all_of(taken.begin(), taken.end(), [](uint8_t t) { return t != 0; })) return false;
    p.rows = inputs.data();
    return true;
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    gemm_fp8dot512::linear_rows(p.rows, c.T, c.w, c.y, c.y_stride, c.round, n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::gemm_fp8dot512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::gemm_fp8dot512 {
struct Rows : NotBuilt {};
}  // namespace ds41::host_gemv::gemm_fp8dot512
#endif
