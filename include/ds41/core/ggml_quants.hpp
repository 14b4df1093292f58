// ds41/core/ggml_quants.hpp — the values of ggml's GGUF block types, one block at a time.
//
// What ds41 reads from GGUF files written by llama.cpp and friends (issue 39): Q8_0, MXFP4, I8 and
// the K-quant and IQ2 ladder (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS). The value of each element is
// exactly what ggml's `dequantize_row_<type>` gives in f32 under the uncontracted definition (each
// product and each difference rounded on its own, which is what gguf-py's numpy computes). In
// these formats every product is exact in f32: an f16 significand (11 bits) times integers that
// add at most 13 bits (Q6_K: 8-bit scale, 5-bit code; IQ2_XXS: 5-bit group scale, 6-bit grid
// value), and MXFP4 a power of two times a small integer. So an element rounds once at most, in
// the final `(d·scale)·q − dmin·min` of the types with mins, and neither an FMA nor another order
// of the products changes a value (the vector generator saw a -mfma -ffp-contract=fast build of
// ggml give the same bits). The functions keep ggml's order all the same, so their bits need no
// such argument.
//
// Written from the block layouts (ggml-common.h); the IQ2_XXS grid and sign tables are ggml's
// constants reproduced as data. tests/test_ggml_quants.cpp checks every function against vectors
// that ggml's C code and gguf-py made and agreed on (tools/ggml_vectors/make_vectors.py), which use
// every grid and sign entry.
//
// All functions are DS41_HD: the CUDA kernels dequantize with the same code as the host.
#pragma once
#include <cstdint>
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

// ---------------------------------------------------------------- ggml's type table
/// ggml's tensor type ids as GGUF files store them (ggml.h's enum ggml_type; ids 4, 5 and 31..33,
/// 36..38 are types ggml has removed).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15,
  kIQ2_XXS = 16, kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kIQ4_XS = 23,
  kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30,
  kTQ1_0 = 34, kTQ2_0 = 35, kMXFP4 = 39, kNVFP4 = 40, kQ1_0 = 41, kQ2_0 = 42,
};

/// One row of ggml's type table: how many elements a block holds and how many bytes it takes
/// (ggml's blck_size and type_size; a row of n elements takes n / block_elems · block_bytes bytes).
struct GgmlTypeInfo {
  GgmlType type;
  const char* name;  // ggml's type_name
  int block_elems;
  int block_bytes;
};

/// Every type of ggml's table (ggml-org/ggml d99724f2, checked against tests/data/ggml_quants/types.txt,
/// which the vector generator reads out of ggml itself), whether or not ds41 reads it.
inline constexpr GgmlTypeInfo kGgmlTypes[] = {
    {GgmlType::kF32, "f32", 1, 4},           {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kQ4_0, "q4_0", 32, 18},       {GgmlType::kQ4_1, "q4_1", 32, 20},
    {GgmlType::kQ5_0, "q5_0", 32, 22},       {GgmlType::kQ5_1, "q5_1", 32, 24},
    {GgmlType::kQ8_0, "q8_0", 32, 34},       {GgmlType::kQ8_1, "q8_1", 32, 36},
    {GgmlType::kQ2_K, "q2_K", 256, 84},      {GgmlType::kQ3_K, "q3_K", 256, 110},
    {GgmlType::kQ4_K, "q4_K", 256, 144},     {GgmlType::kQ5_K, "q5_K", 256, 176},
    {GgmlType::kQ6_K, "q6_K", 256, 210},     {GgmlType::kQ8_K, "q8_K", 256, 292},
    {GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66}, {GgmlType::kIQ2_XS, "iq2_xs", 256, 74},
    {GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98}, {GgmlType::kIQ1_S, "iq1_s", 256, 50},
    {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},   {GgmlType::kIQ3_S, "iq3_s", 256, 110},
    {GgmlType::kIQ2_S, "iq2_s", 256, 82},    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},
    {GgmlType::kI8, "i8", 1, 1},             {GgmlType::kI16, "i16", 1, 2},
    {GgmlType::kI32, "i32", 1, 4},           {GgmlType::kI64, "i64", 1, 8},
    {GgmlType::kF64, "f64", 1, 8},           {GgmlType::kIQ1_M, "iq1_m", 256, 56},
    {GgmlType::kBF16, "bf16", 1, 2},         {GgmlType::kTQ1_0, "tq1_0", 256, 54},
    {GgmlType::kTQ2_0, "tq2_0", 256, 66},    {GgmlType::kMXFP4, "mxfp4", 32, 17},
    {GgmlType::kNVFP4, "nvfp4", 64, 36},     {GgmlType::kQ1_0, "q1_0", 128, 18},
    {GgmlType::kQ2_0, "q2_0", 64, 18},
};

/// The table's row of a type id as a file stores it; nullptr for an id ggml does not know.
constexpr const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  for (const GgmlTypeInfo& t : kGgmlTypes)
    if (static_cast<uint32_t>(t.type) == id) return &t;
  return nullptr;
}
/// The row of one of GgmlType's values (all are in the table).
constexpr const GgmlTypeInfo& ggml_type_info(GgmlType type) { return *ggml_type_info(static_cast<uint32_t>(type)); }

// ---------------------------------------------------------------- the formats ds41 dequantizes
/// A block format: its id and sizes, for templates over formats (the per-type constants; the
/// dequantization is dequantize_block_<type> below, also reached as Format::dequantize).
template <GgmlType T, int Elems, int Bytes>
struct GgmlBlockFormat {
  static constexpr GgmlType kType = T;
  static constexpr int kBlockElems = Elems;
  static constexpr int kBlockBytes = Bytes;
};

// ---------------------------------------------------------------- shared pieces
namespace ggml_detail {
/// Little-endian loads at any alignment (blocks are packed: 34, 17, 66 ... bytes).
DS41_HD uint16_t load_u16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }
DS41_HD uint32_t load_u32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}
DS41_HD float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }  // core/numeric.hpp
DS41_HD float to_float(int v) { return static_cast<float>(v); }  // exact: |v| < 2^24 here

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

// ---------------------------------------------------------------- Q8_0: 32 × int8 · f16 d
using GgmlQ8_0 = GgmlBlockFormat<GgmlType::kQ8_0, 32, 34>;
/// Bytes: d (f16), q[32] (int8). Element j = q[j]·d.
DS41_HD void dequantize_block_q8_0(const uint8_t* block, float* out) {
  const float d = ggml_detail::load_f16(block);
  for (int j = 0; j < 32; ++j) out[j] = ggml_detail::to_float(static_cast<int8_t>(block[2 + j])) * d;
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
DS41_HD int mxfp4_doubled_value(uint32_t code) {
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

// ---------------------------------------------------------------- I8: plain int8
using GgmlI8 = GgmlBlockFormat<GgmlType::kI8, 1, 1>;
/// An I8 element as ggml converts it to f32: the integer's value (engram rows stored as I8 are
/// bytes of ds41's own row encodings and are read as such elsewhere; this is the type's value).
DS41_HD void dequantize_block_i8(const uint8_t* block, float* out) { out[0] = ggml_detail::to_float(static_cast<int8_t>(block[0])); }

// ---------------------------------------------------------------- the K-quants: 256 elements
// Super-blocks of 256 elements in sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 32 (Q4_K, Q5_K) that have
// their own integer scale (and min) under the block's f16 d (and dmin).

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

// ---------------------------------------------------------------- IQ2_XXS: 2.06 bits per weight
using GgmlIQ2_XXS = GgmlBlockFormat<GgmlType::kIQ2_XXS, 256, 66>;

// ggml's tables (ggml-common.h: iq2xxs_grid, ksigns_iq2xs, kmask_iq2xs), reproduced as data.
// iq2xxs_grid: 256 points of the E8 lattice's neighbourhood, 8 magnitudes each (bytes 0x08, 0x19,
// 0x2b: 8, 25, 43), element j in byte j (little-endian).
#define DS41_GGML_IQ2XXS_GRID \
    0x0808080808080808, 0x080808080808082b, 0x0808080808081919, 0x0808080808082b08, \
    0x0808080808082b2b, 0x0808080808190819, 0x0808080808191908, 0x08080808082b0808, \
    0x08080808082b082b, 0x08080808082b2b08, 0x08080808082b2b2b, 0x0808080819080819, \
    0x0808080819081908, 0x0808080819190808, 0x0808080819192b08, 0x08080808192b0819, \
    0x08080808192b1908, 0x080808082b080808, 0x080808082b08082b, 0x080808082b082b2b, \
    0x080808082b2b082b, 0x0808081908080819, 0x0808081908081908, 0x0808081908190808, \
    0x0808081908191919, 0x0808081919080808, 0x080808192b081908, 0x080808192b192b08, \
    0x0808082b08080808, 0x0808082b0808082b, 0x0808082b082b082b, 0x0808082b2b08082b, \
    0x0808190808080819, 0x0808190808081908, 0x0808190808190808, 0x08081908082b0819, \
    0x08081908082b1908, 0x0808190819080808, 0x080819081908082b, 0x0808190819082b08, \
    0x08081908192b0808, 0x080819082b080819, 0x080819082b081908, 0x080819082b190808, \
    0x080819082b2b1908, 0x0808191908080808, 0x080819190808082b, 0x0808191908082b08, \
    0x08081919082b0808, 0x080819191908192b, 0x08081919192b2b19, 0x080819192b080808, \
    0x080819192b190819, 0x0808192b08082b19, 0x0808192b08190808, 0x0808192b19080808, \
    0x0808192b2b081908, 0x0808192b2b2b1908, 0x08082b0808080808, 0x08082b0808081919, \
    0x08082b0808082b08, 0x08082b0808191908, 0x08082b08082b2b08, 0x08082b0819080819, \
    0x08082b0819081908, 0x08082b0819190808, 0x08082b081919082b, 0x08082b082b082b08, \
    0x08082b1908081908, 0x08082b1919080808, 0x08082b2b0808082b, 0x08082b2b08191908, \
    0x0819080808080819, 0x0819080808081908, 0x0819080808190808, 0x08190808082b0819, \
    0x0819080819080808, 0x08190808192b0808, 0x081908082b081908, 0x081908082b190808, \
    0x081908082b191919, 0x0819081908080808, 0x0819081908082b08, 0x08190819082b0808, \
    0x0819081919190808, 0x0819081919192b2b, 0x081908192b080808, 0x0819082b082b1908, \
    0x0819082b19081919, 0x0819190808080808, 0x0819190808082b08, 0x08191908082b0808, \
    0x08191908082b1919, 0x0819190819082b19, 0x081919082b080808, 0x0819191908192b08, \
    0x08191919192b082b, 0x0819192b08080808, 0x0819192b0819192b, 0x08192b0808080819, \
    0x08192b0808081908, 0x08192b0808190808, 0x08192b0819080808, 0x08192b082b080819, \
    0x08192b1908080808, 0x08192b1908081919, 0x08192b192b2b0808, 0x08192b2b19190819, \
    0x082b080808080808, 0x082b08080808082b, 0x082b080808082b2b, 0x082b080819081908, \
    0x082b0808192b0819, 0x082b08082b080808, 0x082b08082b08082b, 0x082b0819082b2b19, \
    0x082b081919082b08, 0x082b082b08080808, 0x082b082b0808082b, 0x082b190808080819, \
    0x082b190808081908, 0x082b190808190808, 0x082b190819080808, 0x082b19081919192b, \
    0x082b191908080808, 0x082b191919080819, 0x082b1919192b1908, 0x082b192b2b190808, \
    0x082b2b0808082b08, 0x082b2b08082b0808, 0x082b2b082b191908, 0x082b2b2b19081908, \
    0x1908080808080819, 0x1908080808081908, 0x1908080808190808, 0x1908080808192b08, \
    0x19080808082b0819, 0x19080808082b1908, 0x1908080819080808, 0x1908080819082b08, \
    0x190808081919192b, 0x19080808192b0808, 0x190808082b080819, 0x190808082b081908, \
    0x190808082b190808, 0x1908081908080808, 0x19080819082b0808, 0x19080819192b0819, \
    0x190808192b080808, 0x190808192b081919, 0x1908082b08080819, 0x1908082b08190808, \
    0x1908082b19082b08, 0x1908082b1919192b, 0x1908082b192b2b08, 0x1908190808080808, \
    0x1908190808082b08, 0x19081908082b0808, 0x190819082b080808, 0x190819082b192b19, \
    0x190819190819082b, 0x19081919082b1908, 0x1908192b08080808, 0x19082b0808080819, \
    0x19082b0808081908, 0x19082b0808190808, 0x19082b0819080808, 0x19082b0819081919, \
    0x19082b1908080808, 0x19082b1919192b08, 0x19082b19192b0819, 0x19082b192b08082b, \
    0x19082b2b19081919, 0x19082b2b2b190808, 0x1919080808080808, 0x1919080808082b08, \
    0x1919080808190819, 0x1919080808192b19, 0x19190808082b0808, 0x191908082b080808, \
    0x191908082b082b08, 0x1919081908081908, 0x191908191908082b, 0x191908192b2b1908, \
    0x1919082b2b190819, 0x191919082b190808, 0x191919082b19082b, 0x1919191908082b2b, \
    0x1919192b08080819, 0x1919192b19191908, 0x19192b0808080808, 0x19192b0808190819, \
    0x19192b0808192b19, 0x19192b08192b1908, 0x19192b1919080808, 0x19192b2b08082b08, \
    0x192b080808081908, 0x192b080808190808, 0x192b080819080808, 0x192b0808192b2b08, \
    0x192b081908080808, 0x192b081919191919, 0x192b082b08192b08, 0x192b082b192b0808, \
    0x192b190808080808, 0x192b190808081919, 0x192b191908190808, 0x192b19190819082b, \
    0x192b19192b081908, 0x192b2b081908082b, 0x2b08080808080808, 0x2b0808080808082b, \
    0x2b08080808082b2b, 0x2b08080819080819, 0x2b0808082b08082b, 0x2b08081908081908, \
    0x2b08081908192b08, 0x2b08081919080808, 0x2b08082b08190819, 0x2b08190808080819, \
    0x2b08190808081908, 0x2b08190808190808, 0x2b08190808191919, 0x2b08190819080808, \
    0x2b081908192b0808, 0x2b08191908080808, 0x2b0819191908192b, 0x2b0819192b191908, \
    0x2b08192b08082b19, 0x2b08192b19080808, 0x2b08192b192b0808, 0x2b082b080808082b, \
    0x2b082b1908081908, 0x2b082b2b08190819, 0x2b19080808081908, 0x2b19080808190808, \
    0x2b190808082b1908, 0x2b19080819080808, 0x2b1908082b2b0819, 0x2b1908190819192b, \
    0x2b1908192b080808, 0x2b19082b19081919, 0x2b19190808080808, 0x2b191908082b082b, \
    0x2b19190819081908, 0x2b19191919190819, 0x2b192b082b080819, 0x2b192b19082b0808, \
    0x2b2b08080808082b, 0x2b2b080819190808, 0x2b2b08082b081919, 0x2b2b081908082b19, \
    0x2b2b082b08080808, 0x2b2b190808192b08, 0x2b2b2b0819190808, 0x2b2b2b1908081908, \

// ksigns_iq2xs: the 8 signs of a group of 8 from 7 stored bits: bit 7 makes the count of minus
// signs even (i | parity(i) << 7).
#define DS41_GGML_KSIGNS_IQ2XS \
    0x00, 0x81, 0x82, 0x03, 0x84, 0x05, 0x06, 0x87, 0x88, 0x09, 0x0a, 0x8b, 0x0c, 0x8d, 0x8e, 0x0f, \
    0x90, 0x11, 0x12, 0x93, 0x14, 0x95, 0x96, 0x17, 0x18, 0x99, 0x9a, 0x1b, 0x9c, 0x1d, 0x1e, 0x9f, \
    0xa0, 0x21, 0x22, 0xa3, 0x24, 0xa5, 0xa6, 0x27, 0x28, 0xa9, 0xaa, 0x2b, 0xac, 0x2d, 0x2e, 0xaf, \
    0x30, 0xb1, 0xb2, 0x33, 0xb4, 0x35, 0x36, 0xb7, 0xb8, 0x39, 0x3a, 0xbb, 0x3c, 0xbd, 0xbe, 0x3f, \
    0xc0, 0x41, 0x42, 0xc3, 0x44, 0xc5, 0xc6, 0x47, 0x48, 0xc9, 0xca, 0x4b, 0xcc, 0x4d, 0x4e, 0xcf, \
    0x50, 0xd1, 0xd2, 0x53, 0xd4, 0x55, 0x56, 0xd7, 0xd8, 0x59, 0x5a, 0xdb, 0x5c, 0xdd, 0xde, 0x5f, \
    0x60, 0xe1, 0xe2, 0x63, 0xe4, 0x65, 0x66, 0xe7, 0xe8, 0x69, 0x6a, 0xeb, 0x6c, 0xed, 0xee, 0x6f, \
    0xf0, 0x71, 0x72, 0xf3, 0x74, 0xf5, 0xf6, 0x77, 0x78, 0xf9, 0xfa, 0x7b, 0xfc, 0x7d, 0x7e, 0xff, \

#define DS41_GGML_KMASK_IQ2XS 1, 2, 4, 8, 16, 32, 64, 128

inline constexpr uint64_t kIq2xxsGrid[256] = {DS41_GGML_IQ2XXS_GRID};
inline constexpr uint8_t kIq2xsSigns[128] = {DS41_GGML_KSIGNS_IQ2XS};
inline constexpr uint8_t kIq2xsSignMask[8] = {DS41_GGML_KMASK_IQ2XS};
#if defined(__CUDACC__)
// Device copies of the same data: a host array cannot be read from device code, and an inline
// __device__ variable needs -rdc, so each translation unit keeps its own (internal linkage).
namespace ggml_detail {
static __device__ const uint64_t kIq2xxsGridDevice[256] = {DS41_GGML_IQ2XXS_GRID};
static __device__ const uint8_t kIq2xsSignsDevice[128] = {DS41_GGML_KSIGNS_IQ2XS};
static __device__ const uint8_t kIq2xsSignMaskDevice[8] = {DS41_GGML_KMASK_IQ2XS};
}  // namespace ggml_detail
#endif
#undef DS41_GGML_IQ2XXS_GRID
#undef DS41_GGML_KSIGNS_IQ2XS
#undef DS41_GGML_KMASK_IQ2XS

/// Entry i of each table, from the host or the device copy.
DS41_HD uint64_t iq2xxs_grid(int i) {
#if DS41_DEVICE_CODE
  return ggml_detail::kIq2xxsGridDevice[i];
#else
  return kIq2xxsGrid[i];
#endif
}
DS41_HD uint8_t iq2xs_signs(int i) {
#if DS41_DEVICE_CODE
  return ggml_detail::kIq2xsSignsDevice[i];
#else
  return kIq2xsSigns[i];
#endif
}
DS41_HD uint8_t iq2xs_sign_mask(int j) {
#if DS41_DEVICE_CODE
  return ggml_detail::kIq2xsSignMaskDevice[j];
#else
  return kIq2xsSignMask[j];
#endif
}

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
      for (int j = 0; j < 8; ++j) {
        const float mag = to_float(static_cast<int>((grid >> (8 * j)) & 0xFFu));
        out[32 * g + 8 * l + j] = db * mag * ((signs & iq2xs_sign_mask(j)) ? -1.0f : 1.0f);
      }
    }
  }
}

// ---------------------------------------------------------------- one dispatch from the file's id
/// Whether dequantize_ggml_block knows a type.
DS41_HD constexpr bool ggml_block_dequantizable(GgmlType type) {
  switch (type) {
    case GgmlType::kQ8_0: case GgmlType::kMXFP4: case GgmlType::kI8: case GgmlType::kQ2_K: case GgmlType::kQ3_K:
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: case GgmlType::kQ6_K: case GgmlType::kIQ2_XXS: return true;
    default: return false;
  }
}
/// One block of `type` (ggml_type_info(type).block_bytes bytes) to its block_elems f32 values;
/// false (and nothing written) for a type ggml_block_dequantizable refuses.
DS41_HD bool dequantize_ggml_block(GgmlType type, const uint8_t* block, float* out) {
  switch (type) {
    case GgmlType::kQ8_0: dequantize_block_q8_0(block, out); return true;
    case GgmlType::kMXFP4: dequantize_block_mxfp4(block, out); return true;
    case GgmlType::kI8: dequantize_block_i8(block, out); return true;
    case GgmlType::kQ2_K: dequantize_block_q2_K(block, out); return true;
    case GgmlType::kQ3_K: dequantize_block_q3_K(block, out); return true;
    case GgmlType::kQ4_K: dequantize_block_q4_K(block, out); return true;
    case GgmlType::kQ5_K: dequantize_block_q5_K(block, out); return true;
    case GgmlType::kQ6_K: dequantize_block_q6_K(block, out); return true;
    case GgmlType::kIQ2_XXS: dequantize_block_iq2_xxs(block, out); return true;
    default: return false;
  }
}

// ---------------------------------------------------------------- the types a Linear keeps as stored
/// The ggml types a Linear reads as stored (WeightFormat::kGgmlBlocks, core/linear_math.hpp): the
/// block types whose value is ggml's dequantization (above) and F16. Their Linear is the f32 Linear over
/// those values (dot_f32's products and sums, in K order), so a kept weight gives the bits of the
/// same weight widened to f32. MXFP4 is not among them: it is ds41's fp4 Linear (kFp4Block32), the
/// reference's fp4 arithmetic; I8 and the rest are widened at load.
DS41_HD constexpr bool ggml_linear_type(GgmlType t) {
  switch (t) {
    case GgmlType::kF16: case GgmlType::kQ8_0: case GgmlType::kQ2_K: case GgmlType::kQ3_K: case GgmlType::kQ4_K:
    case GgmlType::kQ5_K: case GgmlType::kQ6_K: case GgmlType::kIQ2_XXS: return true;
    default: return false;
  }
}
/// Elements of one block of a ggml_linear_type (F16: 1).
DS41_HD constexpr int ggml_block_elems(GgmlType t) {
  return t == GgmlType::kF16 ? 1 : t == GgmlType::kQ8_0 ? 32 : 256;
}
/// Bytes of one block of a ggml_linear_type.
DS41_HD constexpr int ggml_block_bytes(GgmlType t) {
  switch (t) {
    case GgmlType::kF16: return 2;
    case GgmlType::kQ8_0: return GgmlQ8_0::kBlockBytes;
    case GgmlType::kQ2_K: return GgmlQ2_K::kBlockBytes;
    case GgmlType::kQ3_K: return GgmlQ3_K::kBlockBytes;
    case GgmlType::kQ4_K: return GgmlQ4_K::kBlockBytes;
    case GgmlType::kQ5_K: return GgmlQ5_K::kBlockBytes;
    case GgmlType::kQ6_K: return GgmlQ6_K::kBlockBytes;
    case GgmlType::kIQ2_XXS: return GgmlIQ2_XXS::kBlockBytes;
    default: return 0;
  }
}
/// Bytes of one row of `cols` elements (cols a whole number of blocks).
DS41_HD constexpr long ggml_row_bytes(GgmlType t, int cols) {
  return static_cast<long>(cols / ggml_block_elems(t)) * ggml_block_bytes(t);
}
/// Where a block of a ggml_linear_type keeps its f16 scales (d, and dmin for the types with mins),
/// as byte offsets; -1 ends the list (F16 has none: its elements are the f16s).
DS41_HD constexpr void ggml_scale_offsets(GgmlType t, int out[2]) {
  out[0] = -1, out[1] = -1;
  switch (t) {
    case GgmlType::kQ8_0: case GgmlType::kIQ2_XXS: out[0] = 0; break;
    case GgmlType::kQ2_K: out[0] = 80, out[1] = 82; break;
    case GgmlType::kQ3_K: out[0] = 108; break;
    case GgmlType::kQ4_K: case GgmlType::kQ5_K: out[0] = 0, out[1] = 2; break;
    case GgmlType::kQ6_K: out[0] = 208; break;
    default: break;
  }
}
/// The first of `n` blocks of a ggml_linear_type other than F16 whose values are not all finite,
/// or -1. A block's values are products of its f16 scales with integers below 2^13 (and, with
/// mins, a difference of two such): all finite when the scales are (65504 · 2^13 < FLT_MAX), and
/// some value is inf or NaN when a scale is (inf · 0 is NaN). So the scales alone decide, which is
/// what lets a kept tensor be checked at load, and a streamed expert at read, for ~1 byte in 100.
DS41_HD long ggml_first_nonfinite_block(GgmlType t, const uint8_t* blocks, long n) {
  int off[2];
  ggml_scale_offsets(t, off);
  const int bb = ggml_block_bytes(t);
  for (long b = 0; b < n; ++b)
    for (int i = 0; i < 2 && off[i] >= 0; ++i) {
      const uint8_t* h = blocks + b * bb + off[i];
      if ((h[1] & 0x7C) == 0x7C) return b;  // f16 exponent all ones: inf or NaN
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
// The per-format constants agree with the table.
namespace ggml_detail {
template <class F>
constexpr bool matches_table() {
  return ggml_type_info(F::kType).block_elems == F::kBlockElems && ggml_type_info(F::kType).block_bytes == F::kBlockBytes;
}
static_assert(matches_table<GgmlQ8_0>() && matches_table<GgmlMxfp4>() && matches_table<GgmlI8>() &&
              matches_table<GgmlQ2_K>() && matches_table<GgmlQ3_K>() && matches_table<GgmlQ4_K>() &&
              matches_table<GgmlQ5_K>() && matches_table<GgmlQ6_K>() && matches_table<GgmlIQ2_XXS>());
}  // namespace ggml_detail

}  // namespace ds41
#include "fp_exact_end.hpp"
