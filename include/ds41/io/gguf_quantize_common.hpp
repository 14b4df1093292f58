// ds41/io/gguf_quantize_common.hpp — the small pieces every f32 → ggml block quantizer of the
// writer uses (gguf_quantize.hpp, gguf_quantize_iq.hpp): f16 scales, rounding, the largest value.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include "../core/numeric.hpp"
#include "gguf_types.hpp"  // f32_to_f16

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf::quant_detail {

/// An f16 scale for a positive value: nearest, saturated to the largest finite half.
inline uint16_t f16_scale(float v) {
  uint16_t h = f32_to_f16(v);
  return (h & 0x7C00u) == 0x7C00u ? static_cast<uint16_t>(0x7BFFu) : h;
}
inline void put_f16(uint8_t* p, uint16_t h) {
  p[0] = static_cast<uint8_t>(h & 0xFF);
  p[1] = static_cast<uint8_t>(h >> 8);
}
inline int clamp_round(float v, int lo, int hi) {
  if (!(v == v)) return 0;
  return static_cast<int>(std::max<float>(lo, std::min<float>(hi, std::nearbyint(v))));
}
/// The element of largest magnitude (signed; the first of equals), 0 for none.
inline float signed_amax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > std::fabs(m)) m = x[i];
  return m;
}
/// An f16 for a signed scale: nearest, its magnitude saturated to the largest finite half.
inline uint16_t f16_signed_scale(float v) { return static_cast<uint16_t>(f16_scale(std::fabs(v)) | (v < 0 ? 0x8000u : 0u)); }
/// The smallest and largest element.
inline void min_max(const float* x, int n, float* lo, float* hi) {
  *lo = x[0], *hi = x[0];
  for (int i = 1; i < n; ++i) *lo = std::min(*lo, x[i]), *hi = std::max(*hi, x[i]);
}

}  // namespace ds41::gguf::quant_detail
#include "../core/fp_exact_end.hpp"
