// ds41/backend/host/ggml_row_decoders.hpp — AVX2 decoders of one row's GGUF blocks for the types
// the host keeps row-major (no 8-row panels): the IQ types with grids (IQ1_S, IQ1_M, IQ2_XXS,
// IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and TQ1_0. gemv_ggml.hpp's row-major path decodes 8 rows with
// them and transposes the floats to columns.
//
// Each gives exactly core/ggml_quants_iq.hpp's values (tests/test_ggml_quants.cpp runs them on every
// vector block): 8 elements at a time, a grid point's bytes widened to 8 lanes, times the group
// scale (one rounding, as the scalar code's product), then the signs flipped (the scalar code's
// ·(±1) is exact, so flipping the sign bit is the same; a +0 becomes −0 as 0·(−1) does). IQ1's
// values are dl·(grid + shift): the sum is exact, then one product, as the scalar code.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include <cstdint>
#include "../../core/ggml_quants.hpp"
#if defined(DS41_HOST_AVX2)
#include <immintrin.h>
#endif

#include "../../core/fp_exact_begin.hpp"
namespace ds41::host_ggml {

#if defined(DS41_HOST_AVX2)
#define DS41_HOST_GGML_ROW_DECODERS 1
namespace row_detail {
using ggml_detail::load_f16;
using ggml_detail::load_u16;
using ggml_detail::load_u32;

/// out[0..8) = (db · magnitude j) with sign bit j of `signs` applied; magnitude j is byte j of mags.
inline void put8(float* out, __m256 db, uint64_t mags, uint32_t signs) {
  const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256i mag = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(mags)));
  const __m256i neg = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(static_cast<int>(signs)), lane_bit), lane_bit);
  const __m256 v = _mm256_mul_ps(db, _mm256_cvtepi32_ps(mag));
  _mm256_storeu_ps(out, _mm256_xor_ps(v, _mm256_and_ps(_mm256_castsi256_ps(neg), _mm256_set1_ps(-0.0f))));
}
/// out[0..8) = dl · (int8 j of point + delta) (IQ1).
inline void put8_iq1(float* out, __m256 dl, uint64_t point, float delta) {
  const __m256i v = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(static_cast<long long>(point)));
  _mm256_storeu_ps(out, _mm256_mul_ps(dl, _mm256_add_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(delta))));
}
}  // namespace row_detail

// The grid types whose values are db·(a grid byte)·(±1), 8 columns (a "slot") to a grid point:
// each block's 32 slots as put(slot, db, mags, signs), db the slot's scale (the scalar code's f32
// expression), mags the 8 magnitudes (byte j: column j), signs what the policy S makes of the
// slot's sign byte (bit j set where column j is negative), which the block holds as ggml's 7-bit
// index into ksigns (S::from_index) or as the byte (S::from_byte). The row decoders below take the
// byte (SignByte) and write floats (put8); ggml_slot_rows.hpp takes byte masks and transposes 8
// rows' slots as bytes (the AVX2 decode of these types without AVX-512).
struct SignByte {
  static DS41_ALWAYS_INLINE uint32_t from_index(uint32_t i) { return iq2xs_signs(static_cast<int>(i)); }
  static DS41_ALWAYS_INLINE uint32_t from_byte(uint8_t b) { return b; }
};
template <class S, class Put>
DS41_ALWAYS_INLINE void iq2_xxs_slots(const uint8_t* blk, Put&& put) {
  using namespace row_detail;
  const float d = load_f16(blk);
  DS41_UNROLL for (int g = 0; g < 8; ++g) {  // unrolled: every slot index a constant
    const uint8_t* group = blk + 2 + 8 * g;
    const uint32_t aux = load_u32(group + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    DS41_UNROLL for (int l = 0; l < 4; ++l) put(4 * g + l, db, iq2xxs_grid(group[l]), S::from_index((aux >> (7 * l)) & 127u));
  }
}
/// The two IQ2 half-group scales of a scales byte: (d·(0.5 + s))·0.25 for its low and high nibble.
DS41_ALWAYS_INLINE void iq2_half_scales(float d, uint8_t sc, float db[2]) {
  db[0] = d * (0.5f + ggml_detail::to_float(sc & 0xF)) * 0.25f;
  db[1] = d * (0.5f + ggml_detail::to_float(sc >> 4)) * 0.25f;
}
template <class S, class Put>
DS41_ALWAYS_INLINE void iq2_xs_slots(const uint8_t* blk, Put&& put) {
  using namespace row_detail;
  const float d = load_f16(blk);
  DS41_UNROLL for (int g = 0; g < 8; ++g) {  // unrolled: every slot index a constant
    float db[2];
    iq2_half_scales(d, blk[66 + g], db);
    DS41_UNROLL for (int l = 0; l < 4; ++l) {
      const uint32_t q = load_u16(blk + 2 + 2 * (4 * g + l));
      put(4 * g + l, db[l / 2], iq2xs_grid(static_cast<int>(q & 511u)), S::from_index(q >> 9));
    }
  }
}
template <class S, class Put>
DS41_ALWAYS_INLINE void iq2_s_slots(const uint8_t* blk, Put&& put) {
  using namespace row_detail;
  const float d = load_f16(blk);
  DS41_UNROLL for (int g = 0; g < 8; ++g) {  // unrolled: every slot index a constant
    float db[2];
    iq2_half_scales(d, blk[74 + g], db);
    DS41_UNROLL for (int l = 0; l < 4; ++l) {
      const int index = blk[2 + 4 * g + l] | ((blk[66 + g] << (8 - 2 * l)) & 0x300);
      put(4 * g + l, db[l / 2], iq2s_grid(index), S::from_byte(blk[34 + 4 * g + l]));
    }
  }
}
template <class S, class Put>
DS41_ALWAYS_INLINE void iq3_xxs_slots(const uint8_t* blk, Put&& put) {
  using namespace row_detail;
  const float d = load_f16(blk);
  DS41_UNROLL for (int g = 0; g < 8; ++g) {  // unrolled: every slot index a constant
    const uint8_t* qs = blk + 2 + 8 * g;
    const uint32_t aux = load_u32(blk + 66 + 4 * g);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    DS41_UNROLL for (int l = 0; l < 4; ++l) {
      const uint64_t mags = iq3xxs_grid(qs[2 * l]) | static_cast<uint64_t>(iq3xxs_grid(qs[2 * l + 1])) << 32;
      put(4 * g + l, db, mags, S::from_index((aux >> (7 * l)) & 127u));
    }
  }
}
template <class S, class Put>
DS41_ALWAYS_INLINE void iq3_s_slots(const uint8_t* blk, Put&& put) {
  using namespace row_detail;
  const float d = load_f16(blk);
  DS41_UNROLL for (int g = 0; g < 8; ++g) {  // unrolled: every slot index a constant
    const float db = d * ggml_detail::to_float(1 + 2 * ((blk[106 + g / 2] >> (4 * (g % 2))) & 0xF));
    const uint8_t qh = blk[66 + g];
    DS41_UNROLL for (int l = 0; l < 4; ++l) {
      const uint8_t* qs = blk + 2 + 8 * g + 2 * l;
      const uint64_t mags = iq3s_grid(qs[0] | ((qh << (8 - 2 * l)) & 256)) |
                            static_cast<uint64_t>(iq3s_grid(qs[1] | ((qh << (7 - 2 * l)) & 256))) << 32;
      put(4 * g + l, db, mags, S::from_byte(blk[74 + 4 * g + l]));
    }
  }
}
/// Whether a type's blocks are slots (the five above).
constexpr bool grid_slot_type(GgmlType t) {
  return t == GgmlType::kIQ2_XXS || t == GgmlType::kIQ2_XS || t == GgmlType::kIQ2_S || t == GgmlType::kIQ3_XXS ||
         t == GgmlType::kIQ3_S;
}
/// The block's slots of a grid_slot_type (one branch a type, resolved at compile time).
template <GgmlType t, class S, class Put>
DS41_ALWAYS_INLINE void grid_slots(const uint8_t* blk, Put&& put) {
  if constexpr (t == GgmlType::kIQ2_XXS) iq2_xxs_slots<S>(blk, put);
  else if constexpr (t == GgmlType::kIQ2_XS) iq2_xs_slots<S>(blk, put);
  else if constexpr (t == GgmlType::kIQ2_S) iq2_s_slots<S>(blk, put);
  else if constexpr (t == GgmlType::kIQ3_XXS) iq3_xxs_slots<S>(blk, put);
  else if constexpr (t == GgmlType::kIQ3_S) iq3_s_slots<S>(blk, put);
  else static_assert(t != t, "grid_slots: not a slot type");
}
/// A row's block of a slot type as floats.
template <GgmlType t>
void decode_grid_slots(const uint8_t* blk, float* out) {
  grid_slots<t, SignByte>(blk, [out](int slot, float db, uint64_t mags, uint32_t signs) DS41_LAMBDA_INLINE {
    row_detail::put8(out + 8 * slot, _mm256_set1_ps(db), mags, signs);
  });
}
inline void decode_iq1_s(const uint8_t* blk, float* out) {
  using namespace row_detail;
  const float d = load_f16(blk);
  for (int g = 0; g < 8; ++g) {
    const uint32_t qh = load_u16(blk + 34 + 2 * g);
    const __m256 dl = _mm256_set1_ps(d * ggml_detail::to_float(static_cast<int>(2 * ((qh >> 12) & 7) + 1)));
    const float delta = (qh & 0x8000u) ? -kIq1Delta : kIq1Delta;
    DS41_UNROLL for (int l = 0; l < 4; ++l)
      put8_iq1(out + 32 * g + 8 * l, dl, iq1s_grid(static_cast<int>(blk[2 + 4 * g + l] | (((qh >> (3 * l)) & 7u) << 8))), delta);
  }
}
inline void decode_iq1_m(const uint8_t* blk, float* out) {
  using namespace row_detail;
  const float d = f16_to_f32(iq1_m_d_bits(blk));
  for (int g = 0; g < 8; ++g) {
    const uint32_t sc = load_u16(blk + 48 + 2 * (g / 2));
    const __m256 dl[2] = {_mm256_set1_ps(d * ggml_detail::to_float(static_cast<int>(2 * ((sc >> (6 * (g % 2))) & 7) + 1))),
                          _mm256_set1_ps(d * ggml_detail::to_float(static_cast<int>(2 * ((sc >> (6 * (g % 2) + 3)) & 7) + 1)))};
    DS41_UNROLL for (int l = 0; l < 4; ++l) {
      const uint32_t qh = blk[32 + 2 * g + l / 2] >> (4 * (l % 2));
      // ±1/8 by its sign bit, without a branch (the bit is random in real blocks)
      const float delta = bits_f32(f32_bits(kIq1Delta) | (qh & 8u) << 28);
      put8_iq1(out + 32 * g + 8 * l, dl[l / 2], iq1s_grid(static_cast<int>(blk[4 * g + l] | ((qh & 7u) << 8))), delta);
    }
  }
}

/// TQ1_0: base-3 digit n of each of 8 bytes, ((byte·3^n mod 256)·3) >> 8 as the scalar code,
/// minus 1, times d (one product, exact).
inline void decode_tq1_0(const uint8_t* blk, float* out) {
  const __m256 d = _mm256_set1_ps(ggml_detail::load_f16(blk + 52));
  // digit n of the 8 bytes in `bytes` (the low 8 of an xmm)
  const auto put = [&](__m128i bytes, int n, float* o) {
    const __m256i b = _mm256_cvtepu8_epi32(bytes);
    const __m256i q = _mm256_and_si256(_mm256_mullo_epi32(b, _mm256_set1_epi32(tq1_pow3(n))), _mm256_set1_epi32(0xFF));
    const __m256i digit = _mm256_srli_epi32(_mm256_mullo_epi32(q, _mm256_set1_epi32(3)), 8);
    _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(digit, _mm256_set1_epi32(1))), d));
  };
  const auto eight = [](const uint8_t* p) { return _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)); };
  float* o = out;
  for (int n = 0; n < 5; ++n, o += 32)  // qs[0..31]: 32 elements a digit
    for (int m = 0; m < 32; m += 8) put(eight(blk + m), n, o + m);
  for (int n = 0; n < 5; ++n, o += 16)  // qs[32..47]: 16 a digit
    for (int m = 0; m < 16; m += 8) put(eight(blk + 32 + m), n, o + m);
  alignas(32) float tail[8];
  const __m128i qh = _mm_cvtsi32_si128(static_cast<int>(ggml_detail::load_u32(blk + 48)));  // 4 bytes, no read past them
  for (int n = 0; n < 4; ++n) {  // qh[0..3]: 4 a digit
    put(qh, n, tail);
    for (int m = 0; m < 4; ++m) o[4 * n + m] = tail[m];
  }
}

/// The row decoder of a type, nullptr where the type has none here (its scalar definition serves).
using RowDecoder = void (*)(const uint8_t* block, float* out);
inline RowDecoder row_decoder(GgmlType t) {
  switch (t) {
    case GgmlType::kIQ2_XXS: return decode_grid_slots<GgmlType::kIQ2_XXS>;
    case GgmlType::kIQ2_XS: return decode_grid_slots<GgmlType::kIQ2_XS>;
    case GgmlType::kIQ2_S: return decode_grid_slots<GgmlType::kIQ2_S>;
    case GgmlType::kIQ3_XXS: return decode_grid_slots<GgmlType::kIQ3_XXS>;
    case GgmlType::kIQ3_S: return decode_grid_slots<GgmlType::kIQ3_S>;
    case GgmlType::kIQ1_S: return decode_iq1_s;
    case GgmlType::kIQ1_M: return decode_iq1_m;
    case GgmlType::kTQ1_0: return decode_tq1_0;
    default: return nullptr;
  }
}
#endif

}  // namespace ds41::host_ggml
#include "../../core/fp_exact_end.hpp"
