// ds41/io/gguf_quantize_iq.hpp — f32 values → ggml's IQ blocks (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ4_NL, IQ4_XS), for the writer (ds41-gguf-write --type) and the tests'
// tiny models of every type.
//
// Simple and deterministic like gguf_quantize.hpp's (no importance weights, no search over
// scales): a group's scale from its largest magnitude, then for each 8 (or 4) values the nearest
// grid point by brute force (core/ggml_grids.hpp), the signs from the values (made even by
// flipping the smallest where the type stores 7 sign bits), IQ1's shift sign by trying both, IQ4's
// codes the nearest table value. Any valid block serves the tests, whose oracle is the
// dequantized values (core/ggml_quants_iq.hpp) of whatever bytes are written; the quality is far
// below llama-quantize's. Layouts: ggml-common.h, as ggml_quants_iq.hpp reads them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include "../core/ggml_quants.hpp"
#include "gguf_quantize_common.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

namespace quant_detail {
/// The largest magnitude of x[0..n).
inline float amax(const float* x, int n) {
  float m = 0;
  for (int i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}
/// The index of the grid point (point(i): n byte magnitudes, element j in byte j) nearest the
/// magnitudes of y[0..n) at scale s: the least Σ (|y_j| − s·g_j)²; 0 when s is 0.
template <class Point>
int nearest_point(Point&& point, int points, int n, const float* y, float s) {
  int best = 0;
  float best_err = INFINITY;
  for (int i = 0; i < points && s > 0; ++i) {
    const uint64_t g = point(i);
    float err = 0;
    for (int j = 0; j < n; ++j) {
      const float e = std::fabs(y[j]) - s * static_cast<float>((g >> (8 * j)) & 0xFF);
      err += e * e;
    }
    if (err < best_err) best_err = err, best = i;
  }
  return best;
}
/// Bit j set where y[j] < 0 (j < 8).
inline unsigned sign_bits(const float* y) {
  unsigned s = 0;
  for (int j = 0; j < 8; ++j) s |= (y[j] < 0 ? 1u : 0u) << j;
  return s;
}
/// sign_bits with an even count of minus signs (ggml's ksigns_iq2xs stores 7 bits and the parity):
/// where the count is odd, the smallest magnitude's sign flips. Returns the 7 stored bits.
inline unsigned even_sign_index(const float* y) {
  unsigned s = sign_bits(y);
  int smallest = 0;
  for (int j = 1; j < 8; ++j)
    if (std::fabs(y[j]) < std::fabs(y[smallest])) smallest = j;
  if (__builtin_popcount(s) & 1) s ^= 1u << smallest;
  return s & 127u;
}
/// The d of a block whose groups' scales multiply d by (offset + s)·mul, s ≤ smax, to reach each
/// group's largest magnitude on a grid whose largest value is gmax: top / ((offset + smax)·mul).
inline uint16_t grid_d(const float* x, int groups, int group_len, float gmax, float offset, int smax, float mul) {
  float top = 0;
  for (int g = 0; g < groups; ++g) top = std::max(top, amax(x + group_len * g, group_len) / gmax);
  return f16_scale(top / ((offset + static_cast<float>(smax)) * mul));
}
/// The s ≤ smax whose (offset + s)·mul·d is nearest the group's largest magnitude over gmax.
inline int grid_scale(const float* y, int n, float gmax, float d, float offset, int smax, float mul) {
  return d > 0 ? clamp_round(amax(y, n) / gmax / (d * mul) - offset, 0, smax) : 0;
}
/// The IQ1 grid point nearest 8 values at dl with the shift `delta`: the least
/// Σ (y_j − dl·(g_j + delta))², which goes to *err; 0 (and no error) when dl is 0.
inline int iq1_nearest(const float* y, float dl, float delta, float* err) {
  int best = 0;
  float best_err = INFINITY;
  for (int i = 0; i < 2048 && dl > 0; ++i) {
    const uint64_t g = kIq1sGrid[i];
    float e2 = 0;
    for (int j = 0; j < 8; ++j) {
      const float e = y[j] - dl * (static_cast<float>(static_cast<int8_t>((g >> (8 * j)) & 0xFF)) + delta);
      e2 += e * e;
    }
    if (e2 < best_err) best_err = e2, best = i;
  }
  *err = dl > 0 ? best_err : 0;
  return best;
}
/// The code of the IQ4 value nearest v (a value over the scale).
inline int iq4_code(float v) {
  int best = 0;
  for (int k = 1; k < 16; ++k)
    if (std::fabs(v - static_cast<float>(kIq4nlValues[k])) < std::fabs(v - static_cast<float>(kIq4nlValues[best]))) best = k;
  return best;
}
}  // namespace quant_detail

inline void quantize_block_iq2_xxs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 43.0f, 0.5f, 15, 0.25f);
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 66);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = grid_scale(x + 32 * g, 32, 43.0f, d, 0.5f, 15, 0.25f);
    const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;  // as dequantize_block_iq2_xxs
    uint32_t aux = static_cast<uint32_t>(s) << 28;
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      b[2 + 8 * g + l] = static_cast<uint8_t>(nearest_point(iq2xxs_grid, 256, 8, y, db));
      aux |= even_sign_index(y) << (7 * l);
    }
    for (int k = 0; k < 4; ++k) b[2 + 8 * g + 4 + k] = static_cast<uint8_t>(aux >> (8 * k));
  }
}

/// IQ2_XS and IQ2_S: two 4-bit scales a group of 32, one for each 16.
inline void quantize_block_iq2_xs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 16, 16, 43.0f, 0.5f, 15, 0.25f);
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 74);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    int s[2];
    for (int h = 0; h < 2; ++h) s[h] = grid_scale(x + 32 * g + 16 * h, 16, 43.0f, d, 0.5f, 15, 0.25f);
    b[66 + g] = static_cast<uint8_t>(s[0] | s[1] << 4);
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      const float db = d * (0.5f + static_cast<float>(s[l / 2])) * 0.25f;
      const uint32_t q = static_cast<uint32_t>(nearest_point(iq2xs_grid, 512, 8, y, db)) | even_sign_index(y) << 9;
      put_f16(b + 2 + 2 * (4 * g + l), static_cast<uint16_t>(q));  // a u16, little-endian
    }
  }
}

inline void quantize_block_iq2_s(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 16, 16, 43.0f, 0.5f, 15, 0.25f);
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 82);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    int s[2];
    for (int h = 0; h < 2; ++h) s[h] = grid_scale(x + 32 * g + 16 * h, 16, 43.0f, d, 0.5f, 15, 0.25f);
    b[74 + g] = static_cast<uint8_t>(s[0] | s[1] << 4);
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      const float db = d * (0.5f + static_cast<float>(s[l / 2])) * 0.25f;
      const int index = nearest_point(iq2s_grid, 1024, 8, y, db);
      b[2 + 4 * g + l] = static_cast<uint8_t>(index & 0xFF);
      b[66 + g] |= static_cast<uint8_t>((index >> 8) << (2 * l));
      b[34 + 4 * g + l] = static_cast<uint8_t>(sign_bits(y));  // IQ2_S stores all 8 signs
    }
  }
}

inline void quantize_block_iq3_xxs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 62.0f, 0.5f, 15, 0.5f);
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 98);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = grid_scale(x + 32 * g, 32, 62.0f, d, 0.5f, 15, 0.5f);
    const float db = d * (0.5f + static_cast<float>(s)) * 0.5f;
    uint32_t aux = static_cast<uint32_t>(s) << 28;
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      for (int h = 0; h < 2; ++h) b[2 + 8 * g + 2 * l + h] = static_cast<uint8_t>(nearest_point(iq3xxs_grid, 256, 4, y + 4 * h, db));
      aux |= even_sign_index(y) << (7 * l);
    }
    for (int k = 0; k < 4; ++k) b[66 + 4 * g + k] = static_cast<uint8_t>(aux >> (8 * k));
  }
}

inline void quantize_block_iq3_s(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 15.0f, 1.0f, 30, 1.0f);  // d·(1 + 2s): s = 15 is 31
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 110);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = d > 0 ? clamp_round((amax(x + 32 * g, 32) / 15.0f / d - 1.0f) / 2.0f, 0, 15) : 0;
    const float db = d * static_cast<float>(1 + 2 * s);
    b[106 + g / 2] |= static_cast<uint8_t>(s << (4 * (g % 2)));
    for (int k = 0; k < 8; ++k) {  // the group's 8 points of 4
      const int index = nearest_point(iq3s_grid, 512, 4, x + 32 * g + 4 * k, db);
      b[2 + 8 * g + k] = static_cast<uint8_t>(index & 0xFF);
      b[66 + g] |= static_cast<uint8_t>((index >> 8) << k);
    }
    for (int l = 0; l < 4; ++l) b[74 + 4 * g + l] = static_cast<uint8_t>(sign_bits(x + 32 * g + 8 * l));
  }
}

inline void quantize_block_iq1_s(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 8, 32, 1.125f, 1.0f, 14, 1.0f);  // d·(2s + 1): s = 7 is 15
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 50);
  put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = d > 0 ? clamp_round((amax(x + 32 * g, 32) / 1.125f / d - 1.0f) / 2.0f, 0, 7) : 0;
    const float dl = d * static_cast<float>(2 * s + 1);
    // one shift sign for the group: the one with the smaller error over its four 8s
    int pick[2][4];
    float err[2] = {0, 0};
    for (int neg = 0; neg < 2; ++neg)
      for (int l = 0; l < 4; ++l) {
        float e = 0;
        pick[neg][l] = iq1_nearest(x + 32 * g + 8 * l, dl, neg ? -kIq1Delta : kIq1Delta, &e);
        err[neg] += e;
      }
    const int neg = err[1] < err[0] ? 1 : 0;
    uint32_t qh = static_cast<uint32_t>(s) << 12 | static_cast<uint32_t>(neg) << 15;
    for (int l = 0; l < 4; ++l) {
      b[2 + 4 * g + l] = static_cast<uint8_t>(pick[neg][l] & 0xFF);
      qh |= static_cast<uint32_t>(pick[neg][l] >> 8) << (3 * l);
    }
    put_f16(b + 34 + 2 * g, static_cast<uint16_t>(qh));
  }
}

inline void quantize_block_iq1_m(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = grid_d(x, 16, 16, 1.125f, 1.0f, 14, 1.0f);  // a 3-bit scale per 16
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 56);
  uint16_t words[4] = {};
  for (int g = 0; g < 8; ++g)
    for (int h = 0; h < 2; ++h) {
      const float* y16 = x + 32 * g + 16 * h;
      const int s = d > 0 ? clamp_round((amax(y16, 16) / 1.125f / d - 1.0f) / 2.0f, 0, 7) : 0;
      words[g / 2] |= static_cast<uint16_t>(s << (6 * (g % 2) + 3 * h));
      const float dl = d * static_cast<float>(2 * s + 1);
      for (int k = 0; k < 2; ++k) {  // the two 8s of this 16, each with its own shift sign
        const int l = 2 * h + k;
        float e[2];
        const int p[2] = {iq1_nearest(y16 + 8 * k, dl, kIq1Delta, &e[0]), iq1_nearest(y16 + 8 * k, dl, -kIq1Delta, &e[1])};
        const int neg = e[1] < e[0] ? 1 : 0;
        b[4 * g + l] = static_cast<uint8_t>(p[neg] & 0xFF);
        b[32 + 2 * g + l / 2] |= static_cast<uint8_t>(((p[neg] >> 8) | neg << 3) << (4 * (l % 2)));
      }
    }
  for (int w = 0; w < 4; ++w) put_f16(b + 48 + 2 * w, static_cast<uint16_t>(words[w] | ((dh >> (4 * w)) & 0xF) << 12));
}

inline void quantize_block_iq4_nl(const float* x, uint8_t* b) {
  using namespace quant_detail;
  const uint16_t dh = f16_signed_scale(signed_amax(x, 32) / -127.0f);  // the largest on value −127
  const float d = f16_to_f32(dh);
  put_f16(b, dh);
  std::memset(b + 2, 0, 16);
  for (int j = 0; j < 32; ++j) b[2 + j % 16] |= static_cast<uint8_t>((d != 0 ? iq4_code(x[j] / d) : 8) << (4 * (j / 16)));
}

inline void quantize_block_iq4_xs(const float* x, uint8_t* b) {
  using namespace quant_detail;
  float dl[8], top = 0;
  for (int g = 0; g < 8; ++g) dl[g] = signed_amax(x + 32 * g, 32) / -127.0f, top = std::max(top, std::fabs(dl[g]));
  const uint16_t dh = f16_scale(top / 32.0f);  // group scales (s − 32)·d, s − 32 in [−32, 31]
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 136);
  put_f16(b, dh);
  uint32_t scales_h = 0;
  for (int g = 0; g < 8; ++g) {
    const int ls = (d > 0 ? clamp_round(dl[g] / d, -32, 31) : 0) + 32;
    b[4 + g / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (g % 2)));
    scales_h |= static_cast<uint32_t>(ls >> 4) << (2 * g);
    const float group_d = d * static_cast<float>(ls - 32);
    for (int j = 0; j < 32; ++j)
      b[8 + 16 * g + j % 16] |= static_cast<uint8_t>((group_d != 0 ? iq4_code(x[32 * g + j] / group_d) : 8) << (4 * (j / 16)));
  }
  put_f16(b + 2, static_cast<uint16_t>(scales_h));
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
