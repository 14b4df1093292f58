// ds41/core/ggml_quants.hpp — the values of ggml's GGUF block types, one block at a time.
//
// What ds41 reads from GGUF files written by llama.cpp and friends (issue 39): every block type
// ggml stores weights in — Q1_0, Q2_0, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, NVFP4, I8, the
// K-quants (Q2_K .. Q6_K), the ternary TQ1_0/TQ2_0 and the IQ types (core/ggml_quants_iq.hpp). The value of each element is
// exactly what ggml's `dequantize_row_<type>` gives in f32 under the uncontracted definition (each
// product and each sum or difference rounded on its own, which is what gguf-py's numpy computes).
// In these formats every product is exact in f32: an f16 significand (11 bits) times integers that
// add at most 13 bits (Q6_K: 8-bit scale, 5-bit code; IQ4_XS: 6-bit scale, 7-bit value), and
// MXFP4 a power of two times a small integer. So an element rounds once at most, in the final
// `(d·scale)·q − dmin·min` of the K-quants with mins or `q·d + m` of Q4_1/Q5_1, and neither an FMA
// nor another order of the products changes a value (the vector generator saw a -mfma
// -ffp-contract=fast build of ggml give the same bits). The functions keep ggml's order all the
// same, so their bits need no such argument. Also NVFP4 (e2m1 with UE4M3 scales per 16) and
// ggml's 2026 Q1_0 and Q2_0. Not here: ggml's dot-product intermediates (Q8_1, Q8_K), which no
// file stores weights in (refused by name at load).
//
// Written from the block layouts (ggml-common.h); the IQ grids are ggml's constants reproduced as
// data (core/ggml_grids.hpp). tests/test_ggml_quants.cpp checks every function against vectors
// that ggml's C code and gguf-py made and agreed on (tools/ggml_vectors/make_vectors.py), which use
// every grid and sign entry.
//
// All functions are DS41_HD: the CUDA kernels dequantize with the same code as the host.
#pragma once
#include <cstdint>
#include "ggml_block.hpp"
#include "ggml_quants_iq.hpp"
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

// ---------------------------------------------------------------- Q8_0: 32 × int8 · f16 d
using GgmlQ8_0 = GgmlBlockFormat<GgmlType::kQ8_0, 32, 34>;
/// Bytes: d (f16), q[32] (int8). Element j = q[j]·d.
DS41_HD void dequantize_block_q8_0(const uint8_t* block, float* out) {
  const float d = ggml_detail::load_f16(block);
  for (int j = 0; j < 32; ++j) out[j] = ggml_detail::to_float(static_cast<int8_t>(block[2 + j])) * d;
}

// ---------------------------------------------------------------- Q4_0, Q4_1, Q5_0, Q5_1: 32 elements
// llama.cpp's first formats (a 4- or 5-bit code a element, one f16 d, and for _1 an f16 min), still
// what llama-quantize falls back to where a K-quant's 256 does not divide a row. Element j < 16 is
// the low nibble of qs[j], element j + 16 its high nibble; Q5's fifth bit of element j is bit j of
// the u32 qh.
namespace ggml_detail {
/// The 4- or 5-bit code of element j of a Q4/Q5 block (qh: the fifth bits, nullptr for Q4).
DS41_HD int q45_code(const uint8_t* qs, const uint8_t* qh, int j) {
  const int low = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
  return qh ? low | static_cast<int>((load_u32(qh) >> j) & 1u) << 4 : low;
}
}  // namespace ggml_detail

using GgmlQ4_0 = GgmlBlockFormat<GgmlType::kQ4_0, 32, 18>;
/// Bytes: d (f16), qs[16]. Element = (code − 8)·d.
DS41_HD void dequantize_block_q4_0(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int j = 0; j < 32; ++j) out[j] = to_float(q45_code(block + 2, nullptr, j) - 8) * d;
}
using GgmlQ4_1 = GgmlBlockFormat<GgmlType::kQ4_1, 32, 20>;
/// Bytes: d, m (f16), qs[16]. Element = code·d + m (one rounding: the product is exact).
DS41_HD void dequantize_block_q4_1(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block), m = load_f16(block + 2);
  for (int j = 0; j < 32; ++j) out[j] = to_float(q45_code(block + 4, nullptr, j)) * d + m;
}
using GgmlQ5_0 = GgmlBlockFormat<GgmlType::kQ5_0, 32, 22>;
/// Bytes: d (f16), qh[4], qs[16]. Element = (code − 16)·d.
DS41_HD void dequantize_block_q5_0(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block);
  for (int j = 0; j < 32; ++j) out[j] = to_float(q45_code(block + 6, block + 2, j) - 16) * d;
}
using GgmlQ5_1 = GgmlBlockFormat<GgmlType::kQ5_1, 32, 24>;
/// Bytes: d, m (f16), qh[4], qs[16]. Element = code·d + m.
DS41_HD void dequantize_block_q5_1(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block), m = load_f16(block + 2);
  for (int j = 0; j < 32; ++j) out[j] = to_float(q45_code(block + 8, block + 4, j)) * d + m;
}

// ---------------------------------------------------------------- MXFP4: 32 × e2m1 · e8m0
using GgmlMxfp4 = GgmlBlockFormat<GgmlType::kMXFP4, 32, 17>;
/// ggml's MXFP4 scale: half the e8m0 value, 2^(e-128), as ggml builds it from bits (e = 0 and 1 the
/// f32 subnormals 2^-128 and 2^-127). ggml has no NaN here: e = 255 gives 2^127 (OCP MX would say
/// NaN; whether to accept such a block is the loader's business).
DS41_HD float mxfp4_half_scale(uint8_t e) { return bits_f32(e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23); }
/// Twice the e2m1 value of a 4-bit code, as an integer (ggml's kvalues_mxfp4: 0 1 2 3 4 6 8 12,
/// code 8 gives +0 like code 0, codes 9..15 the negatives): magnitudes m < 2 are m, the others
/// (2 + m%2)·2^(m/2-1).
DS41_HD constexpr int mxfp4_doubled_value(uint32_t code) {
  const int m = static_cast<int>(code & 7u);
  const int mag = m < 2 ? m : (2 + (m & 1)) << (m / 2 - 1);
  return (code & 8u) ? -mag : mag;
}
/// Bytes: e (e8m0), qs[16]. Element j < 16 is the low nibble of qs[j], element j+16 its high nibble;
/// value = doubled e2m1 · 2^(e-128).
DS41_HD void dequantize_block_mxfp4(const uint8_t* block, float* out) {
  const float d = mxfp4_half_scale(block[0]);
  for (int j = 0; j < 16; ++j) {
    out[j] = ggml_detail::to_float(mxfp4_doubled_value(block[1 + j] & 0xFu)) * d;
    out[j + 16] = ggml_detail::to_float(mxfp4_doubled_value(block[1 + j] >> 4)) * d;
  }
}

// ---------------------------------------------------------------- NVFP4: 64 × e2m1 · 4 UE4M3 scales
using GgmlNvfp4 = GgmlBlockFormat<GgmlType::kNVFP4, 64, 36>;
/// Half the value of an NVFP4 scale byte, as ggml's ggml_ue4m3_to_fp32 gives it: an unsigned e4m3
/// (bit 7 ignored, exponent bias 7, subnormals man·2^-9), 0x7F (e4m3's NaN) read as 0, times 0.5
/// (the codes are e2m1 values doubled, as MXFP4's). Exact in f32.
DS41_HD float nvfp4_half_scale(uint8_t x) {
  if (x == 0 || x == 0x7F) return 0.0f;
  const uint32_t e = (x >> 3) & 0xFu, man = x & 7u;
  if (e == 0) return ggml_detail::to_float(static_cast<int>(man)) * 0x1p-10f;  // man·2^-9, halved
  return bits_f32((e + 119u) << 23 | man << 20);                              // (1 + man/8)·2^(e−7), halved
}
/// Bytes: d[4] (a UE4M3 scale per 16 elements), qs[32]. In sub-block s, element j < 8 is the low
/// nibble of qs[8s + j], element j + 8 its high nibble; value = doubled e2m1 · half scale.
DS41_HD void dequantize_block_nvfp4(const uint8_t* block, float* out) {
  for (int s = 0; s < 4; ++s) {
    const float d = nvfp4_half_scale(block[s]);
    for (int j = 0; j < 8; ++j) {
      const uint8_t q = block[4 + 8 * s + j];
      out[16 * s + j] = ggml_detail::to_float(mxfp4_doubled_value(q & 0xFu)) * d;
      out[16 * s + j + 8] = ggml_detail::to_float(mxfp4_doubled_value(q >> 4)) * d;
    }
  }
}

// ---------------------------------------------------------------- Q1_0, Q2_0: 1 and 2 bits, one f16 d
using GgmlQ1_0 = GgmlBlockFormat<GgmlType::kQ1_0, 128, 18>;
/// Bytes: d (f16), qs[16]: element j is bit j%8 of qs[j/8]; value d where it is set, −d where not.
DS41_HD void dequantize_block_q1_0(const uint8_t* block, float* out) {
  const float d = ggml_detail::load_f16(block), neg_d = -d;
  for (int j = 0; j < 128; ++j) out[j] = ((block[2 + j / 8] >> (j % 8)) & 1) ? d : neg_d;
}
using GgmlQ2_0 = GgmlBlockFormat<GgmlType::kQ2_0, 64, 18>;
/// Bytes: d (f16), qs[16]: element j is bits 2(j%4) of qs[j/4]; value (q − 1)·d.
DS41_HD void dequantize_block_q2_0(const uint8_t* block, float* out) {
  const float d = ggml_detail::load_f16(block);
  for (int j = 0; j < 64; ++j) out[j] = ggml_detail::to_float(((block[2 + j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
}

// ---------------------------------------------------------------- I8: plain int8
using GgmlI8 = GgmlBlockFormat<GgmlType::kI8, 1, 1>;
/// An I8 element as ggml converts it to f32: the integer's value (engram rows stored as I8 are
/// bytes of ds41's own row encodings and are read as such elsewhere; this is the type's value).
DS41_HD void dequantize_block_i8(const uint8_t* block, float* out) { out[0] = ggml_detail::to_float(static_cast<int8_t>(block[0])); }

// ---------------------------------------------------------------- the K-quants: 256 elements
// Super-blocks of 256 elements in sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K) that have
// their own integer scale (and min) under the block's f16 d (and dmin).
namespace ggml_detail {
/// The 6-bit scale and min of sub-block j (0..7) of Q4_K and Q5_K, packed in 12 bytes: j < 4 in the
/// low 6 bits of bytes j (scale) and j+4 (min); j ≥ 4 has its low 4 bits in byte j+4 (scale in the
/// low nibble, min in the high one) and its top 2 bits in the top bits of bytes j-4 (scale) and j (min).
DS41_HD void k_scale_min(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0xF) | (s[j - 4] >> 6) << 4;
    *min = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  }
}
}  // namespace ggml_detail

using GgmlQ2_K = GgmlBlockFormat<GgmlType::kQ2_K, 256, 84>;
/// Bytes: scales[16] (low nibble: scale, high nibble: min of sub-block s), qs[64] (2-bit codes),
/// d, dmin (f16). Sub-block s (16 elements) reads bits 2·((s%8)/2) of qs[32·(s/8) + 16·(s%2) + l];
/// element = (d·scale)·q − dmin·min.
DS41_HD void dequantize_block_q2_K(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block + 80), dmin = load_f16(block + 82);
  for (int s = 0; s < 16; ++s) {
    const uint8_t* q = block + 16 + 32 * (s / 8) + 16 * (s % 2);
    const int shift = 2 * ((s % 8) / 2);
    const float dl = d * to_float(block[s] & 0xF);
    const float ml = dmin * to_float(block[s] >> 4);
    for (int l = 0; l < 16; ++l) out[16 * s + l] = dl * to_float((q[l] >> shift) & 3) - ml;
  }
}

using GgmlQ3_K = GgmlBlockFormat<GgmlType::kQ3_K, 256, 110>;
/// The signed 6-bit scale of Q3_K's sub-block s (0..15), packed in 12 bytes: the low 4 bits in the
/// low nibbles of bytes 0..7 (s < 8) or their high nibbles (s ≥ 8), the top 2 bits in bits 2·(s/4)
/// of byte 8 + s%4; stored with an offset of 32.
DS41_HD int q3_K_scale(const uint8_t* scales, int s) {
  const int low = s < 8 ? (scales[s] & 0xF) : (scales[s - 8] >> 4);
  const int high = (scales[8 + s % 4] >> (2 * (s / 4))) & 3;
  return (low | high << 4) - 32;
}
/// Bytes: hmask[32] (high bits), qs[64] (low 2 bits), scales[12], d (f16). Sub-block s (16
/// elements): low bits as Q2_K's, high bit (4·(s/8) + (s%8)/2) of hmask[16·(s%2) + l]; a clear
/// high bit subtracts 4; element = (d·scale)·q.
DS41_HD void dequantize_block_q3_K(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block + 108);
  for (int s = 0; s < 16; ++s) {
    const uint8_t* q = block + 32 + 32 * (s / 8) + 16 * (s % 2);
    const uint8_t* hm = block + 16 * (s % 2);
    const int shift = 2 * ((s % 8) / 2);
    const int hbit = 4 * (s / 8) + (s % 8) / 2;
    const float dl = d * to_float(q3_K_scale(block + 96, s));
    for (int l = 0; l < 16; ++l) {
      const int v = ((q[l] >> shift) & 3) - (((hm[l] >> hbit) & 1) ? 0 : 4);
      out[16 * s + l] = dl * to_float(v);
    }
  }
}

using GgmlQ4_K = GgmlBlockFormat<GgmlType::kQ4_K, 256, 144>;
/// Bytes: d, dmin (f16), scales[12] (k_scale_min), qs[128]. Sub-block j (32 elements) is the low
/// nibbles (j even) or high nibbles (j odd) of qs[32·(j/2) + l]; element = (d·scale)·q − dmin·min.
DS41_HD void dequantize_block_q4_K(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block), dmin = load_f16(block + 2);
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k_scale_min(block + 4, j, &sc, &m);
    const float dl = d * to_float(sc), ml = dmin * to_float(m);
    const uint8_t* q = block + 16 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) out[32 * j + l] = dl * to_float((q[l] >> shift) & 0xF) - ml;
  }
}

using GgmlQ5_K = GgmlBlockFormat<GgmlType::kQ5_K, 256, 176>;
/// Bytes: d, dmin (f16), scales[12] (k_scale_min), qh[32] (fifth bits), qs[128]. Sub-block j as
/// Q4_K's, plus 16 where bit j of qh[l] is set.
DS41_HD void dequantize_block_q5_K(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block), dmin = load_f16(block + 2);
  const uint8_t* qh = block + 16;
  for (int j = 0; j < 8; ++j) {
    int sc, m;
    k_scale_min(block + 4, j, &sc, &m);
    const float dl = d * to_float(sc), ml = dmin * to_float(m);
    const uint8_t* q = block + 48 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int v = ((q[l] >> shift) & 0xF) + (((qh[l] >> j) & 1) ? 16 : 0);
      out[32 * j + l] = dl * to_float(v) - ml;
    }
  }
}

using GgmlQ6_K = GgmlBlockFormat<GgmlType::kQ6_K, 256, 210>;
/// Bytes: ql[128] (low 4 bits), qh[64] (high 2 bits), scales[16] (int8), d (f16). In half h
/// (128 elements) quarter k (32 elements), element l takes the low (k < 2) or high (k ≥ 2) nibble
/// of ql[64·h + 32·(k%2) + l] and bits 2k of qh[32·h + l], minus 32; its scale is
/// scales[8·h + 2k + l/16]; element = (d·scale)·q.
DS41_HD void dequantize_block_q6_K(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block + 208);
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      const uint8_t* ql = block + 64 * h + 32 * (k % 2);
      const uint8_t* qh = block + 128 + 32 * h;
      for (int l = 0; l < 32; ++l) {
        const int low = (ql[l] >> (4 * (k / 2))) & 0xF;
        const int v = (low | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
        const float dl = d * to_float(static_cast<int8_t>(block[192 + 8 * h + 2 * k + l / 16]));
        out[128 * h + 32 * k + l] = dl * to_float(v);
      }
    }
  }
}

// ---------------------------------------------------------------- TQ1_0, TQ2_0: ternary
// Codes 0, 1, 2 for −1, 0, +1 times the block's f16 d (BitNet-style models).
using GgmlTQ1_0 = GgmlBlockFormat<GgmlType::kTQ1_0, 256, 54>;
/// 3^n for TQ1_0's digits n = 0..4.
DS41_HD constexpr int tq1_pow3(int n) { return n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81; }
/// Digit n of a TQ1_0 byte (0, 1 or 2): ((byte·3^n mod 256)·3) >> 8, ggml's encoding.
DS41_HD constexpr int tq1_digit(uint8_t byte, int n) {
  const uint8_t q = static_cast<uint8_t>(byte * tq1_pow3(n));  // mod 256, as ggml's uint8_t product
  return (static_cast<int>(q) * 3) >> 8;
}
/// Bytes: qs[48], qh[4] (five and four base-3 digits a byte, tq1_digit), d (f16). Elements:
/// qs[0..31]'s digit n for n = 0..4 (160), then qs[32..47]'s (80), then qh's digit n for n = 0..3
/// (16), each run byte by byte. Element = (digit − 1)·d.
DS41_HD void dequantize_block_tq1_0(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block + 52);
  int e = 0;
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 32; ++m) out[e++] = to_float(tq1_digit(block[m], n) - 1) * d;
  for (int n = 0; n < 5; ++n)
    for (int m = 0; m < 16; ++m) out[e++] = to_float(tq1_digit(block[32 + m], n) - 1) * d;
  for (int n = 0; n < 4; ++n)
    for (int m = 0; m < 4; ++m) out[e++] = to_float(tq1_digit(block[48 + m], n) - 1) * d;
}
using GgmlTQ2_0 = GgmlBlockFormat<GgmlType::kTQ2_0, 256, 66>;
/// Bytes: qs[64] (four 2-bit codes a byte), d (f16). Element 128·h + 32·l + m is bits 2l of
/// qs[32·h + m]; element = (code − 1)·d (code 3 gives 2·d, as ggml).
DS41_HD void dequantize_block_tq2_0(const uint8_t* block, float* out) {
  using namespace ggml_detail;
  const float d = load_f16(block + 64);
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 4; ++l)
      for (int m = 0; m < 32; ++m) out[128 * h + 32 * l + m] = to_float(((block[32 * h + m] >> (2 * l)) & 3) - 1) * d;
}

// ---------------------------------------------------------------- one dispatch from the file's id
/// A format's dequantizer chosen by its type (what a template over formats calls).
DS41_HD void dequantize_ggml_format(GgmlQ4_0, const uint8_t* b, float* o) { dequantize_block_q4_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ4_1, const uint8_t* b, float* o) { dequantize_block_q4_1(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ5_0, const uint8_t* b, float* o) { dequantize_block_q5_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ5_1, const uint8_t* b, float* o) { dequantize_block_q5_1(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ8_0, const uint8_t* b, float* o) { dequantize_block_q8_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlMxfp4, const uint8_t* b, float* o) { dequantize_block_mxfp4(b, o); }
DS41_HD void dequantize_ggml_format(GgmlNvfp4, const uint8_t* b, float* o) { dequantize_block_nvfp4(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ1_0, const uint8_t* b, float* o) { dequantize_block_q1_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ2_0, const uint8_t* b, float* o) { dequantize_block_q2_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlI8, const uint8_t* b, float* o) { dequantize_block_i8(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ2_K, const uint8_t* b, float* o) { dequantize_block_q2_K(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ3_K, const uint8_t* b, float* o) { dequantize_block_q3_K(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ4_K, const uint8_t* b, float* o) { dequantize_block_q4_K(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ5_K, const uint8_t* b, float* o) { dequantize_block_q5_K(b, o); }
DS41_HD void dequantize_ggml_format(GgmlQ6_K, const uint8_t* b, float* o) { dequantize_block_q6_K(b, o); }
DS41_HD void dequantize_ggml_format(GgmlTQ1_0, const uint8_t* b, float* o) { dequantize_block_tq1_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlTQ2_0, const uint8_t* b, float* o) { dequantize_block_tq2_0(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ2_XXS, const uint8_t* b, float* o) { dequantize_block_iq2_xxs(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ2_XS, const uint8_t* b, float* o) { dequantize_block_iq2_xs(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ2_S, const uint8_t* b, float* o) { dequantize_block_iq2_s(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ3_XXS, const uint8_t* b, float* o) { dequantize_block_iq3_xxs(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ3_S, const uint8_t* b, float* o) { dequantize_block_iq3_s(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ1_S, const uint8_t* b, float* o) { dequantize_block_iq1_s(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ1_M, const uint8_t* b, float* o) { dequantize_block_iq1_m(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ4_NL, const uint8_t* b, float* o) { dequantize_block_iq4_nl(b, o); }
DS41_HD void dequantize_ggml_format(GgmlIQ4_XS, const uint8_t* b, float* o) { dequantize_block_iq4_xs(b, o); }

/// `f(Format{})` for the block format of `type` (a GgmlBlockFormat above), returning what f
/// returns; `none()` for a type with no dequantizer here (F16, F32, BF16: elements, not blocks;
/// Q8_1, Q8_K: ggml's dot-product intermediates; the integer types).
template <class F, class None>
DS41_HD constexpr auto visit_ggml_block_format(GgmlType type, F&& f, None&& none) {
  switch (type) {
    case GgmlType::kQ4_0: return f(GgmlQ4_0{});
    case GgmlType::kQ4_1: return f(GgmlQ4_1{});
    case GgmlType::kQ5_0: return f(GgmlQ5_0{});
    case GgmlType::kQ5_1: return f(GgmlQ5_1{});
    case GgmlType::kQ8_0: return f(GgmlQ8_0{});
    case GgmlType::kMXFP4: return f(GgmlMxfp4{});
    case GgmlType::kNVFP4: return f(GgmlNvfp4{});
    case GgmlType::kQ1_0: return f(GgmlQ1_0{});
    case GgmlType::kQ2_0: return f(GgmlQ2_0{});
    case GgmlType::kI8: return f(GgmlI8{});
    case GgmlType::kQ2_K: return f(GgmlQ2_K{});
    case GgmlType::kQ3_K: return f(GgmlQ3_K{});
    case GgmlType::kQ4_K: return f(GgmlQ4_K{});
    case GgmlType::kQ5_K: return f(GgmlQ5_K{});
    case GgmlType::kQ6_K: return f(GgmlQ6_K{});
    case GgmlType::kTQ1_0: return f(GgmlTQ1_0{});
    case GgmlType::kTQ2_0: return f(GgmlTQ2_0{});
    case GgmlType::kIQ2_XXS: return f(GgmlIQ2_XXS{});
    case GgmlType::kIQ2_XS: return f(GgmlIQ2_XS{});
    case GgmlType::kIQ2_S: return f(GgmlIQ2_S{});
    case GgmlType::kIQ3_XXS: return f(GgmlIQ3_XXS{});
    case GgmlType::kIQ3_S: return f(GgmlIQ3_S{});
    case GgmlType::kIQ1_S: return f(GgmlIQ1_S{});
    case GgmlType::kIQ1_M: return f(GgmlIQ1_M{});
    case GgmlType::kIQ4_NL: return f(GgmlIQ4_NL{});
    case GgmlType::kIQ4_XS: return f(GgmlIQ4_XS{});
    default: return none();
  }
}
/// Whether dequantize_ggml_block knows a type.
DS41_HD constexpr bool ggml_block_dequantizable(GgmlType type) {
  return visit_ggml_block_format(type, [](auto) { return true; }, [] { return false; });
}
/// One block of `type` (ggml_type_info(type).block_bytes bytes) to its block_elems f32 values;
/// false (and nothing written) for a type ggml_block_dequantizable refuses.
DS41_HD_OUTLINED bool dequantize_ggml_block(GgmlType type, const uint8_t* block, float* out) {
  return visit_ggml_block_format(
      type,
      [&](auto format) {
        dequantize_ggml_format(format, block, out);
        return true;
      },
      [] { return false; });
}

// ---------------------------------------------------------------- the types a Linear keeps as stored
/// The ggml types a Linear reads as stored (WeightFormat::kGgmlBlocks, core/linear_math.hpp): the
/// block types whose value is ggml's dequantization (above) and F16. Their Linear is the f32 Linear over
/// those values (dot_f32's products and sums, in K order), so a kept weight gives the bits of the
/// same weight widened to f32. MXFP4 is not among them: it is ds41's fp4 Linear (kFp4Block32), the
/// reference's fp4 arithmetic; I8 and the rest are widened at load.
DS41_HD constexpr bool ggml_linear_type(GgmlType t) {
  return t == GgmlType::kF16 || (ggml_block_dequantizable(t) && t != GgmlType::kMXFP4 && t != GgmlType::kI8);
}
/// Elements of one block of a ggml_linear_type (F16: 1).
DS41_HD constexpr int ggml_block_elems(GgmlType t) {
  return t == GgmlType::kF16 ? 1 : visit_ggml_block_format(t, [](auto f) { return decltype(f)::kBlockElems; }, [] { return 0; });
}
/// Bytes of one block of a ggml_linear_type.
DS41_HD constexpr int ggml_block_bytes(GgmlType t) {
  return t == GgmlType::kF16 ? 2 : visit_ggml_block_format(t, [](auto f) { return decltype(f)::kBlockBytes; }, [] { return 0; });
}
/// Bytes of one row of `cols` elements (cols a whole number of blocks).
DS41_HD constexpr long ggml_row_bytes(GgmlType t, int cols) {
  return static_cast<long>(cols / ggml_block_elems(t)) * ggml_block_bytes(t);
}
/// Where a block of a ggml_linear_type keeps its f16 scales (d, and dmin or m for the types with
/// mins), as byte offsets; -1 ends the list. F16 has none (its elements are the f16s), nor IQ1_M,
/// whose d is spread over its scale words (iq1_m_d_bits), nor NVFP4, whose UE4M3 scales are all
/// finite (at most 240).
DS41_HD constexpr void ggml_scale_offsets(GgmlType t, int out[2]) {
  out[0] = -1, out[1] = -1;
  switch (t) {
    case GgmlType::kQ1_0: case GgmlType::kQ2_0:
    case GgmlType::kQ4_0: case GgmlType::kQ5_0: case GgmlType::kQ8_0: case GgmlType::kIQ2_XXS: case GgmlType::kIQ2_XS:
    case GgmlType::kIQ2_S: case GgmlType::kIQ3_XXS: case GgmlType::kIQ3_S: case GgmlType::kIQ1_S:
    case GgmlType::kIQ4_NL: case GgmlType::kIQ4_XS: out[0] = 0; break;
    case GgmlType::kQ4_1: case GgmlType::kQ5_1: out[0] = 0, out[1] = 2; break;
    case GgmlType::kQ2_K: out[0] = 80, out[1] = 82; break;
    case GgmlType::kQ3_K: out[0] = 108; break;
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: out[0] = 0, out[1] = 2; break;
    case GgmlType::kQ6_K: out[0] = 208; break;
    case GgmlType::kTQ1_0: out[0] = 52; break;
    case GgmlType::kTQ2_0: out[0] = 64; break;
    default: break;
  }
}
/// The first of `n` blocks of a ggml_linear_type other than F16 whose values are not all finite,
/// or -1. A block's values are products of its f16 scales with integers below 2^13 (and, with
/// mins, a sum or difference of two such): all finite when the scales are (65504 · 2^13 < FLT_MAX),
/// and some value is inf or NaN when a scale is (inf · 0 is NaN; no type's every value has a zero
/// factor). So the scales alone decide, which is what lets a kept tensor be checked at load, and a
/// streamed expert at read, for ~1 byte in 100.
DS41_HD long ggml_first_nonfinite_block(GgmlType t, const uint8_t* blocks, long n) {
  int off[2];
  ggml_scale_offsets(t, off);
  const int bb = ggml_block_bytes(t);
  const auto nonfinite = [](uint32_t f16_bits) { return (f16_bits & 0x7C00u) == 0x7C00u; };  // exponent all ones
  for (long b = 0; b < n; ++b) {
    const uint8_t* block = blocks + b * bb;
    if (t == GgmlType::kIQ1_M && nonfinite(iq1_m_d_bits(block))) return b;
    for (int i = 0; i < 2 && off[i] >= 0; ++i)
      if (nonfinite(ggml_detail::load_u16(block + off[i]))) return b;
  }
  return -1;
}
/// The values of `n` whole blocks of a ggml_linear_type starting at `blocks` (F16: n elements).
DS41_HD void dequantize_ggml_linear_blocks(GgmlType t, const uint8_t* blocks, int n, float* out) {
  if (t == GgmlType::kF16) {
    for (int i = 0; i < n; ++i) out[i] = f16_to_f32(static_cast<uint16_t>(blocks[2 * i] | blocks[2 * i + 1] << 8));
    return;
  }
  const int be = ggml_block_elems(t), bb = ggml_block_bytes(t);
  for (int b = 0; b < n; ++b) dequantize_ggml_block(t, blocks + static_cast<long>(b) * bb, out + static_cast<long>(b) * be);
}
// The per-format constants agree with ggml's table.
namespace ggml_detail {
static_assert([] {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (ggml_block_dequantizable(t.type) &&
        (ggml_block_elems(t.type) != t.block_elems || ggml_block_bytes(t.type) != t.block_bytes))
      return false;
  return true;
}());
}  // namespace ggml_detail

}  // namespace ds41
#include "fp_exact_end.hpp"
