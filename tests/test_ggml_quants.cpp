// GGUF block dequantization (issue 39): core/ggml_quants.hpp against vectors that two
// implementations outside ds41 made and agreed on bit for bit: ggml's own C dequantize_row_<type>
// built without FP contraction, and gguf-py's numpy (tools/ggml_vectors/make_vectors.py; the
// format is tests/data/ggml_quants/README.md). Every element of every block, bit for bit.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/backend/host/gemv_ggml.hpp"
#include "ds41/core/ggml_quants.hpp"
#include "ds41/io/gguf_types.hpp"

namespace test_ggml_quants {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

namespace {

const std::string kDataDir = DS41_GGML_QUANTS_DATA;

/// One block of a vector file: where it came from, its bytes, and the f32 bits both
/// implementations gave.
struct VectorBlock {
  std::string label;
  std::vector<uint8_t> bytes;
  std::vector<uint32_t> expected;
};

struct VectorFile {
  uint32_t type_id = 0;
  int block_elems = 0, block_bytes = 0;
  std::vector<VectorBlock> blocks;
};

uint32_t u32_at(const std::vector<uint8_t>& b, size_t off) {
  return static_cast<uint32_t>(b[off]) | static_cast<uint32_t>(b[off + 1]) << 8 |
         static_cast<uint32_t>(b[off + 2]) << 16 | static_cast<uint32_t>(b[off + 3]) << 24;
}

VectorFile load_vectors(const std::string& name) {
  const std::string path = kDataDir + "/" + name + ".bin";
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  const std::vector<uint8_t> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE_MESSAGE(raw.size() >= 32, path, ": shorter than its header");
  REQUIRE_MESSAGE(std::memcmp(raw.data(), "DS41GGQV", 8) == 0, path, ": not a ds41 ggml-quants vector file");
  REQUIRE_MESSAGE(u32_at(raw, 8) == 1, path, ": format version ", u32_at(raw, 8));
  VectorFile f;
  f.type_id = u32_at(raw, 12);
  f.block_elems = static_cast<int>(u32_at(raw, 16));
  f.block_bytes = static_cast<int>(u32_at(raw, 20));
  const size_t count = u32_at(raw, 24), label_bytes = u32_at(raw, 28);
  const size_t record = label_bytes + f.block_bytes + 4 * static_cast<size_t>(f.block_elems);
  REQUIRE_MESSAGE(raw.size() == 32 + count * record, path, ": ", raw.size(), " bytes for ", count, " blocks");
  for (size_t k = 0; k < count; ++k) {
    const size_t off = 32 + k * record;
    VectorBlock b;
    b.label.assign(reinterpret_cast<const char*>(&raw[off]), strnlen(reinterpret_cast<const char*>(&raw[off]), label_bytes));
    b.bytes.assign(raw.begin() + off + label_bytes, raw.begin() + off + label_bytes + f.block_bytes);
    for (int e = 0; e < f.block_elems; ++e) b.expected.push_back(u32_at(raw, off + label_bytes + f.block_bytes + 4 * e));
    f.blocks.push_back(std::move(b));
  }
  return f;
}

/// The types with vector files, with the fewest blocks a file must hold (so a truncated
/// regeneration cannot pass).
struct VectorType {
  const char* file;
  GgmlType type;
  size_t min_blocks;
};
constexpr VectorType kVectorTypes[] = {
    {"q8_0", GgmlType::kQ8_0, 48},   {"mxfp4", GgmlType::kMXFP4, 48}, {"i8", GgmlType::kI8, 256},
    {"q2_K", GgmlType::kQ2_K, 48},   {"q3_K", GgmlType::kQ3_K, 48},   {"q4_K", GgmlType::kQ4_K, 48},
    {"q5_K", GgmlType::kQ5_K, 48},   {"q6_K", GgmlType::kQ6_K, 48},   {"iq2_xxs", GgmlType::kIQ2_XXS, 48},
    {"q4_0", GgmlType::kQ4_0, 48},   {"q4_1", GgmlType::kQ4_1, 48},   {"q5_0", GgmlType::kQ5_0, 48},
    {"q5_1", GgmlType::kQ5_1, 48},   {"iq2_xs", GgmlType::kIQ2_XS, 48}, {"iq3_xxs", GgmlType::kIQ3_XXS, 48},
    {"iq1_s", GgmlType::kIQ1_S, 64}, {"iq4_nl", GgmlType::kIQ4_NL, 48}, {"iq3_s", GgmlType::kIQ3_S, 48},
    {"iq2_s", GgmlType::kIQ2_S, 48}, {"iq4_xs", GgmlType::kIQ4_XS, 48}, {"iq1_m", GgmlType::kIQ1_M, 64},
    {"tq1_0", GgmlType::kTQ1_0, 48}, {"tq2_0", GgmlType::kTQ2_0, 48}, {"nvfp4", GgmlType::kNVFP4, 48},
    {"q1_0", GgmlType::kQ1_0, 48},   {"q2_0", GgmlType::kQ2_0, 48},
};

using Dequantizer = std::function<void(const uint8_t* block, float* out)>;

struct Comparison {
  size_t blocks = 0, elements = 0, mismatches = 0;
  std::string first;  // type, block, label and element of the first mismatch
};

/// Runs `dequantize` on every block of a file and counts the elements whose bits differ.
Comparison compare(const char* name, const VectorFile& f, const Dequantizer& dequantize) {
  Comparison c;
  std::vector<float> out(static_cast<size_t>(f.block_elems));
  for (size_t k = 0; k < f.blocks.size(); ++k) {
    const VectorBlock& b = f.blocks[k];
    dequantize(b.bytes.data(), out.data());
    ++c.blocks;
    for (int e = 0; e < f.block_elems; ++e) {
      ++c.elements;
      const uint32_t got = f32_bits(out[e]);
      if (got == b.expected[e]) continue;
      if (c.mismatches++ == 0) {
        std::ostringstream s;
        s << name << " block " << k << " (" << b.label << ") element " << e << ": expected " << bits_f32(b.expected[e])
          << " (0x" << std::hex << b.expected[e] << "), got " << out[e] << " (0x" << got << ")";
        c.first = s.str();
      }
    }
  }
  return c;
}

Dequantizer ds41_dequantizer(GgmlType type) {
  return [type](const uint8_t* block, float* out) { REQUIRE(dequantize_ggml_block(type, block, out)); };
}

}  // namespace

TEST_CASE("ggml_quants: ds41's type table is ggml's (types.txt, read out of ggml by the generator)") {
  std::ifstream in(kDataDir + "/types.txt");
  REQUIRE(in.good());
  std::string line;
  size_t rows = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    uint32_t id = 0;
    std::string name;
    int elems = 0, bytes = 0;
    REQUIRE_MESSAGE(static_cast<bool>(s >> id >> name >> elems >> bytes), "bad line: ", line);
    ++rows;
    const GgmlTypeInfo* t = ggml_type_info(id);
    REQUIRE_MESSAGE(t != nullptr, "ggml type ", id, " (", name, ") missing from kGgmlTypes");
    CHECK(std::string(t->name) == name);
    CHECK(t->block_elems == elems);
    CHECK(t->block_bytes == bytes);
  }
  CHECK(rows == std::size(kGgmlTypes));  // and no type ggml does not have
  CHECK(ggml_type_info(4u) == nullptr);   // removed Q4_2
  CHECK(ggml_type_info(1000u) == nullptr);
}

TEST_CASE("ggml_quants: every element of every vector block, bit for bit") {
  size_t total_blocks = 0, total_elements = 0, total_mismatches = 0;
  for (const VectorType& vt : kVectorTypes) {
    const std::string name = vt.file;
    CAPTURE(name);
    const VectorFile f = load_vectors(vt.file);
    const GgmlTypeInfo& info = ggml_type_info(vt.type);
    REQUIRE(f.type_id == static_cast<uint32_t>(vt.type));
    REQUIRE(f.block_elems == info.block_elems);
    REQUIRE(f.block_bytes == info.block_bytes);
    REQUIRE(f.blocks.size() >= vt.min_blocks);
    CHECK(ggml_block_dequantizable(vt.type));
    const Comparison c = compare(vt.file, f, ds41_dequantizer(vt.type));
    MESSAGE(name, ": ", c.blocks, " blocks, ", c.elements, " elements, ", c.mismatches, " mismatches");
    CHECK_MESSAGE(c.mismatches == 0, c.mismatches, " mismatches; first: ", c.first);
    total_blocks += c.blocks;
    total_elements += c.elements;
    total_mismatches += c.mismatches;
  }
  MESSAGE("all types: ", total_blocks, " blocks, ", total_elements, " elements, ", total_mismatches, " mismatches");
}

TEST_CASE("ggml_quants: the comparison fails when a scale byte is flipped") {
  // Which byte: a scale of every format (Q4_0..Q8_0 and the IQ types but IQ1_M: d's high byte;
  // MXFP4: e; I8: the value; Q2_K: scales[0]; Q3_K, Q4_K, Q5_K: the first packed-scale byte; Q6_K:
  // scales[0]; IQ1_M: its first scale word's low byte; TQ1_0, TQ2_0: d's high byte at the end;
  // NVFP4: the first UE4M3 scale).
  const std::pair<const char*, int> kScaleByte[] = {
      {"q8_0", 1},   {"mxfp4", 0},   {"i8", 0},     {"q2_K", 0},    {"q3_K", 96},   {"q4_K", 4},
      {"q5_K", 4},   {"q6_K", 192},  {"iq2_xxs", 1}, {"q4_0", 1},    {"q4_1", 1},    {"q5_0", 1},
      {"q5_1", 1},   {"iq2_xs", 1},  {"iq3_xxs", 1}, {"iq1_s", 1},   {"iq4_nl", 1},  {"iq3_s", 1},
      {"iq2_s", 1},  {"iq4_xs", 1},  {"iq1_m", 48},  {"tq1_0", 53},  {"tq2_0", 65},  {"nvfp4", 0},
      {"q1_0", 1},   {"q2_0", 1}};
  for (const VectorType& vt : kVectorTypes) {
    const std::string name = vt.file;
    CAPTURE(name);
    int byte = -1;
    for (const auto& [name, b] : kScaleByte)
      if (std::string(name) == vt.file) byte = b;
    REQUIRE(byte >= 0);
    const VectorFile f = load_vectors(vt.file);
    const Dequantizer mutated = [&](const uint8_t* block, float* out) {
      std::vector<uint8_t> copy(block, block + f.block_bytes);
      copy[byte] ^= 0x01;
      REQUIRE(dequantize_ggml_block(vt.type, copy.data(), out));
    };
    const Comparison c = compare(vt.file, f, mutated);
    CHECK(c.mismatches > 0);
    if (name == "q2_K") MESSAGE("a flipped q2_K scale byte: ", c.mismatches, " mismatches; first: ", c.first);
  }

  // and one block by hand: a Q2_K block whose sub-block 0 has codes, a scale and a min
  uint8_t block[GgmlQ2_K::kBlockBytes] = {};
  block[0] = 0x35;                    // scale 5, min 3 for sub-block 0
  for (int l = 0; l < 16; ++l) block[16 + l] = static_cast<uint8_t>(l % 4);
  block[80] = 0x00, block[81] = 0x3C;  // d = 1
  block[82] = 0x00, block[83] = 0x38;  // dmin = 0.5
  float a[256], b[256];
  dequantize_block_q2_K(block, a);
  CHECK(a[1] == 5.0f * 1 - 1.5f);
  CHECK(a[3] == 5.0f * 3 - 1.5f);
  block[0] ^= 0x01;  // scale 4
  dequantize_block_q2_K(block, b);
  CHECK(b[3] == 4.0f * 3 - 1.5f);
  CHECK(f32_bits(a[3]) != f32_bits(b[3]));
}

/// The lookup tables of core/ggml_grids.hpp, as the coverage test below counts their entries.
enum Table { kIq2xxs, kIq2xs, kIq2s, kIq3xxs, kIq3s, kIq1s, kSigns, kIq4Values, kTables };
constexpr int kTableSize[kTables] = {256, 512, 1024, 256, 512, 2048, 128, 16};
constexpr const char* kTableName[kTables] = {"iq2xxs_grid", "iq2xs_grid", "iq2s_grid",    "iq3xxs_grid",
                                             "iq3s_grid",   "iq1s_grid",  "ksigns_iq2xs", "kvalues_iq4nl"};

/// use(table, index) for each table entry a block of `t` reads where the entry reaches a value
/// (the block's d, and IQ4_XS's group scale, not zero: a zero factor hides the entry's magnitude).
/// Read from the layouts in ggml-common.h, apart from the dequantizers under test.
void table_uses(GgmlType t, const uint8_t* b, const std::function<void(Table, int)>& use) {
  const auto u16 = [&](int o) { return static_cast<uint32_t>(b[o] | b[o + 1] << 8); };
  const auto u32 = [&](int o) { return u16(o) | u16(o + 2) << 16; };
  const bool d_zero = t == GgmlType::kIQ1_M ? (iq1_m_d_bits(b) & 0x7FFF) == 0 : (u16(0) & 0x7FFF) == 0;
  if (d_zero) return;
  for (int g = 0; g < 8; ++g) {
    switch (t) {
      case GgmlType::kIQ2_XXS:
        for (int l = 0; l < 4; ++l) use(kIq2xxs, b[2 + 8 * g + l]), use(kSigns, (u32(2 + 8 * g + 4) >> (7 * l)) & 127);
        break;
      case GgmlType::kIQ2_XS:
        for (int l = 0; l < 4; ++l) use(kIq2xs, u16(2 + 2 * (4 * g + l)) & 511), use(kSigns, u16(2 + 2 * (4 * g + l)) >> 9);
        break;
      case GgmlType::kIQ2_S:
        for (int l = 0; l < 4; ++l) use(kIq2s, b[2 + 4 * g + l] | ((b[66 + g] << (8 - 2 * l)) & 0x300));
        break;
      case GgmlType::kIQ3_XXS:
        for (int k = 0; k < 8; ++k) use(kIq3xxs, b[2 + 8 * g + k]);
        for (int l = 0; l < 4; ++l) use(kSigns, (u32(66 + 4 * g) >> (7 * l)) & 127);
        break;
      case GgmlType::kIQ3_S:
        for (int k = 0; k < 8; ++k) use(kIq3s, b[2 + 8 * g + k] | (((b[66 + g] >> k) & 1) << 8));
        break;
      case GgmlType::kIQ1_S:
        for (int l = 0; l < 4; ++l) use(kIq1s, b[2 + 4 * g + l] | ((u16(34 + 2 * g) >> (3 * l)) & 7) << 8);
        break;
      case GgmlType::kIQ1_M:
        for (int l = 0; l < 4; ++l) use(kIq1s, b[4 * g + l] | ((b[32 + 2 * g + l / 2] >> (4 * (l % 2))) & 7) << 8);
        break;
      case GgmlType::kIQ4_NL:
        if (g == 0)  // one group of 32: 16 bytes of two codes
          for (int j = 0; j < 16; ++j) use(kIq4Values, b[2 + j] & 0xF), use(kIq4Values, b[2 + j] >> 4);
        break;
      case GgmlType::kIQ4_XS: {
        const int ls = ((b[4 + g / 2] >> (4 * (g % 2))) & 0xF) | ((u16(2) >> (2 * g)) & 3) << 4;
        if (ls != 32)
          for (int j = 0; j < 16; ++j) use(kIq4Values, b[8 + 16 * g + j] & 0xF), use(kIq4Values, b[8 + 16 * g + j] >> 4);
        break;
      }
      default: return;
    }
  }
}

TEST_CASE("ggml_quants: the IQ tables, and the vectors of each IQ type use every entry of its tables") {
  for (int i = 0; i < 128; ++i) {  // ksigns: 7 bits and their parity in bit 7
    int parity = 0;
    for (int b = 0; b < 7; ++b) parity ^= (i >> b) & 1;
    CHECK(kIq2xsSigns[i] == (i | parity << 7));
  }
  for (int j = 0; j < 8; ++j) CHECK(kIq2xsSignMask[j] == (1 << j));
  // the grids' bytes: the magnitudes each type's points are made of
  const auto bytes_in = [](const auto& grid, int bytes, std::initializer_list<int> allowed) {
    for (const auto point : grid)
      for (int j = 0; j < bytes; ++j) {
        const int v = static_cast<int>((static_cast<uint64_t>(point) >> (8 * j)) & 0xFF);
        CHECK_MESSAGE(std::find(allowed.begin(), allowed.end(), v) != allowed.end(), "grid byte ", v);
      }
  };
  bytes_in(kIq2xxsGrid, 8, {0x08, 0x19, 0x2b});
  bytes_in(kIq2xsGrid, 8, {0x08, 0x19, 0x2b});
  bytes_in(kIq2sGrid, 8, {0x08, 0x19, 0x2b});
  bytes_in(kIq3xxsGrid, 4, {4, 12, 20, 28, 36, 44, 52, 62});
  bytes_in(kIq3sGrid, 4, {1, 3, 5, 7, 9, 11, 13, 15});
  bytes_in(kIq1sGrid, 8, {0x00, 0x01, 0xFF});
  CHECK(iq4nl_value(0) == -127);
  CHECK(iq4nl_value(15) == 113);
  for (int i = 1; i < 16; ++i) CHECK(iq4nl_value(i - 1) < iq4nl_value(i));

  // Every entry appears in a vector block of each type that reads the table, where it reaches a
  // value: so the bit-for-bit test has checked each entry through each type's indexing.
  const std::pair<const char*, GgmlType> kIqFiles[] = {
      {"iq2_xxs", GgmlType::kIQ2_XXS}, {"iq2_xs", GgmlType::kIQ2_XS}, {"iq2_s", GgmlType::kIQ2_S},
      {"iq3_xxs", GgmlType::kIQ3_XXS}, {"iq3_s", GgmlType::kIQ3_S},   {"iq1_s", GgmlType::kIQ1_S},
      {"iq1_m", GgmlType::kIQ1_M},     {"iq4_nl", GgmlType::kIQ4_NL}, {"iq4_xs", GgmlType::kIQ4_XS}};
  for (const auto& [file_name, type] : kIqFiles) {
    const std::string file = file_name;
    const GgmlType file_type = type;
    CAPTURE(file);
    std::vector<std::vector<bool>> seen(kTables);
    for (int t = 0; t < kTables; ++t) seen[t].assign(kTableSize[t], false);
    std::vector<bool> reads(kTables, false);
    for (const VectorBlock& b : load_vectors(file).blocks)
      table_uses(file_type, b.bytes.data(), [&](Table t, int i) {
        REQUIRE(i < kTableSize[t]);
        reads[t] = true, seen[t][i] = true;
      });
    int tables = 0;
    for (int t = 0; t < kTables; ++t) {
      if (!reads[t]) continue;
      ++tables;
      int missing = 0, first = -1;
      for (int i = 0; i < kTableSize[t]; ++i)
        if (!seen[t][i]) first = first < 0 ? i : first, ++missing;
      CHECK_MESSAGE(missing == 0, kTableName[t], ": ", missing, " entries unused, the first ", first);
    }
    CHECK(tables >= 1);
  }
}

TEST_CASE("ggml_quants: f16_to_f32 is IEEE's value on all 65536 patterns") {
  // the value from the definition (sign, 5-bit exponent, 10-bit mantissa), by ldexp
  auto reference = [](uint32_t h) {
    const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 31) return bits_f32((h & 0x8000u) << 16 | 0x7F800000u | static_cast<uint32_t>(m) << 13);
    const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(m | 0x400), e - 25);
    return (h & 0x8000u) ? -v : v;
  };
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint32_t a = f32_bits(f16_to_f32(static_cast<uint16_t>(h)));
    const uint32_t b = f32_bits(reference(h));
    if (a != b) FAIL_CHECK("f16 0x", std::hex, h, ": ", a, " vs ", b);
  }
}

TEST_CASE("ggml_quants: dispatch refuses the types it does not dequantize") {
  float out[256];
  out[0] = 7.0f;
  const uint8_t block[256] = {};
  for (GgmlType t : {GgmlType::kF16, GgmlType::kQ8_1, GgmlType::kQ8_K, GgmlType::kBF16, GgmlType::kF32, GgmlType::kI32}) {
    CHECK_FALSE(ggml_block_dequantizable(t));
    CHECK_FALSE(dequantize_ggml_block(t, block, out));
  }
  CHECK(out[0] == 7.0f);
}

TEST_CASE("ggml_quants: the host Linear's block decoders give every vector block's values") {
  // host/gemv_ggml.hpp decodes kept blocks with its own (vector) code for some types; it must give
  // the definition's bits, so the same vectors hold it
  size_t checked = 0;
  for (const VectorType& vt : kVectorTypes) {
    if (!ggml_linear_type(vt.type)) continue;  // MXFP4 and I8 are not read as kept blocks
    const std::string name = vt.file;
    CAPTURE(name);
    const VectorFile f = load_vectors(vt.file);
    const Comparison c = compare(vt.file, f, [&](const uint8_t* block, float* out) {
      host_ggml::decode_segment(vt.type, block, f.block_elems, out);
    });
    CHECK_MESSAGE(c.mismatches == 0, c.mismatches, " mismatches; first: ", c.first);
    checked += c.blocks;
  }
  CHECK(checked >= 24 * 48);
}

}  // namespace test_ggml_quants
