// ds41/backend/host/gemv_fp8dot512.hpp — the scaled-domain fp8 decode GEMV's block sums
// (host/gemv_scaled512.hpp) by AVX-512 BF16 dot products, bit-identical to MatrixView::dot.
//
// Why: fewer operations per weight. `vdpbf16ps` does two of a row's K-order multiply-adds in one
// instruction, and the scaled domain's w' is already a bf16 once the code's sign is in place: per
// 64 codes (two panels' groups) the block sums take 2 loads, 5 integer operations and 2 dot
// products, where FmaBlockSums takes 2 loads, 9 integer operations and 4 multiply-adds, and the
// input is broadcast as half as many pairs. Measured (one Zen 5 VM): from L3, one thread,
// 1280 x 5120, 105 against 120 us at two blocks a tile step, 126 against 144 at one; with cold
// weights, at one block a step, both read alike within the noise (docs/PERFORMANCE.md): there
// the dependent chains and the memory, not the operation count, bound the tile.
//
// Same bits. `vdpbf16ps` computes acc = fma(a_lo, b_lo, fma(a_hi, b_hi, acc)) per lane, each FMA
// rounded to nearest even, subnormal inputs read as zero and subnormal results flushed (Intel SDM;
// dot_is_two_fmas() checks the order and the two roundings on the running CPU once, and a CPU
// that differs takes FmaBlockSums). Per lane the high half is column k and the low half k + 1, so
// the chain is scaled512's, multiply-add for multiply-add, in K order, when nothing is subnormal:
//  - w' = w·2^-120 is subnormal exactly for subnormal codes; pack() flags each (panel, 32-column
//    block) holding one (MatrixView::host_subnormal_blocks) and those blocks take FmaBlockSums
//    (a trained weight has ~1 subnormal code in 10^4: ~1 in 40 of a panel's blocks).
//  - x' = x·2^60 must be a bf16 (act_quant's e4m3 values are) and 0 or >= 2^10 in magnitude
//    (|x| >= 2^-50; act_quant's are >= 2^-9): then every product is a multiple of 2^3·2^-129
//    (the lowest bits x' and w' can have), exact, and every partial sum a multiple of 2^-126,
//    so none is subnormal, and the flush never acts. prepare() checks every x and declines the
//    path otherwise.
// Compiled when the translation unit has AVX-512 BF16 besides F/BW/DQ/VL (Zen 4 and later,
// Cooper Lake and Sapphire Rapids and later Intel cores).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include "buffer.hpp"
#include "gemv_scaled512.hpp"
#include "linear_call.hpp"
#if defined(DS41_HOST_AVX512) && defined(__AVX512BF16__)
#define DS41_HOST_AVX512_BF16 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_gemv::fp8dot512 {

/// Whether this CPU's vdpbf16ps is two FMAs, high half first, each rounded (see top). Checked
/// once on 1024 lanes of products with 4-bit mantissas over a wide exponent range, where the
/// other order or a single rounding differs in ~1 lane in 20.
inline bool dot_is_two_fmas() {
  static const bool ok = [] {
    uint32_t state = 0x9E3779B9u;
    auto next = [&] { return state = state * 1664525u + 1013904223u; };
    auto value = [&](int lo, int span) {  // ±(1 + m/16)·2^e, e in [lo, lo + span)
      const uint32_t r = next();
      const float v = std::ldexp(1.0f + static_cast<float>((r >> 8) & 15) / 16, lo + static_cast<int>((r >> 16) % span));
      return (r & 1) ? -v : v;
    };
    auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
    for (int round = 0; round < 64; ++round) {
      alignas(64) uint32_t a[16], b[16];
      alignas(64) float acc[16], want[16], got[16];
      for (int l = 0; l < 16; ++l) {
        const float a_hi = value(-20, 40), a_lo = value(-20, 40), b_hi = value(-20, 40), b_lo = value(-20, 40);
        acc[l] = value(-10, 40) * (1.0f + static_cast<float>(next() % 1000) / 1000);
        a[l] = (bits(a_hi) & 0xFFFF0000u) | bits(a_lo) >> 16;
        b[l] = (bits(b_hi) & 0xFFFF0000u) | bits(b_lo) >> 16;
        want[l] = std::fma(a_lo, b_lo, std::fma(a_hi, b_hi, acc[l]));
      }
      _mm512_store_ps(got, _mm512_dpbf16_ps(_mm512_load_ps(acc), (__m512bh)_mm512_load_si512(a),
                                            (__m512bh)_mm512_load_si512(b)));
      for (int l = 0; l < 16; ++l)
        if (bits(got[l]) != bits(want[l])) return false;
    }
    return true;
  }();
  return ok;
}

/// 32 values whose low 16 bits are zero (bf16 numbers) as 16 dot-product pairs: pairs[i] =
/// bf16(x[2i]) << 16 | bf16(x[2i + 1]), the first of each pair in the high half (`vdpbf16ps`
/// multiplies that one first). Shared by prepare_into and the multi-row bf16 tile
/// (host/gemm_bf16dot512.hpp).
inline void pack_pairs32(const float* x, uint32_t* pairs) {
  // 64-bit lane i holds values 2i (low dword) and 2i + 1: make its low dword value 2i's top
  // half over value 2i + 1's, then keep the low dwords, in order
  const __m512i top = _mm512_set1_epi64(0xFFFF0000);
  const __m512i v0 = _mm512_loadu_si512(x), v1 = _mm512_loadu_si512(x + 16);
  const __m512i w0 = _mm512_or_si512(_mm512_and_si512(v0, top), _mm512_srli_epi64(v0, 48));
  const __m512i w1 = _mm512_or_si512(_mm512_and_si512(v1, top), _mm512_srli_epi64(v1, 48));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs), _mm512_cvtepi64_epi32(w0));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + 8), _mm512_cvtepi64_epi32(w1));
}

/// The whole 32-column blocks' inputs as dot products take them: pairs[k/2] = bf16(x'_k) << 16 |
/// bf16(x'_{k+1}) for k < K rounded down to 32, from xs = x' (scaled::scale_input). False (pairs
/// unusable) if an x' there is not a bf16 or is nonzero below 2^10 (see top).
/// (pairs: caller-owned, K / 32 · 16 + 1 words.)
inline bool prepare_into(const float* xs, int K, uint32_t* pairs) {
  const int whole = K / 32 * 32;
  const __m512i low = _mm512_set1_epi32(0xFFFF), magnitude = _mm512_set1_epi32(0x7FFFFFFF);
  const __m512i min_bits = _mm512_set1_epi32(0x44800000);  // 2^10
  __mmask16 bad = 0;
  for (int k = 0; k < whole; k += 32) {
    const __m512i v0 = _mm512_loadu_si512(xs + k), v1 = _mm512_loadu_si512(xs + k + 16);
    for (const __m512i v : {v0, v1}) {
      const __m512i a = _mm512_and_si512(v, magnitude);
      bad |= _mm512_test_epi32_mask(v, low);
      bad |= _mm512_mask_cmplt_epi32_mask(_mm512_test_epi32_mask(a, a), a, min_bits);
    }
    pack_pairs32(xs + k, pairs + k / 2);
  }
  return bad == 0;
}

/// prepare_into a buffer grown to fit.
inline bool prepare(const float* xs, int K, HostBuffer<uint32_t>& pairs) {
  const int whole = K / 32 * 32;
  if (pairs.size() < static_cast<size_t>(whole / 2 + 1)) pairs = HostBuffer<uint32_t>(static_cast<size_t>(whole / 2 + 1));
  return prepare_into(xs, K, pairs.data());
}

/// part[b][v] += the sums of the 8 groups from q0[b] of panels panel0 + 2v·pb and + (2v + 1)·pb,
/// in K order, by dot products (see top for when that is exact).
template <int B, int NV>
inline void dot_blocks(const uint32_t* pairs, const uint8_t* panel0, long pb, const int (&q0)[B],
                       __m512 (&part)[B][NV]) {
  const __m512i keep = _mm512_set1_epi16(static_cast<short>(0x87F0));  // sign | c[6:0] << 4
  for (int i = 0; i < panels::kBlockK / 4; ++i)
    DS41_UNROLL for (int b = 0; b < B; ++b) {
      const uint32_t* x = pairs + 2 * (q0[b] + i);
      const __m512bh x01 = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[0]));
      const __m512bh x23 = (__m512bh)_mm512_set1_epi32(static_cast<int>(x[1]));
      DS41_UNROLL for (int v = 0; v < NV; ++v) {
        const __m512i codes = scaled512::load_group_pair(panel0 + 2 * v * pb, panel0 + (2 * v + 1) * pb, q0[b] + i);
        // a lane's high half holds column 0 (byte 3) and its low half column 1 (byte 1); after a
        // 16-bit shift by 8, columns 2 (byte 2) and 3 (byte 0): scaled::shifted_pair's bytes
        const __m512i w01 = _mm512_and_si512(_mm512_srai_epi16(codes, 4), keep);
        const __m512i w23 = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(codes, 8), 4), keep);
        part[b][v] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(part[b][v], (__m512bh)w01, x01), (__m512bh)w23, x23);
      }
    }
}

/// Block sums by dot products; a tile step whose blocks hold a subnormal code takes scaled512's
/// multiply-adds (the same chains, see top) for all its panels: splitting the step per panel
/// pair measured no faster (from L3, 4 blocks a step), and with a trained weight's ~1 subnormal code in 10^4 about 1 step
/// in 10 (4 panels x 32 columns) does so.
struct DotBlockSums {
  const float* xs;           // x' (the multiply-adds', and the K tail's)
  const uint32_t* pairs;     // prepare()'s
  const uint8_t* subnormal;  // MatrixView::host_subnormal_blocks
  long kblocks;              // 32-column blocks per panel
  template <int B, int NV>
  void add(const uint8_t* panel0, long pb, long p0, const int (&q0)[B], __m512 (&part)[B][NV]) const {
    if (scaled512::any_subnormal(subnormal, kblocks, p0, 2 * NV, q0))  // lifted: no assists
      return scaled512::add_blocks<B, NV, true>(xs, panel0, pb, q0, part);
    dot_blocks<B, NV>(pairs, panel0, pb, q0, part);
  }
};

/// Whether this call may take the dot products (besides prepare() having accepted the input).
inline bool usable(const MatrixView& w) { return w.host_subnormal_blocks && dot_is_two_fmas(); }

/// The descriptor (host/linear_call.hpp): the fp8 scaled decode GEMV, 16 rows a vector, block sums by
/// BF16 dot products.
struct DotDecodeGemv {
  static constexpr const char* kName = "fp8 scaled decode GEMV, BF16 dot products (AVX-512)";
  struct Prepared {
    const float* scaled_x = nullptr;
    const uint32_t* pairs = nullptr;
  };
  static bool usable(const LinearCall& c) {
    return c.T == 1 && scaled::usable(c.w) && c.isa == VectorIsa::kWidest && fp8dot512::usable(c.w);
  }
  static bool prepare(const LinearCall& c, Prepared& p) {
    thread_local HostBuffer<uint32_t> pairs;
    p.scaled_x = scaled::prepare_scaled_input(c);
    if (!p.scaled_x || !fp8dot512::prepare(p.scaled_x, c.w.cols, pairs)) return false;
    p.pairs = pairs.data();
    return true;
  }
  static void run(const LinearCall& c, const Prepared& p, int n_begin, int n_end, int prefetch_end) {
    scaled512::gemv_rows(c.x, c.xs, DotBlockSums{p.scaled_x, p.pairs, c.w.host_subnormal_blocks, (c.w.cols + 31) / 32},
                         c.w, c.y, c.round, n_begin, n_end, prefetch_end);
  }
};

}  // namespace ds41::host_gemv::fp8dot512
#include "../../core/fp_exact_end.hpp"
#else
namespace ds41::host_gemv::fp8dot512 {
struct DotDecodeGemv : NotBuilt {};
}  // namespace ds41::host_gemv::fp8dot512
#endif
