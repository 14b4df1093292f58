// ds41/core/ggml_quants_iq.hpp — the values of ggml's IQ types ("importance" quants), one block at
// a time: IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS.
//
// Most of them store, per group of 8 (or 4) elements, an index into one of ggml's grids of lattice
// points (core/ggml_grids.hpp) and the group's signs; a group of 32 has a small integer scale under
// the block's f16 d. IQ4_NL/IQ4_XS store 4-bit codes into a 16-value table. Each function computes
// what ggml's `dequantize_row_<type>` computes, in its order; every product here is exact in f32
// (an f16 significand times at most 13 more bits: group scales below 32, grid values below 64, the
// IQ4 values below 128 times IQ4_XS's scale below 33; IQ1's grid ± 1/8 has 4 bits), so the values
// need no FMA argument. Written from the block layouts in ggml-common.h; tests/test_ggml_quants.cpp
// checks each against vectors ggml's C and gguf-py agree on, which use every table entry.
#pragma once
#include <cstdint>
#include "ggml_block.hpp"
#include "ggml_grids.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

namespace ggml_detail {
/// (-1)^(bit j of signs) as the float ggml multiplies by.
DS41_HD float sign_of(uint32_t signs, int j) { return (signs & iq2xs_sign_mask(j)) ? -1.0f : 1.0f; }
/// byte j of a grid point as an integer (the magnitudes of IQ2/IQ3; IQ1's int8 values are read signed).
DS41_HD float grid_byte(uint64_t point, int j) { return to_float(static_cast<int>((point >> (8 * j)) & 0xFFu)); }
}  // namespace ggml_detail

// ---------------------------------------------------------------- IQ2_XXS: 2.06 bits per weight
using GgmlIQ2_XXS = GgmlBlockFormat<GgmlType::kIQ2_XXS, 256, 66>;
/// Bytes: d (f16), then 8 groups of 32 elements, 8 bytes each: 4 grid indices (bytes 0..3), then a
/// little-endian u32 holding 4 sign indices of 7 bits (bits 7l..7l+6 for the l-th 8 elements) and
/// the group's scale s in bits 28..31. Group scale db = (d·(0.5 + s))·0.25; element j of the l-th
/// 8 = (db·grid byte j)·(±1).
DS41_HD void dequantize_block_iq2_xxs(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int g = 0; g < 8; ++g) {
    const uint8_t* group = block + 2 + 8 * g;
    const uint32_t aux = load_u32(group + 4);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
    for (int l = 0; l < 4; ++l) {
      const uint64_t grid = iq2xxs_grid(group[l]);
      const uint8_t signs = iq2xs_signs(static_cast<int>((aux >> (7 * l)) & 127u));
      for (int j = 0; j < 8; ++j) out[32 * g + 8 * l + j] = db * grid_byte(grid, j) * sign_of(signs, j);
    }
  }
}

// ---------------------------------------------------------------- IQ2_XS: 2.31 bits per weight
using GgmlIQ2_XS = GgmlBlockFormat<GgmlType::kIQ2_XS, 256, 74>;
/// Bytes: d (f16), qs[32] (u16: grid index in bits 0..8, sign index in bits 9..15), scales[8] (two
/// 4-bit scales a group of 32: low nibble for its first 16 elements). db = (d·(0.5 + s))·0.25.
DS41_HD void dequantize_block_iq2_xs(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int g = 0; g < 8; ++g) {
    const uint8_t sc = block[66 + g];
    const float db[2] = {d * (0.5f + to_float(sc & 0xF)) * 0.25f, d * (0.5f + to_float(sc >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const uint32_t q = load_u16(block + 2 + 2 * (4 * g + l));
      const uint64_t grid = iq2xs_grid(static_cast<int>(q & 511u));
      const uint8_t signs = iq2xs_signs(static_cast<int>(q >> 9));
      for (int j = 0; j < 8; ++j) out[32 * g + 8 * l + j] = db[l / 2] * grid_byte(grid, j) * sign_of(signs, j);
    }
  }
}

// ---------------------------------------------------------------- IQ2_S: 2.56 bits per weight
using GgmlIQ2_S = GgmlBlockFormat<GgmlType::kIQ2_S, 256, 82>;
/// Bytes: d (f16), qs[32] (grid index low 8 bits), signs[32] (a byte per 8 elements), qh[8] (the
/// indices' bits 8..9, two bits per 8 elements), scales[8] (as IQ2_XS).
DS41_HD void dequantize_block_iq2_s(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  const uint8_t *qs = block + 2, *signs = block + 34, *qh = block + 66, *scales = block + 74;
  for (int g = 0; g < 8; ++g) {
    const float db[2] = {d * (0.5f + to_float(scales[g] & 0xF)) * 0.25f, d * (0.5f + to_float(scales[g] >> 4)) * 0.25f};
    for (int l = 0; l < 4; ++l) {
      const int index = qs[4 * g + l] | ((qh[g] << (8 - 2 * l)) & 0x300);
      const uint64_t grid = iq2s_grid(index);
      for (int j = 0; j < 8; ++j) out[32 * g + 8 * l + j] = db[l / 2] * grid_byte(grid, j) * sign_of(signs[4 * g + l], j);
    }
  }
}

// ---------------------------------------------------------------- IQ3_XXS: 3.06 bits per weight
using GgmlIQ3_XXS = GgmlBlockFormat<GgmlType::kIQ3_XXS, 256, 98>;
/// Bytes: d (f16), qs[64] (a grid index per 4 elements), then 8 u32 (one a group of 32: four 7-bit
/// sign indices, the group's scale in bits 28..31). db = (d·(0.5 + s))·0.5.
DS41_HD void dequantize_block_iq3_xxs(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int g = 0; g < 8; ++g) {
    const uint8_t* qs = block + 2 + 8 * g;
    const uint32_t aux = load_u32(block + 66 + 4 * g);
    const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
    for (int l = 0; l < 4; ++l) {
      const uint8_t signs = iq2xs_signs(static_cast<int>((aux >> (7 * l)) & 127u));
      const uint32_t g1 = iq3xxs_grid(qs[2 * l]), g2 = iq3xxs_grid(qs[2 * l + 1]);
      for (int j = 0; j < 4; ++j) {
        out[32 * g + 8 * l + j] = db * grid_byte(g1, j) * sign_of(signs, j);
        out[32 * g + 8 * l + j + 4] = db * grid_byte(g2, j) * sign_of(signs, j + 4);
      }
    }
  }
}

// ---------------------------------------------------------------- IQ3_S: 3.44 bits per weight
using GgmlIQ3_S = GgmlBlockFormat<GgmlType::kIQ3_S, 256, 110>;
/// Bytes: d (f16), qs[64] (grid index low 8 bits, one a 4 elements), qh[8] (bit 8 of each of a
/// group's 8 indices), signs[32] (a byte per 8 elements), scales[4] (a 4-bit scale s per group of
/// 32, low nibble first). db = d·(1 + 2s).
DS41_HD void dequantize_block_iq3_s(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  const uint8_t *qs = block + 2, *qh = block + 66, *signs = block + 74, *scales = block + 106;
  for (int g = 0; g < 8; ++g) {
    const float db = d * to_float(1 + 2 * ((scales[g / 2] >> (4 * (g % 2))) & 0xF));
    for (int l = 0; l < 4; ++l) {
      const uint32_t g1 = iq3s_grid(qs[8 * g + 2 * l] | ((qh[g] << (8 - 2 * l)) & 256));
      const uint32_t g2 = iq3s_grid(qs[8 * g + 2 * l + 1] | ((qh[g] << (7 - 2 * l)) & 256));
      for (int j = 0; j < 4; ++j) {
        out[32 * g + 8 * l + j] = db * grid_byte(g1, j) * sign_of(signs[4 * g + l], j);
        out[32 * g + 8 * l + j + 4] = db * grid_byte(g2, j) * sign_of(signs[4 * g + l], j + 4);
      }
    }
  }
}

// ---------------------------------------------------------------- IQ1_S: 1.56 bits per weight
using GgmlIQ1_S = GgmlBlockFormat<GgmlType::kIQ1_S, 256, 50>;
/// ggml's IQ1S_DELTA and IQ1M_DELTA: the shift of a group's grid values.
inline constexpr float kIq1Delta = 0.125f;
/// Element j of an IQ1 grid point (int8: -1, 0, 1) plus the group's shift, as ggml computes it.
DS41_HD float iq1_value(uint64_t point, int j, float delta) {
  return ggml_detail::to_float(static_cast<int8_t>((point >> (8 * j)) & 0xFFu)) + delta;
}
/// Bytes: d (f16), qs[32] (grid index low 8 bits, one a 8 elements), qh[8] (u16 a group of 32:
/// index bits 8..10 of its four 8s in bits 3l..3l+2, scale s in bits 12..14, the shift's sign in
/// bit 15). dl = d·(2s + 1); element = dl·(grid + shift).
DS41_HD void dequantize_block_iq1_s(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int g = 0; g < 8; ++g) {
    const uint32_t qh = load_u16(block + 34 + 2 * g);
    const float dl = d * to_float(static_cast<int>(2 * ((qh >> 12) & 7) + 1));
    const float delta = (qh & 0x8000u) ? -kIq1Delta : kIq1Delta;
    for (int l = 0; l < 4; ++l) {
      const uint64_t grid = iq1s_grid(static_cast<int>(block[2 + 4 * g + l] | (((qh >> (3 * l)) & 7u) << 8)));
      for (int j = 0; j < 8; ++j) out[32 * g + 8 * l + j] = dl * iq1_value(grid, j, delta);
    }
  }
}

// ---------------------------------------------------------------- IQ1_M: 1.75 bits per weight
using GgmlIQ1_M = GgmlBlockFormat<GgmlType::kIQ1_M, 256, 56>;
/// IQ1_M's f16 d has no field of its own: its four nibbles are the top nibbles of the four u16
/// scale words (bytes 48..55), word 0's the lowest.
DS41_HD uint16_t iq1_m_d_bits(const uint8_t* block) {
  using ggml_detail::load_u16;
  const uint32_t s0 = load_u16(block + 48), s1 = load_u16(block + 50), s2 = load_u16(block + 52), s3 = load_u16(block + 54);
  return static_cast<uint16_t>((s0 >> 12) | ((s1 >> 8) & 0x00F0u) | ((s2 >> 4) & 0x0F00u) | (s3 & 0xF000u));
}
/// Writes an IQ1_M block's d (f16 bits) where iq1_m_d_bits reads it: nibble i into the top nibble
/// of scale word i (byte 49 + 2i), the scales' bits kept.
DS41_HD void set_iq1_m_d_bits(uint8_t* block, uint16_t bits) {
  for (int i = 0; i < 4; ++i)
    block[49 + 2 * i] = static_cast<uint8_t>((block[49 + 2 * i] & 0x0F) | ((bits >> (4 * i)) & 0xF) << 4);
}
/// Bytes: qs[32] (grid index low 8 bits, one a 8 elements), qh[16] (a byte per 16 elements: index
/// bits 8..10 of the first 8 in bits 0..2 and the sign of its shift in bit 3, the second 8 in
/// bits 4..7), scales[8] (u16 words: 3-bit scales, four a word, for each half of a group of 32;
/// their top nibbles are d). dl = d·(2s + 1); element = dl·(grid + shift).
DS41_HD void dequantize_block_iq1_m(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = f16_to_f32(iq1_m_d_bits(block));
  for (int g = 0; g < 8; ++g) {
    const uint32_t sc = load_u16(block + 48 + 2 * (g / 2));
    const float dl[2] = {d * to_float(static_cast<int>(2 * ((sc >> (6 * (g % 2))) & 7) + 1)),
                         d * to_float(static_cast<int>(2 * ((sc >> (6 * (g % 2) + 3)) & 7) + 1))};
    for (int l = 0; l < 4; ++l) {
      const uint32_t qh = block[32 + 2 * g + l / 2] >> (4 * (l % 2));  // this 8's four bits
      const uint64_t grid = iq1s_grid(static_cast<int>(block[4 * g + l] | ((qh & 7u) << 8)));
      const float delta = (qh & 8u) ? -kIq1Delta : kIq1Delta;
      for (int j = 0; j < 8; ++j) out[32 * g + 8 * l + j] = dl[l / 2] * iq1_value(grid, j, delta);
    }
  }
}

// ---------------------------------------------------------------- IQ4_NL and IQ4_XS: a 16-value table
using GgmlIQ4_NL = GgmlBlockFormat<GgmlType::kIQ4_NL, 32, 18>;
/// Bytes: d (f16), qs[16]: element j < 16 is the low nibble of qs[j], j + 16 its high nibble;
/// element = d·value[code].
DS41_HD void dequantize_block_iq4_nl(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int j = 0; j < 16; ++j) {
    out[j] = d * to_float(iq4nl_value(block[2 + j] & 0xF));
    out[j + 16] = d * to_float(iq4nl_value(block[2 + j] >> 4));
  }
}

using GgmlIQ4_XS = GgmlBlockFormat<GgmlType::kIQ4_XS, 256, 136>;
/// Bytes: d (f16), scales_h (u16: bits 4..5 of group g's scale in bits 2g..2g+1), scales_l[4]
/// (bits 0..3, low nibble first), qs[128] (16 bytes a group of 32, nibbles as IQ4_NL's).
/// dl = d·(s − 32); element = dl·value[code].
DS41_HD void dequantize_block_iq4_xs(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  const uint32_t scales_h = load_u16(block + 2);
  for (int g = 0; g < 8; ++g) {
    const int ls = ((block[4 + g / 2] >> (4 * (g % 2))) & 0xF) | static_cast<int>(((scales_h >> (2 * g)) & 3u) << 4);
    const float dl = d * to_float(ls - 32);
    const uint8_t* qs = block + 8 + 16 * g;
    for (int j = 0; j < 16; ++j) {
      out[32 * g + j] = dl * to_float(iq4nl_value(qs[j] & 0xF));
      out[32 * g + j + 16] = dl * to_float(iq4nl_value(qs[j] >> 4));
    }
  }
}

}  // namespace ds41
#include "fp_exact_end.hpp"
