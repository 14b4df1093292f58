// ds41/testing/filler.hpp — the deterministic weight filler of the golden contract (SCHEMA §1):
// fnv1a64 of the parameter name, splitmix64, fixed_raw / fixed_value / fixed_int, and the storage
// grids (f32, bf16, e4m3 with per-32 power-of-two row-block scales).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>
#include "../core/fnv1a.hpp"
#include "../core/numeric.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::filler {

using ds41::fnv1a64;  // core/fnv1a.hpp (the snapshot format uses it too)

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

/// Smallest integer k with amax <= fmax · 2^k (k = 0 when amax == 0), computed exactly (SCHEMA
/// §10.2's k(amax, F); fmax is 448 for e4m3, 6 for e2m1).
inline int pow2_block_exponent(float amax, double fmax) {
  if (amax == 0.0f) return 0;
  int k = static_cast<int>(std::ceil(std::log2(static_cast<double>(amax) / fmax)));
  while (static_cast<double>(amax) > std::ldexp(fmax, k)) ++k;
  while (static_cast<double>(amax) <= std::ldexp(fmax, k - 1)) --k;
  return k;
}
inline int e4m3_block_exponent(float amax) { return pow2_block_exponent(amax, 448.0); }

/// The largest |v| of n values, as a chain of std::fmax gives it (a NaN compares false and is
/// skipped, as fmax skips it); a compare keeps the loop inline where std::fmax was a call each.
inline float block_amax(const float* v, long n) {
  float amax = 0.0f;
  for (long j = 0; j < n; ++j) {
    const float a = std::fabs(v[j]);
    amax = a > amax ? a : amax;
  }
  return amax;
}

/// 2^-k, by which the quantisers multiply instead of dividing by 2^k: both are the one correctly
/// rounded float of v·2^-k (an exact power of two while -149 <= -k <= 127, which the blocks' k of
/// finite float values stays within; outside it the division is kept).
inline bool exact_inverse_pow2(int k, float& inv) {
  if (-k < -149 || -k > 127) return false;
  inv = std::ldexp(1.0f, -k);
  return true;
}

/// Quantise one row of an engram table in place to e4m3 codes (as float values) with one 2^k
/// per block of 32 columns; scales receives the block scales.
inline void quantize_e4m3_pow2_row(float* row, int cols, float* scales) {
  for (int b = 0; b < cols; b += 32) {
    int m = cols - b < 32 ? cols - b : 32;
    const int k = e4m3_block_exponent(block_amax(row + b, m));
    const float s = std::ldexp(1.0f, k);
    float inv;
    if (exact_inverse_pow2(k, inv))
      for (int j = 0; j < m; ++j) row[b + j] = e4m3_round(row[b + j] * inv);
    else
      for (int j = 0; j < m; ++j) row[b + j] = e4m3_round(row[b + j] / s);
    scales[b / 32] = s;
  }
}

/// An fp8 Linear weight [rows, cols] (SCHEMA §10.2 "e4m3_pow2_block32x32"): per block of 32 rows x
/// 32 columns (edge blocks partial) k = k(amax, 448), code byte = e4m3(v / 2^k) (the division is
/// exact), scales [ceil(rows/32)][ceil(cols/32)] = 2^k. v is the filler's float32 values, not
/// rounded to bf16 first.
inline void quantize_e4m3_block32x32(const std::vector<float>& v, long rows, long cols, std::vector<uint8_t>& codes,
                                     std::vector<float>& scales) {
  const long rb = (rows + 31) / 32, cb = (cols + 31) / 32;
  codes.assign(static_cast<size_t>(rows * cols), 0);
  scales.assign(static_cast<size_t>(rb * cb), 0.0f);
  for (long br = 0; br < rb; ++br)
    for (long bc = 0; bc < cb; ++bc) {
      const long r1 = std::min(rows, br * 32 + 32), c1 = std::min(cols, bc * 32 + 32);
      float amax = 0.0f;
      for (long r = br * 32; r < r1; ++r) amax = std::max(amax, block_amax(&v[r * cols + bc * 32], c1 - bc * 32));
      const int k = e4m3_block_exponent(amax);
      const float s = std::ldexp(1.0f, k);
      float inv;
      const bool mul = exact_inverse_pow2(k, inv);
      for (long r = br * 32; r < r1; ++r)
        for (long c = bc * 32; c < c1; ++c)
          codes[r * cols + c] = e4m3_encode(mul ? v[r * cols + c] * inv : v[r * cols + c] / s);
      scales[br * cb + bc] = s;
    }
}

/// An fp4 expert weight, logically [rows, cols] (SCHEMA §10.2 "e2m1_pow2_block32"): per row and
/// block of 32 columns k = k(amax, 6), nibble = e2m1(v / 2^k) with the sign of v, two nibbles a
/// byte (low = even column); scales [rows][cols/32] = 2^k.
inline void quantize_e2m1_block32(const std::vector<float>& v, long rows, long cols, std::vector<uint8_t>& packed,
                                  std::vector<float>& scales) {
  const long nb = (cols + 31) / 32;
  packed.assign(static_cast<size_t>(rows * ((cols + 1) / 2)), 0);
  scales.assign(static_cast<size_t>(rows * nb), 0.0f);
  for (long r = 0; r < rows; ++r)
    for (long b = 0; b < nb; ++b) {
      const long c1 = std::min(cols, b * 32 + 32);
      const float* row = &v[r * cols];
      const int k = pow2_block_exponent(block_amax(row + b * 32, c1 - b * 32), 6.0);
      const float s = std::ldexp(1.0f, k);
      float inv;
      const bool mul = exact_inverse_pow2(k, inv);
      for (long c = b * 32; c < c1; ++c) {
        const uint8_t nib = e2m1_encode(mul ? row[c] * inv : row[c] / s);
        packed[r * ((cols + 1) / 2) + c / 2] |= static_cast<uint8_t>((c & 1) ? nib << 4 : nib);
      }
      scales[r * nb + b] = s;
    }
}

}  // namespace ds41::filler
#include "../core/fp_exact_end.hpp"
