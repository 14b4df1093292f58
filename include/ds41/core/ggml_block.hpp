// ds41/core/ggml_block.hpp — ggml's tensor types as GGUF files name them: the type table (block
// elements and bytes of every type ggml knows) and the little-endian loads every block decoder uses.
// The values of the block types ds41 reads are core/ggml_quants.hpp's.
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
/// A block format: its id and sizes, for templates over formats (the per-type constants; its
/// dequantization is core/ggml_quants.hpp's dequantize_block_<type>, from a template
/// dequantize_ggml_format(Format{}, ...)).
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

}  // namespace ggml_detail

}  // namespace ds41
#include "fp_exact_end.hpp"
