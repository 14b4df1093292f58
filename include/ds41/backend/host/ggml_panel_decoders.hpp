// ds41/backend/host/ggml_panel_decoders.hpp — a GGUF weight's 8-row panels (core/ggml_panels.hpp)
// decoded column by column into 8-lane vectors, one vector per panel and column, for the panel
// Linear (gemv_ggml.hpp: the decode GEMV adds them into its chains, T > 1 stores them).
//
// Why a header of its own: each panel type has its decoder here (decode_panels, one branch a type,
// each instantiated alone by gemv_ggml.hpp's visit_panel_type), with the vector atoms they share
// (code fields, joined codes, 16-entry tables, the K-quants' scale words); gemv_ggml.hpp keeps the
// kernels that drive them.
//
// Compiled for AVX2, FMA and F16C (DS41_HOST_GGML_PANELS; the f16 scales convert 8 at a time);
// with AVX-512VL some atoms take a shorter form (nibbles_in_place, table16).
#pragma once
#include <array>
#include <cstdint>
#include "../../core/ggml_panels.hpp"
#include "../../core/ggml_quants.hpp"
#include "../../core/macros.hpp"
#include "unrolled.hpp"

/// Where the panel kernel is compiled: AVX2 and F16C (the f16 scales convert 8 at a time).
#if defined(DS41_HOST_AVX2) && defined(__F16C__)
#define DS41_HOST_GGML_PANELS 1
#include <immintrin.h>

/// Builds tuned for Zen 1-3 (-mtune, which -march=native sets; clang: -march): their lane-crossing
/// permute (vpermps) takes ~1.3 cycles of throughput on the two shuffle pipes, which also run the
/// code shifts and broadcasts, where Intel's takes one port-5 slot that nothing else in these loops
/// wants (docs/PERFORMANCE.md, session 39). Where it is slow, the decoders that would permute an
/// 8-entry value table convert the code instead (one and, one conversion, one FMA). There too the
/// 2-, 3-, 5- and 6-bit codes are taken in place (field_in_place, joined_codes_in_place: a mask and
/// a conversion, no variable shift): on Zen 3 the variable shifts and the permutes share the two
/// pipes of the FMAs and multiplies, while the conversions run on the two the adds use (session 41:
/// 8 FMAs and 8 permutes take 8.0 cycles, 8 FMAs and 8 conversions 4.8, 8 adds and 8 conversions 8.3).
#if defined(__tune_znver1__) || defined(__tune_znver2__) || defined(__tune_znver3__) || \
    (!defined(__tune_znver4__) && (defined(__znver1__) || defined(__znver2__) || defined(__znver3__)))
#define DS41_HOST_SLOW_LANE_PERMUTE 1
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml {
// ---------------------------------------------------------------- panel column decoders
// Each writes cols[j][i] = the value of column j of the panel's row i, exactly as
// core/ggml_quants.hpp's scalar function gives it for that row's block (the same operations on the
// same operands: products d·scale first, then ·q, then − dmin·min, each rounded on its own).

/// A code left where it lies (the "in place" decoders below): lane i's mask m << s(i), and the
/// scale factor 2^−s(i) that takes the converted code c·2^s(i) back to c (a power of two: exact).
/// `s` is the place of lane i's code in its word.
template <class Place>
DS41_ALWAYS_INLINE __m256i place_masks(unsigned m, Place s) {
  const auto at = [&](int i) { return static_cast<int>(m << s(i)); };
  return _mm256_setr_epi32(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
}
template <class Place>
DS41_ALWAYS_INLINE __m256 place_down(Place s) {
  const auto down = [&](int i) { return 1.0f / static_cast<float>(1u << s(i)); };
  return _mm256_setr_ps(down(0), down(1), down(2), down(3), down(4), down(5), down(6), down(7));
}

/// Lane i's code of column e0 + J in a field of width W (bits per row; W bytes per column), e0 a
/// multiple of 4 / W, shifted down to the lane's low bits but not masked (the bits above are the
/// next rows' codes): the 32-bit word holding it (4 / W columns) broadcast straight from memory,
/// then a variable shift. Reading whole words, which never pass the field's end, costs one load
/// per word instead of a scalar load, a move and a shuffle per column (Q2_K's decode GEMV: 813 ->
/// 648 us at 1280 x 5120).
template <int W, int J>
DS41_ALWAYS_INLINE __m256i field_shifted(const uint8_t* field, int e0) {
  constexpr int kPer = 4 / W, kJ = J % kPer;
  const __m256i word = _mm256_set1_epi32(static_cast<int>(ggml_detail::load_u32(field + (e0 + J - kJ) * W)));
  const __m256i shifts = _mm256_setr_epi32(0, W, 2 * W, 3 * W, 4 * W, 5 * W, 6 * W, 7 * W);
  return _mm256_srlv_epi32(word, _mm256_add_epi32(shifts, _mm256_set1_epi32(8 * W * kJ)));
}
/// field_shifted, masked: lane i's code alone.
template <int W, int J>
DS41_ALWAYS_INLINE __m256i field_codes(const uint8_t* field, int e0) {
  return _mm256_and_si256(field_shifted<W, J>(field, e0), _mm256_set1_epi32((1 << W) - 1));
}
/// Lane i's nibble of column e (a field of 4 bits a row) as the index of a 16-entry table
/// (table16): masked only where table16 needs it (without AVX-512VL).
DS41_ALWAYS_INLINE __m256i nibble_index(const uint8_t* field, int e) {
#if defined(__AVX512VL__)
  return field_shifted<4, 0>(field, e);
#else
  return field_codes<4, 0>(field, e);
#endif
}
/// The float value of each lane's 2-bit code at column e0 + J: table[code] for a 4-entry table, by
/// one in-lane permute of the table written twice (vpermilps reads the index's low 2 bits alone:
/// the shifted word's higher bits, the next rows' codes, need no mask, and no integer conversion
/// runs on the FP ports). In-lane rather than vpermps: on Zen 3 a vpermps takes ~1.3 cycles of
/// throughput and vpermilps 0.5 (docs/PERFORMANCE.md, session 39); on Intel both take one port-5
/// slot, vpermilps with the shorter latency.
template <int J>
DS41_ALWAYS_INLINE __m256 field_values2(const uint8_t* field, int e0, __m256 table_twice) {
  return _mm256_permutevar_ps(table_twice, field_shifted<2, J>(field, e0));
}
#if defined(DS41_HOST_SLOW_LANE_PERMUTE)
/// Each lane's W-bit code (W = 2 or 3: a column of W bytes) of column e, of a field of `cols`
/// columns, left where it lies, as a float: lane i's code q masked in place (bits W·i.. of the
/// column) and converted, q·2^(W·i), exact (at most 2^24 − 1). A scale times in_place_down<W>()
/// (2^−W·i, exact: every scale here is 0 or at least 2^-24) times it is the scale times q, the
/// same exact product. One and and one conversion instead of a variable shift and a permute (or
/// a shift, a mask and a conversion): on Zen 3 the conversion runs beside the FMAs and
/// multiplies, where the shift and the permute take their pipes (Q2_K's decode GEMV, 32 rows hot:
/// 2.64 -> 2.25 cycles a column of 8 rows; docs/PERFORMANCE.md, session 41). The column's word is
/// read from its first byte, which for the field's last column would pass the field's end: that
/// one is read as the word ending with it, shifted down.
template <int W>
DS41_ALWAYS_INLINE __m256 field_in_place(const uint8_t* field, int e, int cols) {
  static_assert(W == 2 || W == 3);
  const __m256i mask = place_masks((1u << W) - 1, [](int i) { return W * i; });
  const __m256i word = e + 1 < cols ? _mm256_set1_epi32(static_cast<int>(ggml_detail::load_u32(field + W * e)))
                                    : _mm256_srli_epi32(_mm256_set1_epi32(static_cast<int>(ggml_detail::load_u32(field + W * e + W - 4))), 8 * (4 - W));
  return _mm256_cvtepi32_ps(_mm256_and_si256(word, mask));
}
template <int W>
DS41_ALWAYS_INLINE __m256 in_place_down() {
  return place_down([](int i) { return W * i; });
}
#endif
/// Each lane's joined code (W = 5 or 6 bits, ggml_panels.hpp) of the column whose W bytes start at
/// col, as a float: the rows whose bits lie in the column's first 32-bit word from it, the others
/// from the word at its byte At (by default W − 4: bits 8(W − 4).. of the column, never past it);
/// one shift and one mask a lane.
template <int W, int At = W - 4>
struct JoinedField {
  static_assert(W == 5 || W == 6);
  static constexpr int kAt = At, kFirstRows = W == 5 ? 6 : 5;  // rows whose W bits end by bit 32 of the first word
  /// Where lane i's code starts in its word.
  static constexpr int shift(int i) { return i < kFirstRows ? W * i : W * i - 8 * kAt; }
  /// Each lane's word: the first or the second, as its row's bits lie.
  static DS41_ALWAYS_INLINE __m256i words(const uint8_t* col) {
    const __m256i first = _mm256_set1_epi32(static_cast<int>(ggml_detail::load_u32(col)));
    const __m256i second = _mm256_set1_epi32(static_cast<int>(ggml_detail::load_u32(col + kAt)));
    return _mm256_blend_epi32(first, second, (0xFF << kFirstRows) & 0xFF);
  }
};
template <int W>
DS41_ALWAYS_INLINE __m256 joined_codes(const uint8_t* col) {
  using F = JoinedField<W>;
  const __m256i shifts = _mm256_setr_epi32(F::shift(0), F::shift(1), F::shift(2), F::shift(3), F::shift(4), F::shift(5), F::shift(6), F::shift(7));
  return _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srlv_epi32(F::words(col), shifts), _mm256_set1_epi32((1 << W) - 1)));
}
#if defined(__AVX512VL__) || defined(DS41_HOST_SLOW_LANE_PERMUTE)
#define DS41_HOST_JOINED_IN_PLACE 1
/// joined_codes left where they lie (as nibbles_in_place): lane i's code c masked in its word and
/// converted is c·2^s(i), exact (W significant bits, s(i) + W <= 32), and a scale times
/// joined_place_down<W>() (2^−s(i), exact: the scales are 0 or at least 2^-24, s(i) <= 27) times
/// it is the scale times c, the same exact product, without the shift. With AVX-512VL the
/// conversion is unsigned and the second word is joined_codes' (byte W − 4). Without it (AVX2
/// where Zen 1-3 is the tuning: the shift takes the pipes the FMAs and multiplies want, as
/// field_in_place) the conversion is signed, so no code may reach bit 31: the second word is read
/// one byte further (W − 3: its rows' codes at bits 6..23), which for the field's last column
/// (`last`) would pass the field's end; that one takes joined_codes' words, its second word's
/// rows shifted down by 8 (one variable shift, once a field).
#if defined(__AVX512VL__)
template <int W>
using InPlaceField = JoinedField<W>;
#else
template <int W>
using InPlaceField = JoinedField<W, W - 3>;
#endif
template <int W>
DS41_ALWAYS_INLINE __m256 joined_codes_in_place(const uint8_t* col, bool last) {
  using F = InPlaceField<W>;
  const __m256i masks = place_masks((1u << W) - 1, F::shift);
#if defined(__AVX512VL__)
  (void)last;
  return _mm256_cvtepu32_ps(_mm256_and_si256(F::words(col), masks));
#else
  using Near = JoinedField<W>;
  const auto down8 = [](int i) { return i < Near::kFirstRows ? 0 : 8; };
  const __m256i words = !last ? F::words(col)
                              : _mm256_srlv_epi32(Near::words(col), _mm256_setr_epi32(down8(0), down8(1), down8(2), down8(3),
                                                                                      down8(4), down8(5), down8(6), down8(7)));
  return _mm256_cvtepi32_ps(_mm256_and_si256(words, masks));
#endif
}
template <int W>
DS41_ALWAYS_INLINE __m256 joined_place_down() {
  return place_down(InPlaceField<W>::shift);
}
#endif
#if defined(__AVX512VL__)
/// Each lane's nibble of the 32-bit word at p (lane i: bits 4i..4i+3) left where it lies, converted
/// unsigned: q·16^i, exact. A scale times nibble_place_down() (16^−i, exact: the scales are 0 or at
/// least 2^-24) times it is the scale times q, the same exact product, without a shift.
DS41_ALWAYS_INLINE __m256 nibbles_in_place(const uint8_t* p) {
  const __m256i nibble = place_masks(0xF, [](int i) { return 4 * i; });
  return _mm256_cvtepu32_ps(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(ggml_detail::load_u32(p))), nibble));
}
DS41_ALWAYS_INLINE __m256 nibble_place_down() { return place_down([](int i) { return 4 * i; }); }
#endif
/// A joined code's operand and its scale's: where DS41_HOST_JOINED_IN_PLACE the code in place
/// (c·2^s, joined_codes_in_place) and the scale ·2^−s, else the code shifted down and the scale as
/// it is. Their product is the scale times c either way, exactly. `last`: col is its field's last
/// column.
template <int W>
DS41_ALWAYS_INLINE __m256 joined_operand(const uint8_t* col, bool last) {
#if defined(DS41_HOST_JOINED_IN_PLACE)
  return joined_codes_in_place<W>(col, last);
#else
  (void)last;
  return joined_codes<W>(col);
#endif
}
template <int W>
DS41_ALWAYS_INLINE __m256 joined_scale(__m256 scale) {
#if defined(DS41_HOST_JOINED_IN_PLACE)
  return _mm256_mul_ps(scale, joined_place_down<W>());
#else
  return scale;
#endif
}
using ggml_detail::load_u16;
using ggml_detail::load_u32;

/// Where block byte `o` (inside one of the type's header ranges) lies in a row's panel header.
inline int header_at(GgmlType t, int o) {
  const GgmlPanelLayout l = ggml_panel_layout(t);
  return o < l.header_end[0] ? o - l.header_begin[0] : l.header_end[0] - l.header_begin[0] + o - l.header_begin[1];
}
/// Lane i: the 32-bit word at `o` of row i's header (the headers lie row after row, `hb` bytes
/// each, at the start of the panel block pb): one gather, whose reads stay inside the headers.
inline __m256i header_words(const uint8_t* pb, int hb, int o) {
  const __m256i rows = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(hb));
  return _mm256_i32gather_epi32(reinterpret_cast<const int*>(pb + o), rows, 1);
}
/// Byte b of each lane of 32-bit words w.
inline __m256i word_byte(__m256i w, int b) { return _mm256_and_si256(_mm256_srli_epi32(w, 8 * b), _mm256_set1_epi32(0xFF)); }
/// Lane i: row i's f16 at header byte o as a float (exact, as load_f16).
inline __m256 header_f16(const uint8_t* pb, int hb, int o) {
  // a 2-byte header (d alone: Q4_0, Q5_0, IQ4_NL, Q1_0, Q2_0) is the 8 rows' f16s side by side:
  // one load (8 scalar loads stored and reloaded whole wait for the store forwarding to fail)
  if (hb == 2) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb)));
  if (hb == 4) {  // d and m (Q4_1, Q5_1) or d and scales_h: the f16 at o of each 4-byte header
    const __m256i w = _mm256_srli_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)), 8 * o);
    const __m256i lo = _mm256_and_si256(w, _mm256_set1_epi32(0xFFFF));
    return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1)));
  }
  alignas(16) uint16_t h[8];
  for (int i = 0; i < 8; ++i) h[i] = ggml_detail::load_u16(pb + hb * i + o);
  return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}
/// a·b − c and a·b + c where the product a·b is exact (every block type's: an f16 scale times a
/// scale and a code, at most 24 significant bits, docs/NUMERICS.md): the scalar definition rounds
/// the product, then the add; the product's rounding is the identity, so one FMA gives the same
/// value with one instruction fewer per column (the decode GEMV is bound by these instructions).
/// Where c is the exact off·scale of a (q − off)·scale, the result is that exact product, but an
/// exact zero comes out +0 where the product gives −0 for a negative scale: the Linear's sums start
/// from +0, and a sum from +0 is never −0, so x·(±0) added to it gives the same bits.
DS41_ALWAYS_INLINE __m256 exact_mul_sub(__m256 a, __m256 b, __m256 c) {
#if defined(__FMA__)
  return _mm256_fmsub_ps(a, b, c);
#else
  return _mm256_sub_ps(_mm256_mul_ps(a, b), c);
#endif
}
DS41_ALWAYS_INLINE __m256 exact_mul_add(__m256 a, __m256 b, __m256 c) {
#if defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return _mm256_add_ps(_mm256_mul_ps(a, b), c);
#endif
}
/// d · float(integer scale) lane by lane: the scalar code's `d * to_float(sc)`, one rounding.
inline __m256 scaled_lanes(__m256 d, __m256i sc) { return _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc)); }

/// The K-quants' k_scale_min for sub-block j, lane by lane (words: scales[0..11] of each lane's
/// row), then vd = d·scale and vm = dmin·min.
DS41_ALWAYS_INLINE void k_scale_min_lanes(const __m256i words[3], int j, __m256 d, __m256 dmin, __m256& vd, __m256& vm) {
  const __m256i m4 = _mm256_set1_epi32(0xF), m6 = _mm256_set1_epi32(63);
  const auto sb = [&](int k) { return word_byte(words[k / 4], k % 4); };  // scales[k]
  __m256i sc, mn;
  if (j < 4) {
    sc = _mm256_and_si256(sb(j), m6), mn = _mm256_and_si256(sb(j + 4), m6);
  } else {
    const __m256i hi = sb(j + 4);
    sc = _mm256_or_si256(_mm256_and_si256(hi, m4), _mm256_slli_epi32(_mm256_srli_epi32(sb(j - 4), 6), 4));
    mn = _mm256_or_si256(_mm256_srli_epi32(hi, 4), _mm256_slli_epi32(_mm256_srli_epi32(sb(j), 6), 4));
  }
  vd = scaled_lanes(d, sc), vm = scaled_lanes(dmin, mn);
}
/// The float of each lane's 4-bit code in a 16-entry table. With AVX-512VL one two-source permute,
/// which reads the index's low 4 bits alone (so `code` may carry higher bits: nibble_index). Else
/// the table's two halves permuted by the low 3 bits, the half chosen by bit 3 (the code masked).
inline __m256 table16(const float* table, __m256i code) {
#if defined(__AVX512VL__)
  return _mm256_permutex2var_ps(_mm256_loadu_ps(table), code, _mm256_loadu_ps(table + 8));
#else
  return _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_loadu_ps(table), code),
                          _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + 8), code),
                          _mm256_castsi256_ps(_mm256_slli_epi32(code, 28)));
#endif
}
/// ggml's 16-value tables as floats, from the definitions (core/ggml_grids.hpp, core/ggml_quants.hpp).
inline constexpr auto kIq4Floats = [] {
  std::array<float, 16> t{};
  for (int c = 0; c < 16; ++c) t[c] = static_cast<float>(kIq4nlValues[c]);
  return t;
}();
inline constexpr auto kFp4DoubledFloats = [] {
  std::array<float, 16> t{};
  for (int c = 0; c < 16; ++c) t[c] = static_cast<float>(mxfp4_doubled_value(static_cast<uint32_t>(c)));  // code 8: +0
  return t;
}();
/// One of ggml's 16-entry integer tables (IQ4's values, fp4's doubled values) as floats and as
/// bytes biased by 128 (written twice: one copy a 128-bit lane, for an in-lane byte shuffle).
struct Table16 {
  std::array<float, 16> values;
  std::array<uint8_t, 32> biased;
};
constexpr Table16 make_table16(const std::array<float, 16>& values) {
  Table16 t{values, {}};
  for (int c = 0; c < 32; ++c) t.biased[c] = static_cast<uint8_t>(static_cast<int>(values[c % 16]) + 128);
  return t;
}
inline constexpr Table16 kIq4Table = make_table16(kIq4Floats), kFp4DoubledTable = make_table16(kFp4DoubledFloats);
/// scale · table[code], each lane's code from nibble_index, scale128 = 128·scale (exact; the callers
/// compute it where the scale changes): one rounding of the exact product, the scalar definition's
/// (IQ4's d·value, NVFP4's doubled value times its half scale). By default table16's value times
/// the scale. Where lane-crossing permutes are slow (DS41_HOST_SLOW_LANE_PERMUTE, without
/// AVX-512VL, whose table16 is one permute): the biased byte u by one in-lane byte shuffle, then
/// u·scale − 128·scale in one FMA. u·scale (8 + 16 significant bits at most: every scale here is an
/// f16 d, d·(ls − 32) or a UE4M3 half scale) and 128·scale are exact, so their difference is
/// scale·table[code] exactly; a zero comes out +0 (exact_mul_sub says why that is the same sum).
inline __m256 scaled_table16(const Table16& table, __m256i code, __m256 scale, __m256 scale128) {
#if defined(DS41_HOST_SLOW_LANE_PERMUTE) && !defined(__AVX512VL__)
  const __m256i index = _mm256_or_si256(code, _mm256_set1_epi32(static_cast<int>(0x80808000u)));  // bytes 1..3 give 0
  const __m256i u = _mm256_shuffle_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(table.biased.data())), index);
  return exact_mul_sub(_mm256_cvtepi32_ps(u), scale, scale128);
#else
  (void)scale128;
  return _mm256_mul_ps(scale, table16(table.values.data(), code));
#endif
}
/// 128·scale, exact (scaled_table16's operand).
inline __m256 times128(__m256 scale) { return _mm256_mul_ps(scale, _mm256_set1_ps(128.0f)); }
/// nvfp4_half_scale of each lane's scale byte x (0..255): 0x7F gives 0; exponent 0 man·2^-10;
/// else (1 + man/8)·2^(e−8) built from its bits.
inline __m256 nvfp4_half_scales(__m256i x) {
  const __m256i e = _mm256_and_si256(_mm256_srli_epi32(x, 3), _mm256_set1_epi32(0xF)), man = _mm256_and_si256(x, _mm256_set1_epi32(7));
  const __m256 normal = _mm256_castsi256_ps(
      _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(119)), 23), _mm256_slli_epi32(man, 20)));
  const __m256 sub = _mm256_mul_ps(_mm256_cvtepi32_ps(man), _mm256_set1_ps(0x1p-10f));
  const __m256 v = _mm256_blendv_ps(normal, sub, _mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
  return _mm256_andnot_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x, _mm256_set1_epi32(0x7F))), v);
}
/// The 32-value legacy types and IQ4_NL: columns [0, n) (n a multiple of 32) of G panels, as
/// decode_panels. kFive: Q5's joined 5-bit codes (ggml_panels.hpp); kMin: the types with m (value
/// q·d + m, else (q − off)·d); kNl: IQ4_NL (d·value[q]). Each value as the scalar definition's:
/// (q − off)·d and q·d are exact in f32 (11 + 5 bits), so q·d − off·d and q·d + m in one FMA
/// are its bits (a zero may come out +0 for its −0, which a sum from +0 never tells apart).
template <GgmlType t, int G, bool kFive, bool kMin, bool kNl, class Sink>
DS41_ALWAYS_INLINE Sink decode_panels_q32(const uint8_t* const* pb, int n, Sink sink) {
  constexpr int hb = ggml_panel_header_bytes(t), q = ggml_panel_field_offset(t, 0);
  static_assert(ggml_panel_layout(t).joined == kFive);
  constexpr long pbb = ggml_panel_block_bytes(t);
  const __m256 off = _mm256_set1_ps(kFive ? 16.0f : 8.0f);
#if defined(__AVX512VL__)
  constexpr bool kInPlace = !kFive && !kNl;  // Q4_0/Q4_1: nibbles_in_place, d·16^−i (Q5: joined_operand)
#else
  constexpr bool kInPlace = false;
#endif
  __m256 v[G], vd[G], vm[G], ds[G];
  for (int b = 0; b < n / 32; ++b) {
    const long at = b * pbb;
    DS41_UNROLL for (int g = 0; g < G; ++g) {
      vd[g] = header_f16(pb[g] + at, hb, 0);
      if constexpr (kMin) vm[g] = header_f16(pb[g] + at, hb, 2);
      else if constexpr (kNl) vm[g] = times128(vd[g]);
      else vm[g] = _mm256_mul_ps(vd[g], off);  // off·d, exact
#if defined(__AVX512VL__)
      if constexpr (kInPlace) ds[g] = _mm256_mul_ps(vd[g], nibble_place_down());
#endif
      if constexpr (kFive) ds[g] = joined_scale<5>(vd[g]);
    }
    for (int l = 0; l < 32; ++l) {
      const int e = 32 * b + l;
      DS41_UNROLL for (int g = 0; g < G; ++g) {
        const uint8_t* col = pb[g] + at + q;
        if constexpr (kNl) {
          v[g] = scaled_table16(kIq4Table, nibble_index(col, l), vd[g], vm[g]);
          continue;
        }
        __m256 c, scale = vd[g];
        if constexpr (kFive) {
          c = joined_operand<5>(col + 5 * l, l == 31);
          scale = ds[g];
        } else if constexpr (kInPlace) {
#if defined(__AVX512VL__)
          c = nibbles_in_place(col + 4 * l);
          scale = ds[g];
#endif
        } else {
          c = _mm256_cvtepi32_ps(field_codes<4, 0>(col, l));
        }
        v[g] = kMin ? exact_mul_add(c, scale, vm[g]) : exact_mul_sub(c, scale, vm[g]);
      }
      sink(e, v);
    }
  }
  return sink;
}

/// Columns [0, n) of G panels' blocks (pb[g]: panel g's first block; n whole blocks, F16 any n):
/// sink(e, v) with v[g] column e of panel g; returns the sink. The G panels advance side by side so
/// that a sink that adds into G accumulators runs G independent chains (the decode GEMV's fused
/// path). The sink is taken and given back by value: its accumulators are then this function's
/// own, which the compiler keeps in registers; reached through a reference they would be stored
/// and reloaded at every column, since the byte loads of the codes may alias anything (that cost
/// the decode GEMV about half its time).
template <GgmlType t, int G, class Sink>
inline Sink decode_panels(const uint8_t* const* pb, int n, Sink sink) {
  using namespace ggml_detail;
  // the K-quants' per-block scales: each row's scale bytes gathered as 32-bit words once a block
  // (3-4 gathers; a gather per scale byte, 16-20 a block, left Q4_K 10% slower than scalar
  // extraction), the integers taken from them lane by lane as the scalar helpers do (k_scale_min,
  // q3_K_scale), then d·scale (and dmin·min) as vectors
  const int hb = ggml_panel_header_bytes(t);
  const auto f16 = [&](int g, int o) { return header_f16(pb[g], hb, header_at(t, o)); };
  const __m256i m4 = _mm256_set1_epi32(0xF);
  __m256 v[G], vd[G], vm[G], d[G], dmin[G];
  {  // one type per instantiation (visit_panel_type): each compiles alone
    if constexpr (t == GgmlType::kF16) {
      for (int e = 0; e < n; ++e) {
        DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb[g] + 16 * e)));
        sink(e, v);
      }
      return sink;
    } else if constexpr (t == GgmlType::kQ8_0) {
      for (int b = 0; b < n / 32; ++b) {
        const long at = static_cast<long>(b) * 8 * 34;
        DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb[g] + at)));
        for (int j = 0; j < 32; ++j) {
          DS41_UNROLL for (int g = 0; g < G; ++g) {
            const __m256i c = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(pb[g] + at + 16 + 8 * j)));
            v[g] = _mm256_mul_ps(_mm256_cvtepi32_ps(c), vd[g]);
          }
          sink(32 * b + j, v);
        }
      }
      return sink;
    } else if constexpr (t == GgmlType::kQ2_K) {  // scales[s]: scale in the low nibble, min in the high one
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = f16(g, 80), dmin[g] = f16(g, 82);
      const int q = ggml_panel_field_offset(t, 0);
      __m256i words[G][4];  // scales[0..15] as four words a row: four gathers a block
      DS41_UNROLL for (int g = 0; g < G; ++g)
        for (int w = 0; w < 4; ++w) words[g][w] = header_words(pb[g], hb, header_at(t, 4 * w));
#if defined(DS41_HOST_SLOW_LANE_PERMUTE)
      // codes in place (field_in_place): d·4^−i (exact), so vd = d·scale·4^−i, the same exact
      // product with the code q·4^i. A rolled loop: unrolled by 4 as below it ran 2.32 cycles, not 2.07
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = _mm256_mul_ps(d[g], in_place_down<2>());
#endif
      for (int s = 0; s < 16; ++s) {
        DS41_UNROLL for (int g = 0; g < G; ++g) {
          const __m256i sm = word_byte(words[g][s / 4], s % 4);
          vd[g] = scaled_lanes(d[g], _mm256_and_si256(sm, m4)), vm[g] = scaled_lanes(dmin[g], _mm256_srli_epi32(sm, 4));
        }
#if defined(DS41_HOST_SLOW_LANE_PERMUTE)
        for (int l = 0; l < 16; ++l) {
          const int e = 16 * s + l;
          DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = exact_mul_sub(vd[g], field_in_place<2>(pb[g] + q, e, ggml_block_elems(t)), vm[g]);
          sink(e, v);
        }
#else
        const __m256 codes2 = _mm256_setr_ps(0, 1, 2, 3, 0, 1, 2, 3);
        for (int l = 0; l < 16; l += 4) {
          const int e0 = 16 * s + l;
          unrolled<4>([&](auto J) DS41_LAMBDA_INLINE {
            DS41_UNROLL for (int g = 0; g < G; ++g)
              v[g] = exact_mul_sub(vd[g], field_values2<J>(pb[g] + q, e0, codes2), vm[g]);
            sink(e0 + J, v);
          });
        }
#endif
      }
      return sink;
    } else if constexpr (t == GgmlType::kQ3_K) {  // q3_K_scale: low 4 bits from scales[s % 8] (nibble s / 8), 2 high bits from scales[8 + s % 4]
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = f16(g, 108);
      // the joined 3-bit code c (low bits | high bit << 2, ggml_panels.hpp) is the value + 4: a permute
      // of the table −4..3 by it (which reads its 3 low bits) is the value as a float; where that
      // permute is slow (DS41_HOST_SLOW_LANE_PERMUTE), c·vd − 4·vd in one FMA (c·vd and 4·vd are exact,
      // 20 and 19 bits, so their difference is vd·(c − 4) exactly; a zero comes out +0, which a sum
      // from +0 never tells from −0, as exact_mul_sub), c taken in place (field_in_place). Elsewhere column
      // e's 24 bits are read as the 32-bit word that ends with them (its first byte the column
      // before's, or the headers' last: never past the panel block)
      const int q = ggml_panel_field_offset(t, 0);
      static_assert(ggml_panel_layout(t).joined && ggml_panel_field_offset(t, 0) >= 1);
      const __m256i m3 = _mm256_set1_epi32(3), m32 = _mm256_set1_epi32(32);
      __m256i words[G][3];  // scales[0..11] as three words a row: three gathers a block
      DS41_UNROLL for (int g = 0; g < G; ++g)
        for (int w = 0; w < 3; ++w) words[g][w] = header_words(pb[g], hb, header_at(t, 96 + 4 * w));
      for (int s = 0; s < 16; ++s) {
        DS41_UNROLL for (int g = 0; g < G; ++g) {
          const auto sb = [&](int k) { return word_byte(words[g][k / 4], k % 4); };  // scales[k]
          const __m256i low = _mm256_and_si256(_mm256_srli_epi32(sb(s % 8), 4 * (s / 8)), m4);
          const __m256i high = _mm256_and_si256(_mm256_srli_epi32(sb(8 + s % 4), 2 * (s / 4)), m3);
          vd[g] = scaled_lanes(d[g], _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), m32));
#if defined(DS41_HOST_SLOW_LANE_PERMUTE)
          vm[g] = _mm256_mul_ps(vd[g], _mm256_set1_ps(4.0f));  // 4·vd, exact
#endif
        }
#if defined(DS41_HOST_SLOW_LANE_PERMUTE)
        // c in place (field_in_place): c·2^3i times vd·2^−3i is c·vd exactly; 4·vd as it was
        DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = _mm256_mul_ps(vd[g], in_place_down<3>());
        for (int l = 0; l < 16; ++l) {
          const int e = 16 * s + l;
          DS41_UNROLL for (int g = 0; g < G; ++g)
            v[g] = exact_mul_sub(field_in_place<3>(pb[g] + q, e, ggml_block_elems(t)), vd[g], vm[g]);
          sink(e, v);
        }
#else
        const __m256 values = _mm256_setr_ps(-4, -3, -2, -1, 0, 1, 2, 3);
        const __m256i shifts = _mm256_setr_epi32(8, 11, 14, 17, 20, 23, 26, 29);
        for (int l = 0; l < 16; ++l) {
          const int e = 16 * s + l;
          DS41_UNROLL for (int g = 0; g < G; ++g) {
            const __m256i word = _mm256_set1_epi32(static_cast<int>(load_u32(pb[g] + q + 3 * e - 1)));
            v[g] = _mm256_mul_ps(vd[g], _mm256_permutevar8x32_ps(values, _mm256_srlv_epi32(word, shifts)));
          }
          sink(e, v);
        }
#endif
      }
      return sink;
    } else if constexpr (t == GgmlType::kQ4_K || t == GgmlType::kQ5_K) {  // k_scale_min over scales[12] at block byte 4
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = f16(g, 0), dmin[g] = f16(g, 2);
      const int q = ggml_panel_field_offset(t, 0);
      __m256i words[G][3];  // scales[0..11] as three words a row: three gathers a block
      DS41_UNROLL for (int g = 0; g < G; ++g)
        for (int w = 0; w < 3; ++w) words[g][w] = header_words(pb[g], hb, header_at(t, 4 + 4 * w));
      for (int j = 0; j < 8; ++j) {
        DS41_UNROLL for (int g = 0; g < G; ++g) k_scale_min_lanes(words[g], j, d[g], dmin[g], vd[g], vm[g]);
        if constexpr (t == GgmlType::kQ4_K) {  // a word per column (unrolled by 4 it ran 15% slower: 683 -> 802 us)
#if defined(__AVX512VL__)
          // the nibbles left in place (nibbles_in_place), vd·16^−i: no shift
          DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = _mm256_mul_ps(vd[g], nibble_place_down());
          for (int l = 0; l < 32; ++l) {
            const int e = 32 * j + l;
            DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = exact_mul_sub(nibbles_in_place(pb[g] + q + 4 * e), vd[g], vm[g]);
            sink(e, v);
          }
#else
          for (int l = 0; l < 32; ++l) {
            const int e = 32 * j + l;
            DS41_UNROLL for (int g = 0; g < G; ++g)
              v[g] = exact_mul_sub(vd[g], _mm256_cvtepi32_ps(field_codes<4, 0>(pb[g] + q, e)), vm[g]);
            sink(e, v);
          }
#endif
        } else {
          // Q5_K: the joined 5-bit code (low nibble | fifth bit << 4), column e's 5 bytes at q + 5e
          DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = joined_scale<5>(vd[g]);
          for (int l = 0; l < 32; ++l) {
            const int e = 32 * j + l;
            DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = exact_mul_sub(joined_operand<5>(pb[g] + q + 5 * e, e == 255), vd[g], vm[g]);
            sink(e, v);
          }
        }
      }
      return sink;
    } else if constexpr (t == GgmlType::kQ6_K) {  // scales[s]: int8 at block byte 192 + s
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = f16(g, 208);
      // the joined 6-bit code c = ql | qh << 4 (joined_codes<6>), column e's 6 bytes at q + 6e. The
      // value (c − 32)·vd is exact in f32 (18 + 6 bits at most), so c·vd − 32·vd in one FMA is the
      // scalar definition's product, bit for bit, without the integer subtract (a zero comes out +0
      // where the product gives −0 for vd < 0: a sum from +0 never tells them apart)
      const int q = ggml_panel_field_offset(t, 0);
      static_assert(ggml_panel_layout(t).joined);
      __m256 vd32[G];
      __m256i words[G][4];  // scales[0..15] as four words a row: four gathers a block
      DS41_UNROLL for (int g = 0; g < G; ++g)
        for (int w = 0; w < 4; ++w) words[g][w] = header_words(pb[g], hb, header_at(t, 192 + 4 * w));
      for (int s = 0; s < 16; ++s) {  // 16 elements share a scale: scales[e / 16], an int8
        DS41_UNROLL for (int g = 0; g < G; ++g)
          vd[g] = scaled_lanes(d[g], _mm256_srai_epi32(_mm256_slli_epi32(words[g][s / 4], 24 - 8 * (s % 4)), 24)),
          vd32[g] = _mm256_mul_ps(vd[g], _mm256_set1_ps(32.0f));
        DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = joined_scale<6>(vd[g]);  // after vd32: 32·vd is not scaled
        for (int l = 0; l < 16; ++l) {
          const int e = 16 * s + l;
          DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = exact_mul_sub(joined_operand<6>(pb[g] + q + 6 * e, e == 255), vd[g], vd32[g]);
          sink(e, v);
        }
      }
      return sink;
    } else if constexpr (t == GgmlType::kQ4_0) {
      return decode_panels_q32<t, G, false, false, false>(pb, n, sink);
    } else if constexpr (t == GgmlType::kQ4_1) {
      return decode_panels_q32<t, G, false, true, false>(pb, n, sink);
    } else if constexpr (t == GgmlType::kQ5_0) {
      return decode_panels_q32<t, G, true, false, false>(pb, n, sink);
    } else if constexpr (t == GgmlType::kQ5_1) {
      return decode_panels_q32<t, G, true, true, false>(pb, n, sink);
    } else if constexpr (t == GgmlType::kIQ4_NL) {
      return decode_panels_q32<t, G, false, false, true>(pb, n, sink);
    } else if constexpr (t == GgmlType::kIQ4_XS) {  // group j's scale: scales_l's nibble j (bytes 4..7) and bits 2j of scales_h (bytes 2..3)
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = f16(g, 0);
      const int q = ggml_panel_field_offset(t, 0);
      __m256i words[G][2];  // bytes 0..3 (d, scales_h) and 4..7 (scales_l): two gathers a block
      DS41_UNROLL for (int g = 0; g < G; ++g)
        for (int w = 0; w < 2; ++w) words[g][w] = header_words(pb[g], hb, header_at(t, 4 * w));
      const __m256i m3 = _mm256_set1_epi32(3), m32 = _mm256_set1_epi32(32);
      for (int j = 0; j < 8; ++j) {
        DS41_UNROLL for (int g = 0; g < G; ++g) {
          const __m256i low = _mm256_and_si256(_mm256_srli_epi32(words[g][1], 4 * j), m4);  // byte j/2, nibble j%2
          const __m256i high = _mm256_and_si256(_mm256_srli_epi32(words[g][0], 16 + 2 * j), m3);
          vd[g] = scaled_lanes(d[g], _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), m32));
          vm[g] = times128(vd[g]);
        }
        for (int l = 0; l < 32; ++l) {
          const int e = 32 * j + l;
          DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = scaled_table16(kIq4Table, nibble_index(pb[g] + q, e), vd[g], vm[g]);
          sink(e, v);
        }
      }
      return sink;
    } else if constexpr (t == GgmlType::kTQ2_0) {  // (code − 1)·d
      DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = f16(g, 64);
      const int q = ggml_panel_field_offset(t, 0);
#if defined(DS41_HOST_SLOW_LANE_PERMUTE)
      // codes in place (field_in_place, as Q2_K): q·4^i times d·4^−i minus d in one FMA (q·d and d
      // are exact, so the difference is (q − 1)·d exactly; a zero comes out +0, as exact_mul_sub)
      DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = _mm256_mul_ps(d[g], in_place_down<2>());
      for (int e = 0; e < n; ++e) {
        DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = exact_mul_sub(vd[g], field_in_place<2>(pb[g] + q, e, ggml_block_elems(t)), d[g]);
        sink(e, v);
      }
#else
      const __m256 minus_one = _mm256_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2);  // code − 1
      for (int e0 = 0; e0 < n; e0 += 4)
        unrolled<4>([&](auto J) DS41_LAMBDA_INLINE {
          DS41_UNROLL for (int g = 0; g < G; ++g)
            v[g] = _mm256_mul_ps(field_values2<J>(pb[g] + q, e0, minus_one), d[g]);
          sink(e0 + J, v);
        });
#endif
      return sink;
    } else if constexpr (t == GgmlType::kQ1_0 || t == GgmlType::kQ2_0) {  // Q1_0: d where the bit is set, −d where not; Q2_0: (q − 1)·d
      const bool one = t == GgmlType::kQ1_0;
      const int be = one ? 128 : 64, q = ggml_panel_field_offset(t, 0);
      const long pbb = ggml_panel_block_bytes(t);
      const __m256i zero = _mm256_setzero_si256();
      const __m256 minus_one = _mm256_setr_ps(-1, 0, 1, 2, -1, 0, 1, 2);  // Q2_0: code − 1
      const __m256 sign = _mm256_set1_ps(-0.0f);
      for (int b = 0; b < n / be; ++b) {
        const long at = b * pbb;
        DS41_UNROLL for (int g = 0; g < G; ++g) d[g] = header_f16(pb[g] + at, hb, 0);
#if defined(__AVX512VL__)
        if constexpr (t == GgmlType::kQ1_0) {  // column e's byte is its 8 rows' bits: a mask, one blend of d and −d
          DS41_UNROLL for (int g = 0; g < G; ++g) vm[g] = _mm256_xor_ps(d[g], sign);  // −d, as the scalar code's neg_d
          for (int l = 0; l < be; ++l) {
            DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = _mm256_mask_blend_ps(static_cast<__mmask8>(pb[g][at + q + l]), vm[g], d[g]);
            sink(be * b + l, v);
          }
          continue;
        }
#endif
        for (int l = 0; l < be; l += 4)
          unrolled<4>([&](auto J) DS41_LAMBDA_INLINE {
            DS41_UNROLL for (int g = 0; g < G; ++g) {
              if (one) {
                const __m256i clear = _mm256_cmpeq_epi32(field_codes<1, J>(pb[g] + at + q, l), zero);
                v[g] = _mm256_xor_ps(d[g], _mm256_and_ps(_mm256_castsi256_ps(clear), sign));
              } else {
                v[g] = _mm256_mul_ps(field_values2<J>(pb[g] + at + q, l, minus_one), d[g]);
              }
            }
            sink(be * b + l + J, v);
          });
      }
      return sink;
    } else if constexpr (t == GgmlType::kNVFP4) {  // sub-block s of 16: doubled e2m1 · half of UE4M3 scale s (nvfp4_half_scale)
      const int q = ggml_panel_field_offset(t, 0);
      const long pbb = ggml_panel_block_bytes(t);
      for (int b = 0; b < n / 64; ++b) {
        const long at = b * pbb;
        __m256i scales[G];  // the four scale bytes of each lane's row: one gather
        DS41_UNROLL for (int g = 0; g < G; ++g) scales[g] = header_words(pb[g] + at, hb, 0);
        for (int sb = 0; sb < 4; ++sb) {
          DS41_UNROLL for (int g = 0; g < G; ++g) vd[g] = nvfp4_half_scales(word_byte(scales[g], sb)), vm[g] = times128(vd[g]);
          for (int j = 0; j < 16; ++j) {
            const int e = 16 * sb + j;
            DS41_UNROLL for (int g = 0; g < G; ++g) v[g] = scaled_table16(kFp4DoubledTable, nibble_index(pb[g] + at + q, e), vd[g], vm[g]);
            sink(64 * b + e, v);
          }
        }
      }
      return sink;
    } else {
      static_assert(t != t, "decode_panels: not a panel type");
      return sink;
    }
  }
}

}  // namespace ds41::host_ggml
#include "../../core/fp_exact_end.hpp"
#endif  // DS41_HOST_GGML_PANELS
