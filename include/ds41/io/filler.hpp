// ds41/io/filler.hpp — the deterministic weight filler of the golden contract (SCHEMA §1):
// fnv1a64 of the parameter name, splitmix64, fixed_raw / fixed_value / fixed_int, and the storage
// grids (f32, bf16, e4m3 with per-32 power-of-two row-block scales).
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include "../core/numeric.hpp"

namespace ds41::filler {

inline uint64_t fnv1a64(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char b : s) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

inline uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t fixed_raw(uint64_t name_hash, uint64_t i) { return splitmix64(name_hash + i); }
inline uint64_t fixed_raw(std::string_view name, uint64_t i) { return fixed_raw(fnv1a64(name), i); }

/// float32((2u - 1)·scale + offset) in IEEE double, operation by operation. The volatile keeps
/// the multiply and the add apart even where the compiler would contract them into an FMA.
inline float fixed_value_h(uint64_t name_hash, uint64_t i, double scale, double offset) {
  double u = static_cast<double>(fixed_raw(name_hash, i) >> 40) / 16777216.0;
  double t = 2.0 * u;
  t = t - 1.0;
  volatile double prod = t * scale;
  double r = prod + offset;
  return static_cast<float>(r);
}
inline float fixed_value(std::string_view name, uint64_t i, double scale, double offset) {
  return fixed_value_h(fnv1a64(name), i, scale, offset);
}

inline uint64_t fixed_int(std::string_view name, uint64_t i, uint64_t m) { return fixed_raw(name, i) % m; }

/// Smallest integer k with amax <= 448 · 2^k (k = 0 when amax == 0), computed exactly.
inline int e4m3_block_exponent(float amax) {
  if (amax == 0.0f) return 0;
  int k = static_cast<int>(std::ceil(std::log2(static_cast<double>(amax) / 448.0)));
  while (static_cast<double>(amax) > std::ldexp(448.0, k)) ++k;
  while (static_cast<double>(amax) <= std::ldexp(448.0, k - 1)) --k;
  return k;
}

/// Quantise one row of an engram table in place to e4m3 codes (as float values) with one 2^k
/// per block of 32 columns; scales receives the block scales.
inline void quantize_e4m3_pow2_row(float* row, int cols, float* scales) {
  for (int b = 0; b < cols; b += 32) {
    int m = cols - b < 32 ? cols - b : 32;
    float amax = 0.0f;
    for (int j = 0; j < m; ++j) amax = std::fmax(amax, std::fabs(row[b + j]));
    int k = e4m3_block_exponent(amax);
    float s = std::ldexp(1.0f, k);
    for (int j = 0; j < m; ++j) row[b + j] = e4m3_round(row[b + j] / s);
    scales[b / 32] = s;
  }
}

}  // namespace ds41::filler
