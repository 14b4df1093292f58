// ds41/io/gguf_quantize.hpp — f32 values → ggml blocks of every type ds41 reads (Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0, MXFP4, the K-quants, TQ1_0, TQ2_0 here; the IQ types in gguf_quantize_iq.hpp),
// for the writer (ds41-gguf-write --type) and the tests' tiny models of every type.
//
// Simple and deterministic, not ggml's quantizers (no error search, no importance weights): per
// sub-block min/max (or signed max) scales rounded to nearest, codes rounded to nearest and
// clamped. Any valid block serves the tests, whose oracle is the dequantized values
// (core/ggml_quants.hpp) of whatever bytes are written; the quality is far below llama-quantize's.
// Layouts: ggml-common.h, as ggml_quants.hpp reads them.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "gguf_quantize_common.hpp"
#include "gguf_quantize_iq.hpp"
#include "gguf_types.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

namespace quant_detail {
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

/// Q8_0: d = amax / 127, codes rounded to nearest.
inline void quantize_block_q8_0(const float* x, uint8_t* b) {
  using namespace quant_detail;
  float m = 0;
  for (int j = 0; j < 32; ++j) m = std::max(m, std::fabs(x[j]));
  const uint16_t dh = f16_scale(m / 127.0f);
  const float d = f16_to_f32(dh);
  put_f16(b, dh);
  for (int j = 0; j < 32; ++j) b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(d > 0 ? clamp_round(x[j] / d, -127, 127) : 0));
}

// The 32-value legacy types: a signed d with the largest magnitude on the most negative code
// (Q4_0, Q5_0), or d and m from the block's range (Q4_1, Q5_1); codes rounded to nearest.
/// Q4_0 / Q5_0 (bits 4 or 5): x ≈ (q − 2^(bits−1))·d.
inline void quantize_block_q45_0(const float* x, uint8_t* b, int bits) {
  using namespace quant_detail;
  const int half = 1 << (bits - 1);
  const uint16_t dh = f16_signed_scale(signed_amax(x, 32) / static_cast<float>(-half));
  const float d = f16_to_f32(dh);
  const int qs = bits == 5 ? 6 : 2;  // Q5_0: d, qh[4], qs[16]
  std::memset(b, 0, static_cast<size_t>(qs + 16));
  put_f16(b, dh);
  for (int j = 0; j < 32; ++j) {
    const int q = d != 0 ? clamp_round(x[j] / d + static_cast<float>(half), 0, 2 * half - 1) : half;
    b[qs + j % 16] |= static_cast<uint8_t>((q & 0xF) << (4 * (j / 16)));
    if (bits == 5) b[2 + j / 8] |= static_cast<uint8_t>((q >> 4) << (j % 8));  // bit j of the u32 qh
  }
}
/// Q4_1 / Q5_1: x ≈ q·d + m, m the block's smallest value.
inline void quantize_block_q45_1(const float* x, uint8_t* b, int bits) {
  using namespace quant_detail;
  const int qmax = (1 << bits) - 1;
  float lo, hi;
  min_max(x, 32, &lo, &hi);
  const uint16_t dh = f16_scale((hi - lo) / static_cast<float>(qmax)), mh = f16_signed_scale(lo);
  const float d = f16_to_f32(dh), m = f16_to_f32(mh);
  const int qs = bits == 5 ? 8 : 4;  // Q5_1: d, m, qh[4], qs[16]
  std::memset(b, 0, static_cast<size_t>(qs + 16));
  put_f16(b, dh), put_f16(b + 2, mh);
  for (int j = 0; j < 32; ++j) {
    const int q = d > 0 ? clamp_round((x[j] - m) / d, 0, qmax) : 0;
    b[qs + j % 16] |= static_cast<uint8_t>((q & 0xF) << (4 * (j / 16)));
    if (bits == 5) b[4 + j / 8] |= static_cast<uint8_t>((q >> 4) << (j % 8));
  }
}

// The ternary types: d the largest magnitude, each value −d, 0 or d (code 0, 1, 2).
inline int ternary_code(float v, float d) { return d > 0 ? quant_detail::clamp_round(v / d, -1, 1) + 1 : 1; }
inline void quantize_block_tq2_0(const float* x, uint8_t* b) {
  const uint16_t dh = quant_detail::f16_scale(std::fabs(quant_detail::signed_amax(x, 256)));
  const float d = f16_to_f32(dh);
  std::memset(b, 0, 64);
  for (int e = 0; e < 256; ++e) b[32 * (e / 128) + e % 32] |= static_cast<uint8_t>(ternary_code(x[e], d) << (2 * ((e / 32) % 4)));
  quant_detail::put_f16(b + 64, dh);
}
/// TQ1_0 packs five codes c0..c4 (c0 first in element order, as dequantize_block_tq1_0 reads
/// them) in a byte as ⌈(Σ c_n·3^(4−n))·256 / 243⌉, so that digit n is ((byte·3^n mod 256)·3) >> 8;
/// qh's bytes hold four codes and a zero fifth.
inline void quantize_block_tq1_0(const float* x, uint8_t* b) {
  const float m = std::fabs(quant_detail::signed_amax(x, 256));
  const uint16_t dh = quant_detail::f16_scale(m);
  const float d = f16_to_f32(dh);
  const auto pack = [](const int* c, int n) {
    int v = 0;
    for (int k = 0; k < 5; ++k) v = 3 * v + (k < n ? c[k] : 0);
    return static_cast<uint8_t>((v * 256 + 242) / 243);
  };
  int c[5];
  for (int m0 = 0; m0 < 32; ++m0) {  // qs[0..31]: elements m0 + 32n
    for (int n = 0; n < 5; ++n) c[n] = ternary_code(x[m0 + 32 * n], d);
    b[m0] = pack(c, 5);
  }
  for (int m0 = 0; m0 < 16; ++m0) {  // qs[32..47]: elements 160 + m0 + 16n
    for (int n = 0; n < 5; ++n) c[n] = ternary_code(x[160 + m0 + 16 * n], d);
    b[32 + m0] = pack(c, 5);
  }
  for (int m0 = 0; m0 < 4; ++m0) {  // qh[0..3]: elements 240 + m0 + 4n
    for (int n = 0; n < 4; ++n) c[n] = ternary_code(x[240 + m0 + 4 * n], d);
    b[48 + m0] = pack(c, 4);
  }
  quant_detail::put_f16(b + 52, dh);
}

/// NVFP4: per 16 values the smallest UE4M3 scale whose e2m1 range (6·scale) holds their largest
/// magnitude (else the largest scale), codes e2m1 to nearest.
inline void quantize_block_nvfp4(const float* x, uint8_t* b) {
  std::memset(b + 4, 0, 32);
  for (int s = 0; s < 4; ++s) {
    float m = 0;
    for (int j = 0; j < 16; ++j) m = std::max(m, std::fabs(x[16 * s + j]));
    uint8_t e = 0x7E;  // the largest scale ggml reads as a number (0x7F is 0)
    for (int c = 1; c < 0x7F && m > 0; ++c)
      if (2.0f * nvfp4_half_scale(static_cast<uint8_t>(c)) * 6.0f >= m) {
        e = static_cast<uint8_t>(c);
        break;
      }
    b[s] = m > 0 ? e : 0;
    const float scale = 2.0f * nvfp4_half_scale(b[s]);
    for (int j = 0; j < 16; ++j) {
      const uint8_t code = scale > 0 ? e2m1_encode(x[16 * s + j] / scale) : 0;
      b[4 + 8 * s + j % 8] |= static_cast<uint8_t>(j < 8 ? code : code << 4);
    }
  }
}
/// Q1_0: ±d, d the mean magnitude (the least-squares d for fixed signs).
inline void quantize_block_q1_0(const float* x, uint8_t* b) {
  float sum = 0;
  for (int j = 0; j < 128; ++j) sum += std::fabs(x[j]);
  quant_detail::put_f16(b, quant_detail::f16_scale(sum / 128.0f));
  std::memset(b + 2, 0, 16);
  for (int j = 0; j < 128; ++j) b[2 + j / 8] |= static_cast<uint8_t>((x[j] >= 0 ? 1 : 0) << (j % 8));
}
/// Q2_0: (q − 1)·d for q in 0..3, d the smallest that reaches both the block's minimum (−d) and
/// maximum (2d).
inline void quantize_block_q2_0(const float* x, uint8_t* b) {
  float lo, hi;
  quant_detail::min_max(x, 64, &lo, &hi);
  const uint16_t dh = quant_detail::f16_scale(std::max(-lo, hi / 2.0f));
  const float d = f16_to_f32(dh);
  quant_detail::put_f16(b, dh);
  std::memset(b + 2, 0, 16);
  for (int j = 0; j < 64; ++j) {
    const int q = d > 0 ? quant_detail::clamp_round(x[j] / d + 1.0f, 0, 3) : 1;
    b[2 + j / 4] |= static_cast<uint8_t>(q << (2 * (j % 4)));
  }
}

/// Whether quantize_blocks writes the type: every block type ggml_quants.hpp reads but I8.
inline bool quantizable_block_type(TensorType t) {
  return t != TensorType::kI8 && ggml_info(t) != nullptr && ggml_block_dequantizable(static_cast<GgmlType>(t));
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
      case TensorType::kQ4_0: quantize_block_q45_0(x, b, 4); break;
      case TensorType::kQ4_1: quantize_block_q45_1(x, b, 4); break;
      case TensorType::kQ5_0: quantize_block_q45_0(x, b, 5); break;
      case TensorType::kQ5_1: quantize_block_q45_1(x, b, 5); break;
      case TensorType::kQ8_0: quantize_block_q8_0(x, b); break;
      case TensorType::kMXFP4: quantize_block_mxfp4(x, b); break;
      case TensorType::kNVFP4: quantize_block_nvfp4(x, b); break;
      case TensorType::kQ1_0: quantize_block_q1_0(x, b); break;
      case TensorType::kQ2_0: quantize_block_q2_0(x, b); break;
      case TensorType::kQ2_K: quantize_block_q2_K(x, b); break;
      case TensorType::kQ3_K: quantize_block_q3_K(x, b); break;
      case TensorType::kQ4_K: quantize_block_q4_K(x, b); break;
      case TensorType::kQ5_K: quantize_block_q5_K(x, b); break;
      case TensorType::kQ6_K: quantize_block_q6_K(x, b); break;
      case TensorType::kTQ1_0: quantize_block_tq1_0(x, b); break;
      case TensorType::kTQ2_0: quantize_block_tq2_0(x, b); break;
      case TensorType::kIQ2_XXS: quantize_block_iq2_xxs(x, b); break;
      case TensorType::kIQ2_XS: quantize_block_iq2_xs(x, b); break;
      case TensorType::kIQ2_S: quantize_block_iq2_s(x, b); break;
      case TensorType::kIQ3_XXS: quantize_block_iq3_xxs(x, b); break;
      case TensorType::kIQ3_S: quantize_block_iq3_s(x, b); break;
      case TensorType::kIQ1_S: quantize_block_iq1_s(x, b); break;
      case TensorType::kIQ1_M: quantize_block_iq1_m(x, b); break;
      case TensorType::kIQ4_NL: quantize_block_iq4_nl(x, b); break;
      case TensorType::kIQ4_XS: quantize_block_iq4_xs(x, b); break;
      default: fail("gguf: no quantizer for ", tensor_type_name(type));
    }
  }
  return out;
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
