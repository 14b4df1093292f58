// ds41/backend/host/ggml_slot_rows.hpp — the 2- and 3-bit IQ grid types (IQ2_XXS, IQ2_XS, IQ2_S,
// IQ3_XXS, IQ3_S) decoded 8 rows to a vector with AVX2, for gemv_ggml.hpp's row-major path where
// ggml_grid_rows512.hpp is not compiled (no AVX-512 VBMI) or not asked for (VectorIsa::kAvx2).
//
// Why: rows are lanes (one chain of adds per output row), and these types store a row's 8
// consecutive values as one grid point (a "slot": db·(grid byte)·(±1), ggml_row_decoders.hpp's
// grid_slots), so they have no 8-row panels. Decoding a row at a time to floats and transposing
// 8x8 floats took ~10 cycles a column of 8 rows on Zen 3: 3-5x ggml's time at T = 1
// (docs/PERFORMANCE.md, session 39).
//
// How: the transpose is of bytes, before anything is widened.
// - A block of 8 rows is decoded by the scalar slot code (grid_slots) into slot order
//   (GroupBlock): each slot's 8 codes of each row as one u64 of int8, the magnitudes negated
//   where their sign bits say (signed_bytes: a byte mask from one table load, then an xor and an
//   add), and the slot's scale.
// - Two slots' 8 rows (128 bytes, the slots side by side in the two 128-bit lanes) are transposed
//   to columns in 12 in-lane shuffles (no lane-crossing permute: Zen 3 runs those at ~1.3 cycles
//   each), so that a column's 8 rows are 8 consecutive bytes.
// - Column c: those bytes sign-extended to 8 lanes, converted (exactly), times the row's scale.
//   The scalar code rounds db·magnitude and then multiplies by ±1, which is exact, and rounding to
//   nearest is symmetric, so db·(−magnitude) is the same value.
// Hot in cache on Zen 3 (T = 1) this takes 4.6-7.5 cycles a column of 8 rows, the row decoders
// with the float transpose 7.6-9.9; most of what is left is the scalar decode (~10 instructions a
// row's slot: a grid load, a sign mask load, the signs, the store).
//
// tests/test_ggml_linear.cpp holds every type's output to MatrixView::dot (the AVX2 kernels are
// run there on every build that has them).
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <array>
#include <cstdint>
#include <type_traits>
#include "../../core/ggml_quants.hpp"
#include "ggml_row_decoders.hpp"  // grid_slots
#include "unrolled.hpp"

#if defined(DS41_HOST_AVX2)
#define DS41_HOST_GGML_SLOT_ROWS 1
#include <immintrin.h>

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml::slot_rows {

using ds41::host_ggml::grid_slot_type;

/// A sign byte as a byte mask: byte j 0xFF where bit j is set (column j negative), else 0; and the
/// same for ggml's 7-bit sign indices (ksigns). SignMask is the slot code's sign policy
/// (ggml_row_decoders.hpp's grid_slots): one load instead of two for the indexed types.
inline constexpr auto kSignMask8 = [] {
  std::array<uint64_t, 256> t{};
  for (int s = 0; s < 256; ++s)
    for (int j = 0; j < 8; ++j) t[s] |= static_cast<uint64_t>((s >> j) & 1 ? 0xFF : 0x00) << (8 * j);
  return t;
}();
inline constexpr auto kSignMask7 = [] {
  std::array<uint64_t, 128> t{};
  for (int i = 0; i < 128; ++i) t[i] = kSignMask8[kIq2xsSigns[i]];
  return t;
}();
struct SignMask {
  static DS41_ALWAYS_INLINE uint64_t from_index(uint32_t i) { return kSignMask7[i]; }
  static DS41_ALWAYS_INLINE uint64_t from_byte(uint8_t b) { return kSignMask8[b]; }
};
/// Each byte of mags (a magnitude, 1..127: every grid byte is) negated where its mask byte is
/// 0xFF, as int8: ~a + 1 is −a, and no byte carries into the next (~a + 1 <= 0xFF for a >= 1).
DS41_ALWAYS_INLINE uint64_t signed_bytes(uint64_t mags, uint64_t mask) {
  return (mags ^ mask) + (mask & 0x0101010101010101ull);
}

/// One block of 8 rows in slot order.
struct GroupBlock {
  /// [slot pair][row pair][slot parity][row parity]: one 32-byte load holds two slots' (one 128-bit
  /// lane each) two rows; each the slot's 8 values' signed codes (signed_bytes)
  alignas(32) uint64_t codes[16][4][2][2];
  alignas(32) float db[16][8];  // [16-column half group][row]: every slot type's scale holds 16 columns or more
};

/// Block `b` of rows row0 .. row0 + 7 (rb bytes apart) into gb.
template <GgmlType t>
DS41_ALWAYS_INLINE void decode_group(const uint8_t* blk0, long rb, GroupBlock& gb) {
  for (int i = 0; i < 8; ++i) {
    uint64_t* codes = &gb.codes[0][i / 2][0][i % 2];  // slot s at codes[16·(s / 2) + 2·(s % 2)]
    float* db = &gb.db[0][i];
    grid_slots<t, SignMask>(blk0 + i * rb, [=](int s, float scale, uint64_t mags, uint64_t mask) DS41_LAMBDA_INLINE {
      codes[16 * (s / 2) + 2 * (s % 2)] = signed_bytes(mags, mask);
      if (s % 2 == 0) db[8 * (s / 2)] = scale;  // both slots of a half group have the same scale
    });
  }
}

/// Slot pair P of a group as columns: out[k] (k = 0..3) holds, in its low lane, columns 2k and
/// 2k + 1 of slot 2P (8 bytes each, rows 0..7) and in its high lane the same of slot 2P + 1.
DS41_ALWAYS_INLINE void transpose_pair(const GroupBlock& gb, int P, __m256i out[4]) {
  // within a lane: row A's 8 bytes, then row B's -> (A, B) of column c as 16-bit unit c
  const __m256i interleave = _mm256_setr_epi8(0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15,  //
                                              0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
  __m256i q[4];
  DS41_UNROLL for (int p = 0; p < 4; ++p)
    q[p] = _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(gb.codes[P][p])), interleave);
  const __m256i lo01 = _mm256_unpacklo_epi16(q[0], q[1]), hi01 = _mm256_unpackhi_epi16(q[0], q[1]);  // columns 0-3 / 4-7, rows 0-3
  const __m256i lo23 = _mm256_unpacklo_epi16(q[2], q[3]), hi23 = _mm256_unpackhi_epi16(q[2], q[3]);  // rows 4-7
  out[0] = _mm256_unpacklo_epi32(lo01, lo23), out[1] = _mm256_unpackhi_epi32(lo01, lo23);
  out[2] = _mm256_unpacklo_epi32(hi01, hi23), out[3] = _mm256_unpackhi_epi32(hi01, hi23);
}

/// The 256 columns of G groups' blocks (gb[g]: rows 8g .. 8g + 7 of a tile): sink(e, v) with v[g]
/// column e of group g, e from 0; returns the sink (taken by value: gemv_ggml.hpp's decode_panels
/// says why).
template <int G, class Sink>
DS41_ALWAYS_INLINE Sink group_columns(const GroupBlock* gb, Sink sink) {
  alignas(32) uint8_t bytes[G][4][32];  // transpose_pair's vectors, stored for 8-byte loads
  for (int P = 0; P < 16; ++P) {
    DS41_UNROLL for (int g = 0; g < G; ++g) {
      __m256i cols[4];
      transpose_pair(gb[g], P, cols);
      DS41_UNROLL for (int k = 0; k < 4; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(bytes[g][k]), cols[k]);
    }
    // read the columns back from memory, 8 bytes at a time (a load and one widening each): left to
    // itself the compiler extracts them from the registers instead (two to three shuffles each)
    // and, short of registers, spills most of what it computes
    __asm__ volatile("" : : "r"(bytes) : "memory");
    __m256 db[G];
    DS41_UNROLL for (int g = 0; g < G; ++g) db[g] = _mm256_load_ps(gb[g].db[P]);
    DS41_UNROLL for (int h = 0; h < 2; ++h)  // slot 2P + h
      // one column at a time (not unrolled: unrolled, the compiler computed the 8 columns ahead of
      // their sums and spilled them)
      for (int c = 0; c < 8; ++c) {
        __m256 v[G];
        DS41_UNROLL for (int g = 0; g < G; ++g) {
          const __m256i code = _mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes[g][c / 2] + 16 * h + 8 * (c % 2))));
          v[g] = _mm256_mul_ps(db[g], _mm256_cvtepi32_ps(code));
        }
        sink(16 * P + 8 * h + c, v);
      }
  }
  return sink;
}

}  // namespace ds41::host_ggml::slot_rows

namespace ds41::host_ggml {
/// f(std::integral_constant<GgmlType, t>{}) for the slot type t (grid_slot_type), through the
/// project's one dispatch from the runtime type (core/ggml_quants.hpp's visit_ggml_block_format),
/// as gemv_ggml.hpp's visit_panel_type.
template <class F>
void visit_slot_type(GgmlType t, F&& f) {
  visit_ggml_block_format(
      t,
      [&](auto format) {
        constexpr GgmlType kType = decltype(format)::kType;
        if constexpr (grid_slot_type(kType)) f(std::integral_constant<GgmlType, kType>{});
      },
      [] {});
}
}  // namespace ds41::host_ggml
#include "../../core/fp_exact_end.hpp"
#endif  // DS41_HOST_AVX2
