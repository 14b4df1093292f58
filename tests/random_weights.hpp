// tests/random_weights.hpp — random weight matrices of every WeightFormat, for the kernel tests.
#pragma once
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>
#include "ds41/model/weights.hpp"

namespace ds41::testing {

/// Every ggml type a Linear keeps as stored (WeightFormat::kGgmlBlocks), for the kernel tests.
inline constexpr GgmlType kKeptGgmlTypes[] = {
    GgmlType::kQ8_0,   GgmlType::kQ2_K,   GgmlType::kQ3_K,  GgmlType::kQ4_K,    GgmlType::kQ5_K,   GgmlType::kQ6_K,
    GgmlType::kIQ2_XXS, GgmlType::kF16,   GgmlType::kQ4_0,  GgmlType::kQ4_1,    GgmlType::kQ5_0,   GgmlType::kQ5_1,
    GgmlType::kIQ2_XS, GgmlType::kIQ2_S,  GgmlType::kIQ3_XXS, GgmlType::kIQ3_S, GgmlType::kIQ1_S,  GgmlType::kIQ1_M,
    GgmlType::kIQ4_NL, GgmlType::kIQ4_XS, GgmlType::kTQ1_0, GgmlType::kTQ2_0,  GgmlType::kNVFP4, GgmlType::kQ1_0,
    GgmlType::kQ2_0};

/// Where a block of a kept ggml type keeps its f16 scales (d, and dmin or m for the types with
/// mins), as ggml-common.h lays the blocks out (stated here, not taken from the library under
/// test). IQ1_M has none: its d is the top nibbles of its four scale words (random_ggml_blocks);
/// nor NVFP4, whose UE4M3 scale bytes are all finite (random bytes serve).
inline std::vector<int> ggml_f16_scale_offsets(GgmlType t) {
  switch (t) {
    case GgmlType::kQ1_0: case GgmlType::kQ2_0:
    case GgmlType::kQ8_0: case GgmlType::kQ4_0: case GgmlType::kQ5_0: case GgmlType::kIQ2_XXS: case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S: case GgmlType::kIQ3_XXS: case GgmlType::kIQ3_S: case GgmlType::kIQ1_S:
    case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS: return {0};
    case GgmlType::kQ4_1: case GgmlType::kQ5_1: return {0, 2};
    case GgmlType::kQ2_K: return {80, 82};
    case GgmlType::kQ3_K: return {108};
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: return {0, 2};
    case GgmlType::kQ6_K: return {208};
    case GgmlType::kTQ1_0: return {52};
    case GgmlType::kTQ2_0: return {64};
    default: return {};
  }
}

/// A random finite f16: mostly normal numbers of the sizes weights have, some subnormal or zero.
template <class Rng>
uint16_t random_finite_f16(Rng& rng) {
  const uint16_t sign = static_cast<uint16_t>((rng() & 1) << 15);
  switch (rng() % 16) {
    case 0: return sign;                                               // ±0
    case 1: return static_cast<uint16_t>(sign | (1 + rng() % 0x3FF));  // subnormal
    default: return static_cast<uint16_t>(sign | (3 + rng() % 15) << 10 | (rng() & 0x3FF));  // 2^-12 .. 2^2
  }
}

/// rows x cols of the kept ggml type t as a file holds them: random bytes, each f16 scale (F16:
/// each value) a random finite f16.
template <class Rng>
std::vector<uint8_t> random_ggml_blocks(GgmlType t, long rows, int cols, Rng& rng) {
  const long row_bytes = ggml_row_bytes(t, cols);
  std::vector<uint8_t> b(static_cast<size_t>(rows * row_bytes));
  for (auto& v : b) v = static_cast<uint8_t>(rng());
  const auto put = [&](size_t at) {
    const uint16_t h = random_finite_f16(rng);
    b[at] = static_cast<uint8_t>(h & 0xFF), b[at + 1] = static_cast<uint8_t>(h >> 8);
  };
  if (t == GgmlType::kF16) {
    for (size_t i = 0; i < b.size(); i += 2) put(i);
    return b;
  }
  const int bb = ggml_block_bytes(t);
  for (size_t blk = 0; blk < b.size(); blk += static_cast<size_t>(bb)) {
    for (int off : ggml_f16_scale_offsets(t)) put(blk + static_cast<size_t>(off));
    if (t == GgmlType::kIQ1_M) set_iq1_m_d_bits(&b[blk], random_finite_f16(rng));  // d in the scale words' top nibbles
  }
  return b;
}

/// A random [rows, cols] matrix of format f; fp8 codes avoid the NaN codes unless asked.
inline HostTensor random_matrix(WeightFormat f, int rows, int cols, std::mt19937& rng, bool fp8_nan_codes = false) {
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  HostTensor t;
  t.shape = {rows, cols};
  t.format = f;
  const long n = static_cast<long>(rows) * cols;
  const long kblocks = (cols + 31) / 32;
  switch (f) {
    case WeightFormat::kF32: {
      std::vector<float> v(n);
      for (auto& e : v) e = uni(rng);
      t = HostTensor::from_f32({rows, cols}, v);
      break;
    }
    case WeightFormat::kBF16: {
      std::vector<float> v(n);
      for (auto& e : v) e = uni(rng);
      t = HostTensor::from_bf16_values({rows, cols}, v);
      break;
    }
    case WeightFormat::kFp8Block32:
      t.payload.resize(n);
      for (auto& b : t.payload) {
        b = static_cast<uint8_t>(byte(rng));
        if (!fp8_nan_codes && (b & 0x7F) == 0x7F) b ^= 1;
      }
      t.scales.resize(static_cast<size_t>((rows + 31) / 32) * kblocks);
      for (auto& s : t.scales) s = std::ldexp(1.0f, static_cast<int>(byte(rng) % 9) - 6) * (1.0f + uni(rng) / 8);
      break;
    case WeightFormat::kFp4Block32:
      t.payload.resize(static_cast<size_t>(rows) * (cols / 2));
      for (auto& b : t.payload) b = static_cast<uint8_t>(byte(rng));
      t.scales.resize(static_cast<size_t>(rows) * kblocks);  // e8m0, as every fp4 checkpoint's
      for (auto& s : t.scales) s = std::ldexp(1.0f, static_cast<int>(byte(rng) % 9) - 6);
      break;
    case WeightFormat::kGgmlBlocks:  // Q4_K blocks (random_ggml_blocks for any kept type)
      t = HostTensor::from_ggml_blocks({rows, cols}, GgmlType::kQ4_K, random_ggml_blocks(GgmlType::kQ4_K, rows, cols, rng));
      break;
  }
  return t;
}

}  // namespace ds41::testing
