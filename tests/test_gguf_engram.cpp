// Engram tables in ggml's block types (issue 39): vcruz305's published rungs quantize the engram
// tables with the rung (Q8_0 down to Q3_K, Q4_K at Q4_K_M), whose values are not e4m3 codes times
// a power of two. ds41 reads such a table as rows of ggml's f32 values, rounded to bf16 by the
// lookup as the reference rounds its dequantized rows. Checked here: a table given as values runs
// with the bits of the fp8 table it equals (the values path against the fp8 path); a tiny model
// written with its engram tables in Q8_0, each K-quant, IQ2_XXS, MXFP4, F16, BF16 and F32 runs,
// resident and with RowReaderTable, with the bits of the same model given the file's dequantized
// values (core/ggml_quants.hpp, block by block from the file's bytes) as its tables; a non-finite row,
// rows that are not whole blocks and a value table's missing scales are refused by name.
// Compiled into test_gguf_types (tests/CMakeLists.txt).
#include <doctest/doctest.h>
#include <cmath>
#include <cstring>
#include <fstream>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "gguf_tiny_runs.hpp"
#include "temp_dir.hpp"

namespace test_gguf_engram {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using namespace ds41::gguf;
using namespace gguf_test;

namespace {

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-gguf-engram") {}
};
using testing::error_of;
using HB = HostBackend;

/// A config and its weights by the tiny golden's rules.
struct Tiny {
  ModelConfig config;
  WeightSet weights;
};
/// The tiny golden's own config (engram rows of 32) or one with engram rows of 256 (whole
/// K-quant and IQ2_XXS blocks).
const Tiny& tiny_model(bool rows256) {
  static const Tiny t32{tiny().config, golden::regenerate_weights(tiny())};
  static const Tiny t256 = [] {
    Tiny out;
    out.config = tiny().config;
    out.config.engram_head_dim = 256;
    out.config.validate();
    out.weights = rule_weights(out.config);
    return out;
  }();
  return rows256 ? t256 : t32;
}

std::string engram_prefix(int layer) { return "layers." + std::to_string(layer) + ".engram."; }
std::string table_prefix(int layer) { return engram_prefix(layer) + "embed."; }

/// The values code · scale of the fp8 engram table `p` in `ws` (codes held as e4m3 values in f32,
/// as the goldens' weights hold them): exact in f32.
std::vector<float> fp8_values(const WeightSet& ws, const std::string& p) {
  const HostTensor& codes = ws.all().at(p + "weight");
  REQUIRE(codes.format == WeightFormat::kF32);
  std::vector<float> v = codes.to_f32();
  const std::vector<float> s = ws.all().at(p + "scale").to_f32();
  for (size_t i = 0; i < v.size(); ++i) v[i] = v[i] * s[i / 32];
  return v;
}

/// `ws` with each engram table given as a table of values: embed.weight = values(layer, prefix),
/// no embed.scale.
template <class Values>
WeightSet with_value_tables(const ModelConfig& c, const WeightSet& ws, Values&& values) {
  WeightSet out;
  for (const auto& kv : ws.all())
    if (kv.first.find("engram.embed.") == std::string::npos) out.put(kv.first, kv.second);
  for (int l : c.engram_layer_ids) out.put(table_prefix(l) + "weight", values(l, table_prefix(l)));
  return out;
}

}  // namespace

TEST_CASE("gguf engram: a table of values runs with the bits of the fp8 table it equals") {
  const Tiny& t = tiny_model(false);
  Model<HB> fp8(t.config, t.weights);
  const Run want = run(fp8);
  for (const bool bf16 : {false, true}) {
    CAPTURE(bf16);
    // e4m3 values times powers of two are bf16 numbers: either storage holds them exactly
    const WeightSet vs = with_value_tables(t.config, t.weights, [&](int, const std::string& p) {
      const std::vector<float> v = fp8_values(t.weights, p);
      const std::vector<long> shape = t.weights.all().at(p + "weight").shape;
      return bf16 ? HostTensor::from_bf16_values(shape, v) : HostTensor::from_f32(shape, v);
    });
    REQUIRE(!vs.has(table_prefix(t.config.engram_layer_ids[0]) + "scale"));
    Model<HB> values(t.config, vs);
    CHECK(compare(want, run(values), bf16 ? "bf16 values" : "f32 values") > 100);
  }
}

TEST_CASE("gguf engram: tables in every block type, F16, BF16 and F32 run with the bits of their ggml values, "
          "resident and row-read") {
  struct Case {
    TensorType type;
    bool rows256;
  };
  const Case cases[] = {{TensorType::kQ8_0, false}, {TensorType::kQ8_0, true},    {TensorType::kQ2_K, true},
                        {TensorType::kQ3_K, true},  {TensorType::kQ4_K, true},    {TensorType::kQ5_K, true},
                        {TensorType::kQ6_K, true},  {TensorType::kIQ2_XXS, true}, {TensorType::kMXFP4, false},
                        {TensorType::kF16, false},  {TensorType::kBF16, false},   {TensorType::kF32, false},
                        {TensorType::kQ4_0, false}, {TensorType::kQ4_1, false},   {TensorType::kQ5_0, false},
                        {TensorType::kQ5_1, false}, {TensorType::kIQ4_NL, false}, {TensorType::kIQ2_XS, true},
                        {TensorType::kIQ2_S, true}, {TensorType::kIQ3_XXS, true}, {TensorType::kIQ3_S, true},
                        {TensorType::kIQ1_S, true}, {TensorType::kIQ1_M, true},   {TensorType::kIQ4_XS, true},
                        {TensorType::kTQ1_0, true}, {TensorType::kTQ2_0, true},   {TensorType::kNVFP4, true},
                        {TensorType::kQ1_0, true},  {TensorType::kQ2_0, true}};
  const std::set<std::string> only = only_types();
  std::set<std::string> ran;
  for (const Case& k : cases) {
    const std::string tn = tensor_type_name(k.type);
    if (!only.empty() && only.count(tn) == 0) continue;
    ran.insert(tn);
    const Tiny& t = tiny_model(k.rows256);
    CAPTURE(tn);
    CAPTURE(t.config.engram_head_dim);
    TempDir dir;
    WriteOptions opt;
    opt.engram_type = k.type;
    // A float type holds the fp8 values exactly (e4m3 times a power of two; f16 where in range), so
    // its tables are written from other values, code · scale · 1.3 + 2^-9: a run on the fp8 tables
    // instead would differ
    const bool float_type = ggml_info(k.type)->block_elems == 1;
    auto other_values = [&](int, const std::string& p) {
      std::vector<float> v = fp8_values(t.weights, p);
      for (float& x : v) x = x * 1.3f + 0x1p-9f;
      return HostTensor::from_f32(t.weights.all().at(p + "weight").shape, v);
    };
    const WeightSet source = float_type ? with_value_tables(t.config, t.weights, other_values) : WeightSet{};
    const WriteResult wr = write_model(t.config, float_type ? source : t.weights, dir.file("m"), opt);
    CHECK(wr.kept.empty());
    CHECK(wr.converted == static_cast<long>(t.config.engram_layer_ids.size()));
    GgufWeights gw(wr.paths[0]);
    // the oracle: ggml's values of the file's blocks, dequantized block by block from its bytes
    // (the float types widened here: f16 by numeric.hpp's conversion, bf16 as the high half of an f32)
    bool differ = false;
    const WeightSet oracle = with_value_tables(t.config, t.weights, [&](int l, const std::string& p) {
      const TensorInfo* ti = gw.shards().find(engram_table(Dialect::kLlamaCpp, l));
      REQUIRE(ti);
      REQUIRE(ti->type == k.type);
      const std::vector<uint8_t> raw = gw.shards().read_tensor(*ti);
      const GgmlTypeInfo* info = ggml_info(k.type);
      std::vector<float> v(raw.size() / info->block_bytes * info->block_elems);
      for (size_t b = 0; b < raw.size() / info->block_bytes; ++b) {
        const uint8_t* at = raw.data() + b * info->block_bytes;
        const uint32_t half = static_cast<uint32_t>(at[0] | at[1] << 8);
        if (k.type == TensorType::kF32) std::memcpy(&v[b], at, 4);
        else if (k.type == TensorType::kF16) v[b] = f16_to_f32(static_cast<uint16_t>(half));
        else if (k.type == TensorType::kBF16) v[b] = bits_f32(half << 16);
        else
          REQUIRE(dequantize_ggml_block(static_cast<GgmlType>(k.type), at, v.data() + b * info->block_elems));
      }
      const std::vector<float> fp8 = fp8_values(t.weights, p);
      REQUIRE(v.size() == fp8.size());
      for (size_t i = 0; i < v.size(); ++i) differ = differ || f32_bits(v[i]) != f32_bits(fp8[i]);
      return HostTensor::from_f32(t.weights.all().at(p + "weight").shape, v);
    });
    CHECK(differ);  // the tables are not the fp8 ones: the runs below read the file's values
    const std::string p0 = table_prefix(t.config.engram_layer_ids[0]);
    CHECK(gw.has(p0 + "scale") == (k.type == TensorType::kMXFP4));  // a values table has no scales
    Model<HB> want_model(t.config, oracle);
    const Run want = run(want_model);
    Model<HB> resident(gw.config(), gw);
    CHECK(compare(want, run(resident), tn + " resident") > 100);
    Model<HB, ResidentExperts<HB>, RowReaderTable<HB>> rowread(gw.config(), gw);
    CHECK(compare(want, run(rowread), tn + " row-read") > 100);
  }
  CHECK_MESSAGE((only.empty() || ran.size() == only.size()), "DS41_TEST_GGUF_TYPES names a type not here");
}

TEST_CASE("gguf engram: non-finite rows, rows not whole blocks and a values table's scales are refused by name") {
  SUBCASE("a row with an infinite or NaN scale (an F16 table: value), resident and row-read") {
    const Tiny& t = tiny_model(true);
    const TensorType types[] = {TensorType::kQ4_K, TensorType::kQ8_0, TensorType::kF16};
    for (const TensorType type : types) {
      CAPTURE(tensor_type_name(type));
      TempDir dir;
      WriteOptions opt;
      opt.engram_type = type;
      std::string table, file;
      uint64_t at = 0;
      const int layer = t.config.engram_layer_ids[0];
      // an F16 table's block is one element: its value, not a scale, is the inf
      const long row = 3, block = type == TensorType::kQ8_0 ? 1 : type == TensorType::kF16 ? 5 : 0;
      const std::string first = write_model(t.config, t.weights, dir.file("m"), opt).paths[0];
      {
        GgufShards s(first);
        const TensorInfo* ti = s.find(engram_table(Dialect::kLlamaCpp, layer));
        REQUIRE(ti);
        table = ti->name;
        file = s.shard(ti->shard).path();
        const GgmlTypeInfo* info = ggml_info(type);
        at = ti->offset + row * engram_row_bytes(type, 256) + block * info->block_bytes;  // the block's f16 d
      }
      {
        std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
        REQUIRE(f.good());
        f.seekp(static_cast<std::streamoff>(at));
        const char d[2] = {0x00, type == TensorType::kQ8_0 ? static_cast<char>(0x7E) : static_cast<char>(0x7C)};
        f.write(d, 2);  // +NaN or +inf as f16
      }
      GgufWeights gw(first);
      const std::string named = tensor_type_name(type) + " engram row " + std::to_string(row) +
                                (type == TensorType::kF16 ? " element " : " block ") + std::to_string(block);
      const std::string e = error_of([&] { Model<HB> m(gw.config(), gw); });
      CHECK(e.find("tensor '" + table + "'") != std::string::npos);  // the tensor and the row
      CHECK(e.find(named) != std::string::npos);
      CHECK(e.find("non-finite") != std::string::npos);
      const std::shared_ptr<const RowSource> src =
          gw.row_source(engram_prefix(layer), t.config.engram_num_embeddings[0], 256);
      std::vector<float> v(256);
      CHECK(src->read_values(row - 1, 256, v.data()) == engram_row_bytes(type, 256));
      const std::string r = error_of([&] { src->read_values(row, 256, v.data()); });
      CHECK(r.find("tensor '" + table + "'") != std::string::npos);
      CHECK(r.find(named) != std::string::npos);
    }
  }
  SUBCASE("rows that are not whole blocks of the type") {
    std::vector<float> v(256);
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 9) - 4.0f;
    const std::vector<uint8_t> b = encode_values(v, TensorType::kQ4_K);
    const std::string e =
        error_of([&] { decode_tensor(TensorType::kQ4_K, {8, 32}, b.data(), b.size(), Part::kEngramCodes, "tensor 'e'"); });
    CHECK(e.find("tensor 'e': engram rows of 32 values are not whole Q4_K blocks of 256") != std::string::npos);
    // the writer keeps an fp8 table whose rows do not fit (listed), and cannot keep a values table
    const Tiny& t = tiny_model(false);
    TempDir dir;
    WriteOptions opt;
    opt.engram_type = TensorType::kQ4_K;
    opt.shards = 1;
    const WriteResult wr = write_model(t.config, t.weights, dir.file("k"), opt);
    REQUIRE(wr.kept.size() == t.config.engram_layer_ids.size());
    CHECK(wr.kept[0].find("engram_embd.weight: rows of 32 are not whole Q4_K blocks of 256, kept fp8 rows") !=
          std::string::npos);
    CHECK(GgufShards(wr.paths[0]).find(engram_table(Dialect::kLlamaCpp, t.config.engram_layer_ids[0]))->type ==
          TensorType::kI8);  // the fp8 rows as written by default: row264
    const WeightSet vs = with_value_tables(t.config, t.weights, [&](int, const std::string& p) {
      return HostTensor::from_f32(t.weights.all().at(p + "weight").shape, fp8_values(t.weights, p));
    });
    CHECK(error_of([&] { write_model(t.config, vs, dir.file("v"), opt); })
              .find("engram rows of 32 values are not whole Q4_K blocks of 256") != std::string::npos);
    opt.engram_type.reset();
    CHECK(error_of([&] { write_model(t.config, vs, dir.file("w"), opt); })
              .find("a table of values (no embed.scale)") != std::string::npos);
  }
  SUBCASE("a values table has no scales; a table without scales must be values") {
    const std::vector<uint8_t> b = encode_values(std::vector<float>(4 * 32, 1.0f), TensorType::kQ8_0);
    CHECK(error_of([&] { decode_tensor(TensorType::kQ8_0, {4, 32}, b.data(), b.size(), Part::kEngramScales, "tensor 'q'"); })
              .find("tensor 'q': a Q8_0 engram table holds values, not e4m3 codes and scales") != std::string::npos);
    WeightSet ws;
    HostTensor codes;
    codes.shape = {4, 32};
    codes.format = WeightFormat::kFp8Block32;
    codes.payload.assign(4 * 32, 0x38);
    ws.put("layers.1.engram.embed.weight", codes);
    CHECK(error_of([&] { ResidentTable<HB> r(ws, "layers.1.engram.", 4, 32); })
              .find("and no 'layers.1.engram.embed.scale': a table without scales is its values") != std::string::npos);
    // a table of values gives each looked-up row rounded to bf16, as the reference's lookup does
    std::vector<float> vals(4 * 32);
    for (size_t i = 0; i < vals.size(); ++i) vals[i] = 1.0f + static_cast<float>(i) / 1024.0f;  // most not bf16
    WeightSet vs;
    vs.put("layers.1.engram.embed.weight", HostTensor::from_f32({4, 32}, vals));
    ResidentTable<HB> table(vs, "layers.1.engram.", 4, 32);
    const int32_t ids[2] = {2, 0};
    std::vector<float> out(2 * 32);
    table.gather(ids, 2, out.data());
    for (int j = 0; j < 32; ++j) {
      CHECK(f32_bits(out[j]) == f32_bits(bf16_round(vals[2 * 32 + j])));
      CHECK(f32_bits(out[32 + j]) == f32_bits(bf16_round(vals[j])));
    }
    // and a checkpoint cannot hold it (its engram tables are e4m3 codes and scales)
    CHECK(error_of([&] { safetensors::encode_model(vs); }).find("is an engram table of values") != std::string::npos);
  }
}

}  // namespace test_gguf_engram
