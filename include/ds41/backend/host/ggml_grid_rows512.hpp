// ds41/backend/host/ggml_grid_rows512.hpp — the IQ grid types (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S) and TQ1_0 decoded 16 rows to a vector, for gemv_ggml.hpp's row-major
// path, with AVX-512 VBMI.
//
// Why: rows are lanes there (one chain of adds per output row), and these types store a row's 8
// consecutive values as one grid point (TQ1_0: as base-3 digits of bytes that serve 5 columns
// each), so they have no 8-row panels. ggml_row_decoders.hpp decodes a row at a time and
// gemv_ggml.hpp transposes the floats, 8 rows by 8 columns; that took 1.5-5x ggml's time at T = 1
// (docs/PERFORMANCE.md, session 35).
//
// How: everything is gathered across rows, and the transpose is of bytes, before anything is
// widened. A block's columns go 8 at a time (a "slot": one grid point of each row).
// - The block and group words (d, scales, grid indices, sign indices) of 16 rows come in with one
//   32-bit gather each; indices and scales are computed lane-wise with the scalar definition's
//   expressions (the scales' f32 products each rounded, as there).
// - A slot's 16 grid points come from the grid table by gathers (two 8-lane u64 gathers, or two
//   16-lane u32 gathers for IQ3's half points), split so that lane i holds row i's first 4 code
//   bytes in one vector and its last 4 in another.
// - Signs: ggml's 7-bit sign indices go through its ksigns table by a byte permute; the sign byte
//   is spread over the lane's 4 bytes and tested bit by bit into a mask, and one masked byte
//   subtraction negates the codes (64 at a time). IQ1's codes become 8·grid ± 1 the same way.
// - Column c of 16 rows: one byte permute puts byte c of each lane into its top byte, zeros below;
//   cvtdq2ps gives code·2^24 exactly, and its product with scale·2^-24 (exact: every scale here is
//   at least 2^-27, as an f16 d is at least 2^-24) is one rounding of scale·code, the scalar code's
//   product. The scalar code then multiplies by ±1, which is exact, and rounding to nearest is
//   symmetric, so rounding the negated product gives the same value. IQ1's dl·(grid ± 1/8) is
//   (dl/8)·(8·grid ± 1): the same real number, rounded once.
// - TQ1_0 has no grid: its 13 code words are gathered as they lie, once a block (each byte serves
//   4 or 5 slots), and each byte becomes its code (digit − 1) for the slot's digit through a
//   256-entry table of tq1_digit, two byte permutes. Its decode GEMV takes the code c = −1, 0, 1
//   as the factor of one FMA instead of a value (tq1_chains: 15% faster at T = 1).
//
// Columns come out 16 rows to a zmm, a tile's 32 rows as two: the sink takes column e's two
// vectors (gemv_ggml.hpp adds them into its decode GEMV chains, or stores them as cols[e]).
// tests/test_ggml_linear.cpp holds every type's output to MatrixView::dot.
//
// Not in sanitizer builds (DS41_SANITIZED_BUILD, core/macros.hpp), which take the row decoders:
// AddressSanitizer does not instrument the gathers that make up this kernel's reads, and its 16
// instantiations cost compile time there (Clang -O1 with ASan: 62 s instead of 56 for
// test_ggml_linear.cpp), which the CI's 30 minutes are short of.
#pragma once
#include <cstdint>
#include <type_traits>
#include "../../core/ggml_quants.hpp"
#include "../../core/macros.hpp"  // DS41_SANITIZED_BUILD
#include "bf16_range512.hpp"       // DS41_HOST_AVX512
#include "unrolled.hpp"

#if defined(DS41_HOST_AVX512) && defined(__AVX512VBMI__) && !defined(DS41_SANITIZED_BUILD)
#define DS41_HOST_GGML_GRID512 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml::grid512 {

constexpr int kRows = 32;  // a tile: two 16-row vectors (gemv_ggml.hpp's four 8-row groups)

/// Lane i: the little-endian u32 at p + rows[i] (rows: the 16 rows' byte offsets). Every read here
/// ends inside its block.
DS41_ALWAYS_INLINE __m512i gather32(const uint8_t* p, __m512i rows) { return _mm512_i32gather_epi32(rows, p, 1); }
/// Lane i: the f16 at byte 0 of p + rows[i] as a float (exact, as load_f16).
DS41_ALWAYS_INLINE __m512 f16_lanes(__m512i words) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)); }
DS41_ALWAYS_INLINE __m512i shr(__m512i v, int n) { return _mm512_srli_epi32(v, static_cast<unsigned>(n)); }
DS41_ALWAYS_INLINE __m512i low_bits(__m512i v, int mask) { return _mm512_and_si512(v, _mm512_set1_epi32(mask)); }
DS41_ALWAYS_INLINE __m512 to_f32(__m512i v) { return _mm512_cvtepi32_ps(v); }  // exact: small integers
/// One slot's 16 rows as codes: lane i of `first` holds row i's code bytes 0..3 (columns 0..3 of
/// the slot), lane i of `last` its bytes 4..7, and lane i of `sign` row i's sign byte in its low
/// byte (bit j negates code j; IQ1: all ones where the shift is −1/8).
struct SlotCodes {
  __m512i first, last, sign;
};
/// The 16 rows' grid points of a table of u64 points: two 8-lane gathers, their dwords split.
DS41_ALWAYS_INLINE void points64(const uint64_t* grid, __m512i index, SlotCodes& o) {
  const auto* base = reinterpret_cast<const long long*>(grid);
  const __m512i lo = _mm512_i32gather_epi64(_mm512_castsi512_si256(index), base, 8);
  const __m512i hi = _mm512_i32gather_epi64(_mm512_extracti64x4_epi64(index, 1), base, 8);
  o.first = _mm512_permutex2var_epi32(lo, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), hi);
  o.last = _mm512_permutex2var_epi32(lo, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), hi);
}
/// The 16 rows' pairs of 4-byte points of a table of u32 points (IQ3): a gather each.
DS41_ALWAYS_INLINE void points32x2(const uint32_t* grid, __m512i first, __m512i second, SlotCodes& o) {
  o.first = _mm512_i32gather_epi32(first, reinterpret_cast<const int*>(grid), 4);
  o.last = _mm512_i32gather_epi32(second, reinterpret_cast<const int*>(grid), 4);
}
/// ggml's ksigns_iq2xs (an 8-bit sign byte from 7 bits) for the low byte of each lane: a
/// two-source byte permute of the table (bits 0..6 of the byte index it; the others are ignored).
struct SignTable {
  __m512i lo = _mm512_loadu_si512(kIq2xsSigns), hi = _mm512_loadu_si512(kIq2xsSigns + 64);
  DS41_ALWAYS_INLINE __m512i operator()(__m512i seven) const { return _mm512_permutex2var_epi8(lo, seven, hi); }
};
/// ((d·(0.5 + s))·f)·unit, the IQ2/IQ3_XXS group scale d·(0.5 + s)·f in the scalar definition's
/// order (each product rounded), then ·unit (exact).
DS41_ALWAYS_INLINE __m512 half_step_scale(__m512 d, __m512i s, float f, float unit) {
  const __m512 ds = _mm512_mul_ps(d, _mm512_add_ps(_mm512_set1_ps(0.5f), to_f32(s)));
  return _mm512_mul_ps(_mm512_mul_ps(ds, _mm512_set1_ps(f)), _mm512_set1_ps(unit));
}
/// −1 in every bit (IQ1's shift −1/8) or 0, from bit `bit` of each lane.
DS41_ALWAYS_INLINE __m512i all_if(__m512i v, int bit) {
  return _mm512_srai_epi32(_mm512_slli_epi32(v, static_cast<unsigned>(31 - bit)), 31);
}

// Per type, for 16 rows (a "half" of the tile): Block (what a block keeps: d, scale words),
// Group (a group of 32 columns: its words, and its scale for columns 0..15 and 16..31 times
// kUnit, the scalar definition's expression in each lane), slot(group, l) (the codes of the
// group's l-th 8 columns). kUnit: 2^-24 (cvtdq2ps reads a code ·2^24), 2^-27 for IQ1, whose codes
// are 8·grid ± 1; a scale times it is exact (see above).
template <GgmlType t>
struct GridRows;

template <>
struct GridRows<GgmlType::kIQ2_XXS> {  // group g: 4 index bytes at 2 + 8g, then aux (4 sign indices, scale)
  static constexpr float kUnit = 0x1p-24f;
  static constexpr bool kIq1 = false, kSigned = true;
  struct Block { __m512 d; };
  struct Group { __m512i index, aux; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) { return {f16_lanes(gather32(b, rows))}; }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    Group o{gather32(b + 2 + 8 * g, rows), gather32(b + 6 + 8 * g, rows), {}};
    o.scale[0] = o.scale[1] = half_step_scale(k.d, shr(o.aux, 28), 0.25f, kUnit);
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable& signs) {
    SlotCodes c{{}, {}, signs(shr(o.aux, 7 * L))};
    points64(kIq2xxsGrid, low_bits(shr(o.index, 8 * L), 0xFF), c);
    return c;
  }
};

/// IQ2_XS and IQ2_S: a group's two 4-bit scales, the low nibble for its first 16 elements, from the
/// block's 8 scale bytes (two words).
DS41_ALWAYS_INLINE void iq2_half_scales(__m512 d, const __m512i words[2], int g, __m512 scale[2], float unit) {
  const __m512i sc = shr(words[g / 4], 8 * (g % 4));
  DS41_UNROLL for (int h = 0; h < 2; ++h) scale[h] = half_step_scale(d, low_bits(shr(sc, 4 * h), 0xF), 0.25f, unit);
}

template <>
struct GridRows<GgmlType::kIQ2_XS> {  // qs: a u16 a slot at 2 + 2s (grid index 9 bits, sign index 7); scales at 66
  static constexpr float kUnit = 0x1p-24f;
  static constexpr bool kIq1 = false, kSigned = true;
  struct Block { __m512 d; __m512i scales[2]; };
  struct Group { __m512i q[2]; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) {
    return {f16_lanes(gather32(b, rows)), {gather32(b + 66, rows), gather32(b + 70, rows)}};
  }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    Group o{{gather32(b + 2 + 8 * g, rows), gather32(b + 6 + 8 * g, rows)}, {}};
    iq2_half_scales(k.d, k.scales, g, o.scale, kUnit);
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable& signs) {
    const __m512i q = shr(o.q[L / 2], 16 * (L % 2));
    SlotCodes c{{}, {}, signs(shr(q, 9))};
    points64(kIq2xsGrid, low_bits(q, 511), c);
    return c;
  }
};

template <>
struct GridRows<GgmlType::kIQ2_S> {  // qs[32] at 2, signs[32] at 34, qh[8] at 66 (index bits 8..9), scales at 74
  static constexpr float kUnit = 0x1p-24f;
  static constexpr bool kIq1 = false, kSigned = true;
  struct Block { __m512 d; __m512i qh[2], scales[2]; };
  struct Group { __m512i qs, signs, qh; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) {
    return {f16_lanes(gather32(b, rows)), {gather32(b + 66, rows), gather32(b + 70, rows)},
            {gather32(b + 74, rows), gather32(b + 78, rows)}};
  }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    Group o{gather32(b + 2 + 4 * g, rows), gather32(b + 34 + 4 * g, rows), shr(k.qh[g / 4], 8 * (g % 4)), {}};
    iq2_half_scales(k.d, k.scales, g, o.scale, kUnit);
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable&) {
    // qs[4g + l] | ((qh[g] << (8 − 2l)) & 0x300)
    const __m512i index = _mm512_or_si512(low_bits(shr(o.qs, 8 * L), 0xFF),
                                          low_bits(_mm512_slli_epi32(o.qh, 8 - 2 * L), 0x300));
    SlotCodes c{{}, {}, shr(o.signs, 8 * L)};
    points64(kIq2sGrid, index, c);
    return c;
  }
};

template <>
struct GridRows<GgmlType::kIQ3_XXS> {  // qs[64] at 2 (two 4-byte points a slot), aux a group at 66 + 4g
  static constexpr float kUnit = 0x1p-24f;
  static constexpr bool kIq1 = false, kSigned = true;
  struct Block { __m512 d; };
  struct Group { __m512i qs[2], aux; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) { return {f16_lanes(gather32(b, rows))}; }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    Group o{{gather32(b + 2 + 8 * g, rows), gather32(b + 6 + 8 * g, rows)}, gather32(b + 66 + 4 * g, rows), {}};
    o.scale[0] = o.scale[1] = half_step_scale(k.d, shr(o.aux, 28), 0.5f, kUnit);
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable& signs) {
    const __m512i q = shr(o.qs[L / 2], 16 * (L % 2));
    const __m512i first = low_bits(q, 0xFF), second = low_bits(shr(q, 8), 0xFF);
    SlotCodes c{{}, {}, signs(shr(o.aux, 7 * L))};
    points32x2(kIq3xxsGrid, first, second, c);
    return c;
  }
};

template <>
struct GridRows<GgmlType::kIQ3_S> {  // qs[64] at 2, qh[8] at 66 (index bit 8), signs[32] at 74, scales[4] at 106
  static constexpr float kUnit = 0x1p-24f;
  static constexpr bool kIq1 = false, kSigned = true;
  struct Block { __m512 d; __m512i qh[2], scales; };
  struct Group { __m512i qs[2], signs, qh; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) {
    return {f16_lanes(gather32(b, rows)), {gather32(b + 66, rows), gather32(b + 70, rows)}, gather32(b + 106, rows)};
  }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    Group o{{gather32(b + 2 + 8 * g, rows), gather32(b + 6 + 8 * g, rows)}, gather32(b + 74 + 4 * g, rows),
            shr(k.qh[g / 4], 8 * (g % 4)), {}};
    // d·(1 + 2s), s the group's nibble
    const __m512i s = low_bits(shr(k.scales, 4 * g), 0xF);
    o.scale[0] = o.scale[1] = _mm512_mul_ps(
        _mm512_mul_ps(k.d, to_f32(_mm512_add_epi32(_mm512_set1_epi32(1), _mm512_add_epi32(s, s)))), _mm512_set1_ps(kUnit));
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable&) {
    const __m512i q = shr(o.qs[L / 2], 16 * (L % 2));
    // qs | ((qh << (8 − 2l)) & 256), then qs | ((qh << (7 − 2l)) & 256)
    const __m512i first = _mm512_or_si512(low_bits(q, 0xFF), low_bits(_mm512_slli_epi32(o.qh, 8 - 2 * L), 256));
    const __m512i second = _mm512_or_si512(low_bits(shr(q, 8), 0xFF), low_bits(_mm512_slli_epi32(o.qh, 7 - 2 * L), 256));
    SlotCodes c{{}, {}, shr(o.signs, 8 * L)};
    points32x2(kIq3sGrid, first, second, c);
    return c;
  }
};

template <>
struct GridRows<GgmlType::kIQ1_S> {  // qs[32] at 2, qh a group at 34 + 2g (index bits 8..10 of each 8, scale, shift sign)
  static constexpr float kUnit = 0x1p-27f;
  static constexpr bool kIq1 = true, kSigned = true;  // the shift's sign as a sign byte
  struct Block { __m512 d; __m512i qh[4]; };
  struct Group { __m512i qs, qh, shift; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) {
    return {f16_lanes(gather32(b, rows)),
            {gather32(b + 34, rows), gather32(b + 38, rows), gather32(b + 42, rows), gather32(b + 46, rows)}};
  }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    const __m512i qh = low_bits(shr(k.qh[g / 2], 16 * (g % 2)), 0xFFFF);
    Group o{gather32(b + 2 + 4 * g, rows), qh, all_if(qh, 15), {}};
    // d·(2s + 1)
    const __m512i s = low_bits(shr(qh, 12), 7);
    o.scale[0] = o.scale[1] = _mm512_mul_ps(
        _mm512_mul_ps(k.d, to_f32(_mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1)))), _mm512_set1_ps(kUnit));
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable&) {
    const __m512i index = _mm512_or_si512(low_bits(shr(o.qs, 8 * L), 0xFF), _mm512_slli_epi32(low_bits(shr(o.qh, 3 * L), 7), 8));
    SlotCodes c{{}, {}, o.shift};
    points64(kIq1sGrid, index, c);
    return c;
  }
};

template <>
struct GridRows<GgmlType::kIQ1_M> {  // qs[32] at 0, qh[16] at 32 (a nibble a slot), scales[4] u16 at 48 (their top nibbles: d)
  static constexpr float kUnit = 0x1p-27f;
  static constexpr bool kIq1 = true, kSigned = true;  // the shift's sign as a sign byte
  struct Block { __m512 d; __m512i sc[2]; };
  struct Group { __m512i qs, qh; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) {
    const __m512i w0 = gather32(b + 48, rows), w1 = gather32(b + 52, rows);
    // iq1_m_d_bits: (s0 >> 12) | ((s1 >> 8) & 0xF0) | ((s2 >> 4) & 0xF00) | (s3 & 0xF000)
    const __m512i bits = _mm512_or_si512(_mm512_or_si512(low_bits(shr(w0, 12), 0xF), low_bits(shr(w0, 24), 0xF0)),
                                         _mm512_or_si512(low_bits(shr(w1, 4), 0xF00), low_bits(shr(w1, 16), 0xF000)));
    return {f16_lanes(bits), {w0, w1}};
  }
  static Group group(const uint8_t* b, __m512i rows, const Block& k, int g) {
    Group o{gather32(b + 4 * g, rows), gather32(b + 32 + 2 * g, rows), {}};
    const __m512i sc = shr(k.sc[g / 4], 16 * ((g / 2) % 2) + 6 * (g % 2));
    DS41_UNROLL for (int h = 0; h < 2; ++h) {  // d·(2s + 1)
      const __m512i s = low_bits(shr(sc, 3 * h), 7);
      o.scale[h] = _mm512_mul_ps(_mm512_mul_ps(k.d, to_f32(_mm512_add_epi32(_mm512_add_epi32(s, s), _mm512_set1_epi32(1)))),
                                 _mm512_set1_ps(kUnit));
    }
    return o;
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable&) {
    const __m512i nibble = shr(o.qh, 8 * (L / 2) + 4 * (L % 2));  // index bits 8..10, the shift's sign in bit 3
    const __m512i index = _mm512_or_si512(low_bits(shr(o.qs, 8 * L), 0xFF), _mm512_slli_epi32(low_bits(nibble, 7), 8));
    SlotCodes c{{}, {}, all_if(nibble, 3)};
    points64(kIq1sGrid, index, c);
    return c;
  }
};

/// TQ1_0's code (digit − 1, tq1_digit) of every byte value for each digit n, for a 64-byte lookup.
struct Tq1CodeTable {
  alignas(64) int8_t code[5][256];
};
inline constexpr Tq1CodeTable kTq1Codes = [] {
  Tq1CodeTable t{};
  for (int n = 0; n < 5; ++n)
    for (int b = 0; b < 256; ++b) t.code[n][b] = static_cast<int8_t>(tq1_digit(static_cast<uint8_t>(b), n) - 1);
  return t;
}();
/// Each byte of v as its code for digit n: a 128-byte permute for each half of the table, chosen by bit 7.
DS41_ALWAYS_INLINE __m512i tq1_codes(__m512i v, int n) {
  const int8_t* t = kTq1Codes.code[n];
  const __m512i lo = _mm512_permutex2var_epi8(_mm512_load_si512(t), v, _mm512_load_si512(t + 64));
  const __m512i hi = _mm512_permutex2var_epi8(_mm512_load_si512(t + 128), v, _mm512_load_si512(t + 192));
  return _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), lo, hi);
}

template <>
struct GridRows<GgmlType::kTQ1_0> {  // qs[48]: digit n of qs[0..31] for n = 0..4, then of qs[32..47]; qh[4]; d at 52
  static constexpr float kUnit = 0x1p-24f;
  static constexpr bool kIq1 = false, kSigned = false;
  // the block's 13 code words (qs, then qh) of 16 rows, gathered once: every byte serves 4 or 5
  // slots (one a digit); two gathers a slot (64 a block) made T = 1 take 331 µs instead of 268
  // (1280 x 5120, two threads, session 37)
  struct Block { __m512 d; __m512i words[13]; };
  struct Group { const __m512i* words; int g; __m512 scale[2]; };
  static Block block(const uint8_t* b, __m512i rows) {
    Block k{f16_lanes(shr(gather32(b + 50, rows), 16)), {}};  // d: bytes 52..53, a read ending at the block's end
    DS41_UNROLL for (int w = 0; w < 13; ++w) k.words[w] = gather32(b + 4 * w, rows);
    return k;
  }
  static Group group(const uint8_t*, __m512i, const Block& k, int g) {
    const __m512 scale = _mm512_mul_ps(k.d, _mm512_set1_ps(kUnit));
    return {k.words, g, {scale, scale}};
  }
  template <int L>
  static SlotCodes slot(const Group& o, const SignTable&) {
    const int s = 4 * o.g + L;  // elements 8s..8s+7
    if (s >= 30) {  // qh's digits 2(s − 30) and 2(s − 30) + 1, four elements each
      const __m512i qh = o.words[12];
      return {tq1_codes(qh, 2 * (s - 30)), tq1_codes(qh, 2 * (s - 30) + 1), _mm512_setzero_si512()};
    }
    const int at = s < 20 ? 8 * (s % 4) : 32 + 8 * ((s - 20) % 2), n = s < 20 ? s / 4 : (s - 20) / 2;
    return {tq1_codes(o.words[at / 4], n), tq1_codes(o.words[at / 4 + 1], n), _mm512_setzero_si512()};
  }
};

/// Whether t has GridRows: the IQ grid types and TQ1_0.
constexpr bool served(GgmlType t) {
  return t == GgmlType::kIQ2_XXS || t == GgmlType::kIQ2_XS || t == GgmlType::kIQ2_S || t == GgmlType::kIQ3_XXS ||
         t == GgmlType::kIQ3_S || t == GgmlType::kIQ1_S || t == GgmlType::kIQ1_M || t == GgmlType::kTQ1_0;
}

/// f(std::integral_constant<GgmlType, t>{}) for a served type t (one instantiation each).
template <class F>
void visit_served_type(GgmlType t, F&& f) {
  switch (t) {
    case GgmlType::kIQ2_XXS: return f(std::integral_constant<GgmlType, GgmlType::kIQ2_XXS>{});
    case GgmlType::kIQ2_XS: return f(std::integral_constant<GgmlType, GgmlType::kIQ2_XS>{});
    case GgmlType::kIQ2_S: return f(std::integral_constant<GgmlType, GgmlType::kIQ2_S>{});
    case GgmlType::kIQ3_XXS: return f(std::integral_constant<GgmlType, GgmlType::kIQ3_XXS>{});
    case GgmlType::kIQ3_S: return f(std::integral_constant<GgmlType, GgmlType::kIQ3_S>{});
    case GgmlType::kIQ1_S: return f(std::integral_constant<GgmlType, GgmlType::kIQ1_S>{});
    case GgmlType::kIQ1_M: return f(std::integral_constant<GgmlType, GgmlType::kIQ1_M>{});
    case GgmlType::kTQ1_0: return f(std::integral_constant<GgmlType, GgmlType::kTQ1_0>{});
    default: return;
  }
}

/// 16 rows' code bytes (4 a lane) as signed bytes: the points with `k`'s bytes negated (IQ1: 8·grid,
/// then + 1, or − 1 where k).
template <GgmlType t>
DS41_ALWAYS_INLINE __m512i signed_codes(__m512i points, __mmask64 k) {
  if constexpr (GridRows<t>::kIq1) {  // grid bytes −1, 0, 1: 8·grid has no carry between bytes
    const __m512i eight = _mm512_and_si512(_mm512_slli_epi64(points, 3), _mm512_set1_epi8(static_cast<char>(0xF8)));
    const __m512i one = _mm512_set1_epi8(1);
    return _mm512_mask_sub_epi8(_mm512_add_epi8(eight, one), k, eight, one);
  } else {
    return _mm512_mask_sub_epi8(points, k, _mm512_setzero_si512(), points);
  }
}

/// The masks of the 16 rows' sign bits over `first` and `last`: bit 4i + j is bit j (first) or
/// bit 4 + j (last) of row i's sign byte: the byte spread over the lane's 4 bytes, then tested.
DS41_ALWAYS_INLINE void sign_masks(__m512i sign, __mmask64& first, __mmask64& last) {
  const __m512i spread = _mm512_shuffle_epi8(  // byte 4i of each 16-byte lane into bytes 4i..4i+3
      sign, _mm512_set4_epi64(0x0C0C0C0C08080808ll, 0x0404040400000000ll, 0x0C0C0C0C08080808ll, 0x0404040400000000ll));
  first = _mm512_test_epi8_mask(spread, _mm512_set1_epi32(0x08040201));
  last = _mm512_test_epi8_mask(spread, _mm512_set1_epi32(static_cast<int>(0x80402010u)));
}

/// One 256-column block of the tile's 32 rows (row 16h + i's block at b + rows[h][i]): sink(e, v)
/// with v[h] the values of column e for rows 16h..16h+15.
template <GgmlType t, class Sink>
DS41_ALWAYS_INLINE void decode_block(const uint8_t* b, const __m512i rows[2], Sink& sink) {
  using Rows = GridRows<t>;
  const SignTable signs;
  typename Rows::Block blk[2];
  DS41_UNROLL for (int h = 0; h < 2; ++h) blk[h] = Rows::block(b, rows[h]);
  // lane i takes byte c of its own 4 (4i + c) into its top byte, zeros below
  const __m512i top0 = _mm512_setr_epi32(0, 4 << 24, 8 << 24, 12 << 24, 16 << 24, 20 << 24, 24 << 24, 28 << 24, 32 << 24,
                                         36 << 24, 40 << 24, 44 << 24, 48 << 24, 52 << 24, 56 << 24, 60 << 24);
  const __mmask64 top_bytes = 0x8888888888888888ull;
  for (int g = 0; g < 8; ++g) {
    typename Rows::Group grp[2];
    DS41_UNROLL for (int h = 0; h < 2; ++h) grp[h] = Rows::group(b, rows[h], blk[h], g);
    unrolled<4>([&](auto L) DS41_LAMBDA_INLINE {
      __m512i codes[2][2];  // [half][first 4 columns, last 4]
      DS41_UNROLL for (int h = 0; h < 2; ++h) {
        const SlotCodes c = Rows::template slot<decltype(L)::value>(grp[h], signs);
        if constexpr (Rows::kSigned) {
          __mmask64 k_first, k_last;
          sign_masks(c.sign, k_first, k_last);
          codes[h][0] = signed_codes<t>(c.first, k_first);
          codes[h][1] = signed_codes<t>(c.last, k_last);
        } else {
          codes[h][0] = c.first, codes[h][1] = c.last;
        }
      }
      DS41_UNROLL for (int j = 0; j < 8; ++j) {
        const __m512i index = _mm512_add_epi32(top0, _mm512_set1_epi32((j % 4) << 24));
        __m512 v[2];
        DS41_UNROLL for (int h = 0; h < 2; ++h)
          v[h] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_maskz_permutexvar_epi8(top_bytes, index, codes[h][j / 4])),
                               grp[h].scale[decltype(L)::value / 2]);
        sink(32 * g + 8 * decltype(L)::value + j, v);
      }
    });
  }
}

/// TQ1_0's decode GEMV (T = 1) over one block of the tile's 32 rows: a[h] += x[e] · w for each
/// column e, the f32 Linear's bits, one operation a column fewer than decode_block's values, where
/// every x·d is zero or normal (gemv_ggml.hpp's products_normal; else decode_block serves: where
/// a finite x·d overflowed, 0·(x·d) would be NaN where x·0 is 0). A weight is c·d with c = −1, 0
/// or 1, so x·(c·d) = c·(x·d) exactly (rounding to nearest is symmetric), and a + c·(x·d) in one
/// FMA is a + x·w rounded once. c comes as a float by one permute of a 16-entry table, which
/// reads the low 4 bits of each lane's code byte (0, 1, or 0xF for −1): a shift (three columns of
/// four), a permute, the product x·d and the FMA, against a permute, a
/// conversion, the scale's product and the Linear's product and add.
DS41_ALWAYS_INLINE void tq1_chains(const uint8_t* b, const __m512i rows[2], const float* x, __m512 a[2]) {
  using Rows = GridRows<GgmlType::kTQ1_0>;
  const SignTable signs;
  Rows::Block blk[2];
  DS41_UNROLL for (int h = 0; h < 2; ++h) blk[h] = Rows::block(b, rows[h]);
  const __m512 factor = _mm512_setr_ps(0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, -1);  // c by its low nibble
  for (int g = 0; g < 8; ++g) {
    Rows::Group grp[2];
    DS41_UNROLL for (int h = 0; h < 2; ++h) grp[h] = Rows::group(b, rows[h], blk[h], g);
    unrolled<4>([&](auto L) DS41_LAMBDA_INLINE {
      __m512i codes[2][2];  // [half][columns 0-3, 4-7]: lane i's bytes are row i's codes
      DS41_UNROLL for (int h = 0; h < 2; ++h) {
        const SlotCodes c = Rows::template slot<decltype(L)::value>(grp[h], signs);
        codes[h][0] = c.first, codes[h][1] = c.last;
      }
      DS41_UNROLL for (int j = 0; j < 8; ++j) {
        const __m512 xv = _mm512_set1_ps(x[32 * g + 8 * decltype(L)::value + j]);
        DS41_UNROLL for (int h = 0; h < 2; ++h) {
          const __m512i code = j % 4 == 0 ? codes[h][j / 4] : _mm512_srli_epi32(codes[h][j / 4], 8 * (j % 4));
          a[h] = _mm512_fmadd_ps(_mm512_permutexvar_ps(code, factor), _mm512_mul_ps(xv, blk[h].d), a[h]);
        }
      }
    });
  }
}

}  // namespace ds41::host_ggml::grid512
#include "../../core/fp_exact_end.hpp"
#endif
