// ds41/io/gguf_quantize.hpp — f32 values → ggml blocks (MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ2_XXS), for the writer (ds41-gguf-write --type) and the tests' tiny models of every type.
//
// Simple and deterministic, not ggml's quantizers (no error search, no importance weights): per
// sub-block min/max (or signed max) scales rounded to nearest, codes rounded to nearest and
// clamped; IQ2_XXS takes for each 8 values the nearest of the 256 grid points by brute force and
// makes the sign count even by flipping the smallest value. Any valid block serves the tests,
// whose oracle is the dequantized values (core/ggml_quants.hpp) of whatever bytes are written;
// the quality is far below llama-quantize's. Layouts: ggml-common.h, as ggml_quants.hpp reads them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "gguf_types.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

namespace quant_detail {
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

/// Sub-blocks with a scale and a min (Q2_K, Q4_K, Q5_K): x ≈ (d·sc)·q − dmin·mn, q in [0, qmax],
/// sc and mn in [0, smax]. Fills sc, mn, q; returns d and dmin as f16 bits.
inline void scale_min_blocks(const float* x, int subs, int sub_len, int qmax, int smax, int* sc, int* mn, int* q,
                             uint16_t* dh, uint16_t* mh) {
  std::vector<float> sv(subs), mv(subs);
  float smx = 0, mmx = 0;
  for (int s = 0; s < subs; ++s) {
    float lo = 0, hi = 0;
    for (int l = 0; l < sub_len; ++l) lo = std::min(lo, x[s * sub_len + l]), hi = std::max(hi, x[s * sub_len + l]);
    mv[s] = -lo;
    sv[s] = (hi - lo) / static_cast<float>(qmax);
    smx = std::max(smx, sv[s]);
    mmx = std::max(mmx, mv[s]);
  }
  *dh = f16_scale(smx / static_cast<float>(smax));
  *mh = f16_scale(mmx / static_cast<float>(smax));
  const float d = f16_to_f32(*dh), dmin = f16_to_f32(*mh);
  for (int s = 0; s < subs; ++s) {
    sc[s] = d > 0 ? clamp_round(sv[s] / d, 0, smax) : 0;
    mn[s] = dmin > 0 ? clamp_round(mv[s] / dmin, 0, smax) : 0;
    const float dl = d * static_cast<float>(sc[s]), ml = dmin * static_cast<float>(mn[s]);
    for (int l = 0; l < sub_len; ++l)
      q[s * sub_len + l] = dl > 0 ? clamp_round((x[s * sub_len + l] + ml) / dl, 0, qmax) : 0;
  }
}

/// Sub-blocks with a signed scale (Q3_K, Q6_K): x ≈ (d·sc)·q, q in [-qneg, qneg-1], sc in
/// [-smax-1, smax]; the largest magnitude of a sub-block maps to -qneg. Returns d as f16 bits.
inline uint16_t signed_blocks(const float* x, int subs, int sub_len, int qneg, int smax, int* sc, int* q) {
  std::vector<float> sv(subs);
  float smx = 0;
  for (int s = 0; s < subs; ++s) {
    sv[s] = -signed_amax(x + s * sub_len, sub_len) / static_cast<float>(qneg);
    smx = std::max(smx, std::fabs(sv[s]));
  }
  const uint16_t dh = f16_scale(smx / static_cast<float>(smax));
  const float d = f16_to_f32(dh);
  for (int s = 0; s < subs; ++s) {
    sc[s] = d > 0 ? clamp_round(sv[s] / d, -smax - 1, smax) : 0;
    const float dl = d * static_cast<float>(sc[s]);
    for (int l = 0; l < sub_len; ++l) q[s * sub_len + l] = dl != 0 ? clamp_round(x[s * sub_len + l] / dl, -qneg, qneg - 1) : 0;
  }
  return dh;
}

/// Q4_K / Q5_K's 12 bytes of 6-bit scales and mins (the inverse of ggml_detail::k_scale_min).
inline void pack_k_scale_min(uint8_t* S, const int* sc, const int* mn) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      S[j] |= static_cast<uint8_t>(sc[j]);
      S[j + 4] |= static_cast<uint8_t>(mn[j]);
    } else {
      S[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | (mn[j] & 0xF) << 4);
      S[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      S[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
    }
  }
}
}  // namespace quant_detail

inline void quantize_block_mxfp4(const float* x, uint8_t* b) {
  float amax = 0;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  int k = 0;  // the smallest 2^k with amax / 2^k <= 6 (e2m1's largest value)
  if (amax > 0) {
    while (amax > std::ldexp(6.0f, k) && k < 127) ++k;
    while (k > -126 && amax <= std::ldexp(6.0f, k - 1)) --k;
  }
  const int e = std::max(1, std::min(254, k + 127));
  b[0] = static_cast<uint8_t>(e);
  std::memset(b + 1, 0, 16);
  const float inv = std::ldexp(1.0f, 127 - e);
  for (int j = 0; j < 32; ++j) {
    const uint8_t code = e2m1_encode(x[j] * inv);  // core/numeric.hpp: nearest, ties to even
    b[1 + j % 16] |= static_cast<uint8_t>(j < 16 ? code : code << 4);
  }
}

inline void quantize_block_q2_K(const float* x, uint8_t* b) {
  int sc[16], mn[16], q[256];
  uint16_t dh, mh;
  quant_detail::scale_min_blocks(x, 16, 16, 3, 15, sc, mn, q, &dh, &mh);
  std::memset(b, 0, 84);
  for (int s = 0; s < 16; ++s) {
    b[s] = static_cast<uint8_t>(sc[s] | mn[s] << 4);
    uint8_t* qs = b + 16 + 32 * (s / 8) + 16 * (s % 2);
    for (int l = 0; l < 16; ++l) qs[l] |= static_cast<uint8_t>(q[16 * s + l] << (2 * ((s % 8) / 2)));
  }
  quant_detail::put_f16(b + 80, dh);
  quant_detail::put_f16(b + 82, mh);
}

inline void quantize_block_q3_K(const float* x, uint8_t* b) {
  int sc[16], q[256];
  const uint16_t dh = quant_detail::signed_blocks(x, 16, 16, 4, 31, sc, q);
  std::memset(b, 0, 110);
  for (int s = 0; s < 16; ++s) {
    const int u = sc[s] + 32;
    if (s < 8) b[96 + s] |= static_cast<uint8_t>(u & 0xF);
    else b[96 + s - 8] |= static_cast<uint8_t>((u & 0xF) << 4);
    b[96 + 8 + s % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (s / 4)));
    for (int l = 0; l < 16; ++l) {
      const int v = q[16 * s + l] + 4;  // low 2 bits, and a high bit that, clear, subtracts 4
      b[32 + 32 * (s / 8) + 16 * (s % 2) + l] |= static_cast<uint8_t>((v & 3) << (2 * ((s % 8) / 2)));
      b[16 * (s % 2) + l] |= static_cast<uint8_t>((v >> 2) << (4 * (s / 8) + (s % 8) / 2));
    }
  }
  quant_detail::put_f16(b + 108, dh);
}

inline void quantize_block_q4_K(const float* x, uint8_t* b) {
  int sc[8], mn[8], q[256];
  uint16_t dh, mh;
  quant_detail::scale_min_blocks(x, 8, 32, 15, 63, sc, mn, q, &dh, &mh);
  std::memset(b, 0, 144);
  quant_detail::put_f16(b, dh);
  quant_detail::put_f16(b + 2, mh);
  quant_detail::pack_k_scale_min(b + 4, sc, mn);
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) b[16 + 32 * (j / 2) + l] |= static_cast<uint8_t>(q[32 * j + l] << (4 * (j % 2)));
}

inline void quantize_block_q5_K(const float* x, uint8_t* b) {
  int sc[8], mn[8], q[256];
  uint16_t dh, mh;
  quant_detail::scale_min_blocks(x, 8, 32, 31, 63, sc, mn, q, &dh, &mh);
  std::memset(b, 0, 176);
  quant_detail::put_f16(b, dh);
  quant_detail::put_f16(b + 2, mh);
  quant_detail::pack_k_scale_min(b + 4, sc, mn);
  for (int j = 0; j < 8; ++j)
    for (int l = 0; l < 32; ++l) {
      const int v = q[32 * j + l];
      b[48 + 32 * (j / 2) + l] |= static_cast<uint8_t>((v & 0xF) << (4 * (j % 2)));
      b[16 + l] |= static_cast<uint8_t>((v >> 4) << j);
    }
}

inline void quantize_block_q6_K(const float* x, uint8_t* b) {
  int sc[16], q[256];
  const uint16_t dh = quant_detail::signed_blocks(x, 16, 16, 32, 127, sc, q);
  std::memset(b, 0, 210);
  for (int s = 0; s < 16; ++s) b[192 + s] = static_cast<uint8_t>(static_cast<int8_t>(sc[s]));
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const int v = q[128 * h + 32 * k + l] + 32;
        b[64 * h + 32 * (k % 2) + l] |= static_cast<uint8_t>((v & 0xF) << (4 * (k / 2)));
        b[128 + 32 * h + l] |= static_cast<uint8_t>((v >> 4) << (2 * k));
      }
  quant_detail::put_f16(b + 208, dh);
}

inline void quantize_block_iq2_xxs(const float* x, uint8_t* b) {
  float gmax[8], top = 0;
  for (int g = 0; g < 8; ++g) {
    gmax[g] = 0;
    for (int j = 0; j < 32; ++j) gmax[g] = std::max(gmax[g], std::fabs(x[32 * g + j]));
    top = std::max(top, gmax[g] / 43.0f);  // the group's largest value on the grid's largest magnitude
  }
  const uint16_t dh = quant_detail::f16_scale(top / (15.5f * 0.25f));
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 66);
  quant_detail::put_f16(b, dh);
  for (int g = 0; g < 8; ++g) {
    const int s = d > 0 ? quant_detail::clamp_round(gmax[g] / 43.0f / (d * 0.25f) - 0.5f, 0, 15) : 0;
    const float db = d * (0.5f + static_cast<float>(s)) * 0.25f;  // as dequantize_block_iq2_xxs
    uint32_t aux = static_cast<uint32_t>(s) << 28;
    for (int l = 0; l < 4; ++l) {
      const float* y = x + 32 * g + 8 * l;
      int best = 0;
      if (db > 0) {
        float best_err = INFINITY;
        for (int i = 0; i < 256; ++i) {
          float err = 0;
          for (int j = 0; j < 8; ++j) {
            const float e = std::fabs(y[j]) - db * static_cast<float>((kIq2xxsGrid[i] >> (8 * j)) & 0xFF);
            err += e * e;
          }
          if (err < best_err) best_err = err, best = i;
        }
      }
      unsigned signs = 0;
      int smallest = 0;
      for (int j = 0; j < 8; ++j) {
        if (y[j] < 0) signs |= 1u << j;
        if (std::fabs(y[j]) < std::fabs(y[smallest])) smallest = j;
      }
      if (__builtin_popcount(signs) & 1) signs ^= 1u << smallest;  // ggml's signs have an even count
      b[2 + 8 * g + l] = static_cast<uint8_t>(best);
      aux |= (signs & 127u) << (7 * l);  // kIq2xsSigns[i] = i | parity(i) << 7
    }
    for (int k = 0; k < 4; ++k) b[2 + 8 * g + 4 + k] = static_cast<uint8_t>(aux >> (8 * k));
  }
}

/// Whether quantize_blocks writes the type.
inline bool quantizable_block_type(TensorType t) {
  switch (t) {
    case TensorType::kMXFP4: case TensorType::kQ2_K: case TensorType::kQ3_K: case TensorType::kQ4_K:
    case TensorType::kQ5_K: case TensorType::kQ6_K: case TensorType::kIQ2_XXS: return true;
    default: return false;
  }
}

/// `v` (a whole number of blocks, row after row) as blocks of `type`.
inline std::vector<uint8_t> quantize_blocks(const std::vector<float>& v, TensorType type) {
  DS41_CHECK(quantizable_block_type(type), "gguf: cannot quantize to ", tensor_type_name(type));
  const GgmlTypeInfo& info = *ggml_info(type);
  const size_t be = static_cast<size_t>(info.block_elems), bb = static_cast<size_t>(info.block_bytes);
  DS41_CHECK(v.size() % be == 0, "gguf: ", tensor_type_name(type), " needs a multiple of ", be, " values, got ", v.size());
  std::vector<uint8_t> out(v.size() / be * bb);
  for (size_t i = 0; i < v.size() / be; ++i) {
    const float* x = v.data() + i * be;
    uint8_t* b = out.data() + i * bb;
    switch (type) {
      case TensorType::kMXFP4: quantize_block_mxfp4(x, b); break;
      case TensorType::kQ2_K: quantize_block_q2_K(x, b); break;
      case TensorType::kQ3_K: quantize_block_q3_K(x, b); break;
      case TensorType::kQ4_K: quantize_block_q4_K(x, b); break;
      case TensorType::kQ5_K: quantize_block_q5_K(x, b); break;
      case TensorType::kQ6_K: quantize_block_q6_K(x, b); break;
      case TensorType::kIQ2_XXS: quantize_block_iq2_xxs(x, b); break;
      default: break;
    }
  }
  return out;
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
