// GGUF block dequantization (issue 39): core/ggml_quants.hpp against vectors that two
// implementations outside ds41 made and agreed on bit for bit: ggml's own C dequantize_row_<type>
// built without FP contraction, and gguf-py's numpy (tools/ggml_vectors/make_vectors.py; the
// format is tests/data/ggml_quants/README.md). Every element of every block, bit for bit.
#include <doctest/doctest.h>
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
  // Which byte: a scale of every format (Q8_0, IQ2_XXS: d's high byte; MXFP4: e; I8: the value;
  // Q2_K: scales[0]; Q3_K, Q4_K, Q5_K: the first packed-scale byte; Q6_K: scales[0]).
  const std::pair<const char*, int> kScaleByte[] = {{"q8_0", 1}, {"mxfp4", 0}, {"i8", 0},  {"q2_K", 0},     {"q3_K", 96},
                                                    {"q4_K", 4}, {"q5_K", 4},  {"q6_K", 192}, {"iq2_xxs", 1}};
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

TEST_CASE("ggml_quants: the IQ2_XXS tables, and the vectors use every entry of them") {
  for (int i = 0; i < 128; ++i) {  // ksigns: 7 bits and their parity in bit 7
    int parity = 0;
    for (int b = 0; b < 7; ++b) parity ^= (i >> b) & 1;
    CHECK(kIq2xsSigns[i] == (i | parity << 7));
  }
  for (int j = 0; j < 8; ++j) CHECK(kIq2xsSignMask[j] == (1 << j));
  for (uint64_t g : kIq2xxsGrid)
    for (int j = 0; j < 8; ++j) {
      const uint64_t v = (g >> (8 * j)) & 0xFF;
      CHECK((v == 0x08 || v == 0x19 || v == 0x2b));
    }

  // every grid index and every sign index appears in a vector block whose d is not zero, so the
  // bit-for-bit test has checked each table entry
  const VectorFile f = load_vectors("iq2_xxs");
  bool grid_seen[256] = {}, sign_seen[128] = {};
  for (const VectorBlock& b : f.blocks) {
    if ((b.bytes[0] | (b.bytes[1] & 0x7F)) == 0) continue;  // d = ±0
    for (int g = 0; g < 8; ++g) {
      const uint8_t* group = b.bytes.data() + 2 + 8 * g;
      const uint32_t aux = group[4] | group[5] << 8 | group[6] << 16 | static_cast<uint32_t>(group[7]) << 24;
      for (int l = 0; l < 4; ++l) {
        grid_seen[group[l]] = true;
        sign_seen[(aux >> (7 * l)) & 127] = true;
      }
    }
  }
  for (int i = 0; i < 256; ++i) CHECK_MESSAGE(grid_seen[i], "grid index ", i, " not in the vectors");
  for (int i = 0; i < 128; ++i) CHECK_MESSAGE(sign_seen[i], "sign index ", i, " not in the vectors");
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
  for (GgmlType t : {GgmlType::kF16, GgmlType::kQ4_0, GgmlType::kQ8_K, GgmlType::kIQ2_XS, GgmlType::kBF16}) {
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
  CHECK(checked >= 7 * 48);
}

}  // namespace test_ggml_quants
