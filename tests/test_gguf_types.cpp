// GGUF tensor types beyond F32/F16/BF16 (issue 39): a tiny model written with its experts and
// dense Linear weights in each of Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ2_XXS, MXFP4, F16 (engram
// tables as DS41_FP8_ROW or I8 row264) loads and runs, resident and with streamed experts, with
// the bits of the same model whose weights are the dequantized values of the file's blocks
// (core/ggml_quants.hpp: the oracle of the issue). Plus the type table's names and sizes, the
// writer's quantizers, and the errors for truncated tensors, unknown and unread types, and
// non-finite block scales. Engram tables in block types: test_gguf_engram.cpp (the same binary).
#include <doctest/doctest.h>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden_run.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "gguf_tiny_runs.hpp"
#include "temp_dir.hpp"

namespace test_gguf_types {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using namespace ds41::gguf;
using namespace gguf_test;
namespace fs = std::filesystem;

namespace {

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-gguf-types") {}
};
using testing::error_of;

/// The tiny golden's config with dim and moe_inter_dim 256 (every expert matrix, and the dense
/// weights whose rows are dim long, can be K-quants), and its weights by the golden's rules.
struct Wide {
  ModelConfig config;
  WeightSet weights;
};
const Wide& wide_tiny() {
  static const Wide w = [] {
    Wide out;
    out.config = tiny().config;
    out.config.dim = 256;
    out.config.moe_inter_dim = 256;
    out.config.validate();
    out.weights = rule_weights(out.config);
    return out;
  }();
  return w;
}

/// The values of a tensor's bytes as the oracle takes them: F16 and the block types through
/// core/ggml_quants.hpp, nothing else (nullopt: the tensor is kept as it is).
std::optional<std::vector<float>> oracle_values(TensorType type, const std::vector<uint8_t>& raw) {
  if (type == TensorType::kF16) {
    std::vector<float> v(raw.size() / 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = f16_to_f32(static_cast<uint16_t>(raw[2 * i] | raw[2 * i + 1] << 8));
    return v;
  }
  const GgmlTypeInfo* info = ggml_info(type);
  if (!info || !ggml_block_dequantizable(static_cast<GgmlType>(type))) return std::nullopt;
  std::vector<float> v(raw.size() / info->block_bytes * info->block_elems);
  bool ok = true;
  for (size_t b = 0; b < raw.size() / info->block_bytes; ++b)
    ok &= dequantize_ggml_block(static_cast<GgmlType>(type), raw.data() + b * info->block_bytes,
                                v.data() + b * info->block_elems);
  REQUIRE(ok);
  return v;
}

/// The weights of a written model with every tensor the file holds in F16 or a block type replaced
/// by its dequantized f32 values, read from the file's bytes (MXFP4: fp4 codes and scales of those
/// values; the engram tables, rows of codes and scales, stay as they are). Counts the tensors
/// replaced per type.
WeightSet oracle_weights(const WeightSet& ws, const GgufWeights& gw, std::map<std::string, int>& replaced) {
  WeightSet out;
  for (const auto& [name, t] : ws.all()) {
    auto [ref, ti] = gw.locate(name);
    if (ref.part == Part::kEngramCodes || ref.part == Part::kEngramScales) {
      out.put(name, t);
      continue;
    }
    uint64_t offset = ti->offset, bytes = ti->bytes;
    if (ref.part == Part::kExpertSlice) {
      bytes /= ti->dims[2];
      offset += bytes * ref.expert;
    }
    std::vector<uint8_t> raw(bytes);
    gw.shards().read(ti->shard, raw.data(), bytes, offset, "oracle");
    auto v = oracle_values(ti->type, raw);
    if (!v) {
      out.put(name, t);
      continue;
    }
    REQUIRE(static_cast<long>(v->size()) == t.numel());
    ++replaced[tensor_type_name(ti->type)];
    if (ti->type != TensorType::kMXFP4) {
      out.put(name, HostTensor::from_f32(t.shape, *v));
      continue;
    }
    // MXFP4 is kept as stored, as the release's fp4: the oracle is ds41's fp4 Linear (the
    // reference's linear(), input quantized to fp8) over ggml's values, codes and scales rebuilt
    // from them, not an f32 Linear (docs/GGUF.md)
    static const float mags[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    HostTensor f;
    f.shape = t.shape;
    f.format = WeightFormat::kFp4Block32;
    f.payload.assign(v->size() / 2, 0);
    bool ok = true;
    for (size_t b = 0; b < v->size() / 32; ++b) {
      const float scale = std::ldexp(1.0f, static_cast<int>(raw[b * 17]) - 127);
      f.scales.push_back(scale);
      for (size_t j = 0; j < 32; ++j) {
        const float x = (*v)[b * 32 + j] / scale;
        int code = -1;
        for (int m = 0; m < 8; ++m)
          if (std::fabs(x) == mags[m]) code = m | (x < 0 ? 8 : 0);
        ok &= code >= 0;
        const size_t k = b * 32 + j;
        f.payload[k / 2] |= static_cast<uint8_t>((k & 1) ? code << 4 : code);
      }
    }
    REQUIRE(ok);  // every value a code times its block's scale
    out.put(name, std::move(f));
  }
  return out;
}

}  // namespace

TEST_CASE("gguf types: names, ids and sizes come from ggml's table") {
  CHECK(tensor_type_name(TensorType::kQ2_K) == "Q2_K");
  CHECK(tensor_type_name(TensorType::kIQ2_XXS) == "IQ2_XXS");
  CHECK(tensor_type_name(TensorType::kMXFP4) == "MXFP4");
  CHECK(tensor_type_name(TensorType::kDs41Fp8Row) == "DS41_FP8_ROW");
  CHECK(tensor_type_name(static_cast<TensorType>(2)) == "Q4_0");
  CHECK(tensor_type_name(static_cast<TensorType>(77)) == "type 77");
  TensorType t{};
  CHECK((tensor_type_from_name("q4_K", &t) && t == TensorType::kQ4_K));
  CHECK((tensor_type_from_name("IQ2_XXS", &t) && t == TensorType::kIQ2_XXS));
  CHECK((tensor_type_from_name("bf16", &t) && t == TensorType::kBF16));
  CHECK(!tensor_type_from_name("q9_K", &t));
  CHECK(known_tensor_type(15));  // Q8_K, ggml's dot-product intermediate: a file may hold it; ds41 refuses to load it
  CHECK(!readable_tensor_type(static_cast<TensorType>(15)));
  CHECK(!readable_tensor_type(static_cast<TensorType>(9)));  // Q8_1 likewise
  // every block type ggml stores weights in is read
  for (uint32_t id : {2u, 3u, 6u, 7u, 8u, 10u, 11u, 12u, 13u, 14u, 16u, 17u, 18u, 19u, 20u, 21u, 22u, 23u, 29u, 34u, 35u, 39u,
                      40u, 41u, 42u})
    CHECK_MESSAGE(readable_tensor_type(static_cast<TensorType>(id)), "type ", id);
  CHECK(!known_tensor_type(77));
  const uint64_t per256[][2] = {{10, 84}, {11, 110}, {12, 144}, {13, 176}, {14, 210}, {16, 66}, {17, 74}, {18, 98},
                                {19, 50}, {21, 110}, {22, 82}, {23, 136}, {29, 56}, {34, 54}, {35, 66},
                                {40, 4 * 36}, {41, 2 * 18}, {42, 4 * 18}};  // NVFP4, Q2_0: 64 a block; Q1_0: 128
  for (const auto& [id, bytes] : per256)
    CHECK(tensor_bytes(static_cast<TensorType>(id), {512, 3}, "t") == 2 * 3 * bytes);
  CHECK(tensor_bytes(TensorType::kI8, {264, 5}, "t") == 264 * 5);
  CHECK(error_of([] { tensor_bytes(TensorType::kQ4_K, {64, 2}, "t"); }).find("multiple of 256") != std::string::npos);
}

TEST_CASE("gguf types: the writer's quantizers give valid blocks near their input") {
  std::vector<float> v(512);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
  v[5] = 0.0f;
  // the largest error allowed, as a fraction of the largest magnitude of the input (what these
  // simple quantizers give on this input, with a margin: not ggml's quality)
  const std::pair<TensorType, float> types[] = {
      {TensorType::kMXFP4, 0.17f}, {TensorType::kQ2_K, 0.34f}, {TensorType::kQ3_K, 0.25f},  {TensorType::kQ4_K, 0.07f},
      {TensorType::kQ5_K, 0.035f}, {TensorType::kQ6_K, 0.02f}, {TensorType::kIQ2_XXS, 0.5f}, {TensorType::kQ8_0, 0.005f},
      {TensorType::kQ4_0, 0.14f},  {TensorType::kQ4_1, 0.08f}, {TensorType::kQ5_0, 0.07f},   {TensorType::kQ5_1, 0.04f},
      {TensorType::kIQ2_XS, 0.45f}, {TensorType::kIQ2_S, 0.4f}, {TensorType::kIQ3_XXS, 0.34f}, {TensorType::kIQ3_S, 0.26f},
      {TensorType::kIQ1_S, 0.65f}, {TensorType::kIQ1_M, 0.7f}, {TensorType::kIQ4_NL, 0.12f},  {TensorType::kIQ4_XS, 0.12f},
      {TensorType::kTQ1_0, 0.55f}, {TensorType::kTQ2_0, 0.55f}, {TensorType::kNVFP4, 0.21f}, {TensorType::kQ1_0, 0.77f},
      {TensorType::kQ2_0, 0.6f}};
  float amax = 0;
  for (float x : v) amax = std::max(amax, std::fabs(x));
  for (const auto& entry : types) {
    const TensorType type = entry.first;  // not a structured binding: Clang 14 cannot capture one (CAPTURE's lambda)
    const float tol = entry.second;
    CAPTURE(tensor_type_name(type));
    const std::vector<uint8_t> b = encode_values(v, type);
    REQUIRE(b.size() == tensor_bytes(type, {512}, "v"));
    const HostTensor t = decode_tensor(type, {2, 256}, b.data(), b.size(), Part::kWhole, "v");
    const std::vector<float> back = t.to_f32();
    float err = 0;
    for (size_t i = 0; i < v.size(); ++i) err = std::max(err, std::fabs(back[i] - v[i]));
    MESSAGE(tensor_type_name(type), ": largest error ", err / amax, " of the largest value");
    CHECK(err <= tol * amax);
  }
}

namespace {
/// The definition both of least_cost_point's searches (by halves, portable; by registers, AVX2)
/// must give: every point's sum of its two halves' costs (each half summed element by element
/// from 0), the least, the first of equals; index 0 and ∞ where no sum is below ∞, NaN sums never
/// the least.
template <auto Point, int Points, int N>
void check_grid_search(unsigned seed) {
  using namespace gguf::quant_detail;
  const GridTable& g = grid_table<Point, Points, N>();
  std::mt19937 rng(seed);
  const auto next = [&rng] { return static_cast<uint32_t>(rng()); };
  for (int trial = 0; trial < 400; ++trial) {
    float cost[N][16] = {};
    // costs on a coarse grid in a third of the trials (many equal sums: the tie rule), else wide;
    // some infinite or NaN in a fifth (a sum that is ∞ or NaN is not a least; in one trial all are)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < g.nvalues; ++k) {
        cost[j][k] = trial % 3 == 0 ? static_cast<float>(next() % 4) : static_cast<float>(next() % 100000) / 997.0f;
        if (trial % 5 == 1 && next() % 4 == 0) cost[j][k] = next() % 2 ? INFINITY : NAN;
        if (trial == 1) cost[j][k] = k % 2 ? INFINITY : NAN;
      }
    int want = 0;
    float want_err = INFINITY;
    for (int i = 0; i < Points; ++i) {
      float half[2] = {0, 0};
      for (int h = 0; h < 2; ++h)
        for (int j = 0; j < N / 2; ++j) {
          const int e = h * (N / 2) + j;
          const uint8_t v = static_cast<uint8_t>((static_cast<uint64_t>(Point(i)) >> (8 * e)) & 0xFF);
          int c = 0;
          while (g.values[c] != v) ++c;
          half[h] += cost[e][c];
        }
      const float sum = half[0] + half[1];
      if (sum < want_err) want_err = sum, want = i;
    }
    CAPTURE(trial);
    float err = -1;
    REQUIRE(least_cost_point_by_halves<Points, N>(g, cost, &err) == want);
    REQUIRE(f32_bits(err) == f32_bits(want_err));
#if defined(DS41_HOST_AVX2)
    err = -1;
    REQUIRE(least_cost_point_avx2<Points, N>(g, cost, &err) == want);
    REQUIRE(f32_bits(err) == f32_bits(want_err));
#endif
  }
}
}  // namespace

TEST_CASE("gguf types: the IQ writers' grid search finds the definition's point, the first of equals") {
  check_grid_search<iq1s_grid, 2048, 8>(1);
  check_grid_search<iq2xxs_grid, 256, 8>(2);
  check_grid_search<iq2xs_grid, 512, 8>(3);
  check_grid_search<iq2s_grid, 1024, 8>(4);
  check_grid_search<iq3xxs_grid, 256, 4>(5);
  check_grid_search<iq3s_grid, 512, 4>(6);
}

TEST_CASE("gguf types: a tiny model in each type runs with the bits of its dequantized weights, resident and streamed") {
  const Wide& wide = wide_tiny();
  using HB = HostBackend;
  struct Case {
    TensorType type;
    bool engram_i8;
  };
  const Case cases[] = {{TensorType::kQ2_K, true},  {TensorType::kQ3_K, false},   {TensorType::kQ4_K, true},
                        {TensorType::kQ5_K, false}, {TensorType::kQ6_K, true},    {TensorType::kIQ2_XXS, false},
                        {TensorType::kQ8_0, true},  {TensorType::kMXFP4, false}, {TensorType::kF16, true},
                        {TensorType::kQ4_0, false}, {TensorType::kQ4_1, true},   {TensorType::kQ5_0, false},
                        {TensorType::kQ5_1, true},  {TensorType::kIQ2_XS, false}, {TensorType::kIQ2_S, true},
                        {TensorType::kIQ3_XXS, false}, {TensorType::kIQ3_S, true}, {TensorType::kIQ1_S, false},
                        {TensorType::kIQ1_M, true}, {TensorType::kIQ4_NL, false}, {TensorType::kIQ4_XS, true},
                        {TensorType::kTQ1_0, false}, {TensorType::kTQ2_0, true}, {TensorType::kNVFP4, false},
                        {TensorType::kQ1_0, true},  {TensorType::kQ2_0, false}};
  const std::set<std::string> only = only_types();
  size_t ran = 0;
  for (const Case& k : cases) {
    const std::string tn = tensor_type_name(k.type);
    if (!only.empty() && only.count(tn) == 0) continue;
    ++ran;
    CAPTURE(tn);
    TempDir dir;
    WriteOptions opt;
    opt.experts = k.type;
    opt.dense = k.type;
    opt.engram_i8 = k.engram_i8;
    const WriteResult wr = write_model(wide.config, wide.weights, dir.file("m"), opt);
    // 18 expert tensors and the dense weights whose rows fit the blocks
    CHECK(wr.converted >= 18 + 1);
    GgufWeights gw(wr.paths[0]);
    for (int l = 0; l < wide.config.n_layers; ++l)
      for (int m = 1; m <= 3; ++m) CHECK(gw.shards().find(blk(l, expert_tensor(m)))->type == k.type);
    const int engram_layer = wide.config.engram_layer_ids.at(0);
    CHECK(gw.shards().find(blk(engram_layer, "engram_embd.weight"))->type ==
          (k.engram_i8 ? TensorType::kI8 : TensorType::kDs41Fp8Row));

    std::map<std::string, int> replaced;
    const WeightSet oracle = oracle_weights(wide.weights, gw, replaced);
    CHECK(replaced[tn] >= 18 * wide.config.n_routed_experts + 1);
    // kept as stored (all but MXFP4, which is the fp4 format): every matrix of the type, dense or
    // an expert, holds the file's bytes and no more, on the host and in the backend's Matrix
    if (k.type != TensorType::kMXFP4) {
      long kept = 0;
      for (const auto& [name, t] : wide.weights.all()) {
        const auto loc = gw.locate(name);
        if (loc.second->type != k.type || t.shape.size() != 2) continue;
        const uint64_t file_bytes =
            loc.first.part == Part::kExpertSlice ? loc.second->bytes / loc.second->dims[2] : loc.second->bytes;
        const HostTensor h = gw.load(name, t.shape);
        CHECK(h.format == WeightFormat::kGgmlBlocks);
        CHECK(h.payload.size() == file_bytes);
        const long stored_rows = (t.shape[0] + 7) / 8 * 8;  // host panels: the last one's missing rows as zeros
        CHECK(Matrix<HB>(h).payload.size() <= file_bytes / t.shape[0] * stored_rows);
        ++kept;
      }
      CHECK(kept >= 18 * wide.config.n_routed_experts + 1);
    }
    Model<HB> want_model(wide.config, oracle);
    const Run want = run(want_model);

    Model<HB> resident(gw.config(), gw);
    CHECK(compare(want, run(resident), tn + " resident") > 1000);

    StreamedExperts<HB>::Cache cache(gw, {.capacity_experts = 3});
    REQUIRE(cache.capacity() < wide.config.n_routed_experts);
    Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(gw.config(), gw, cache);
    CHECK(compare(want, run(streamed), tn + " streamed") > 1000);
    CHECK(cache.counters().bytes_read > 0);
  }
  CHECK_MESSAGE(ran == (only.empty() ? std::size(cases) : only.size()), "DS41_TEST_GGUF_TYPES names a type not here");
}

TEST_CASE("gguf types: streamed experts in block types are viewed in place, and a non-finite block is refused at read") {
  const Wide& wide = wide_tiny();
  TempDir dir;
  WriteOptions opt;
  opt.experts = TensorType::kQ4_K;
  const WriteResult wr = write_model(wide.config, wide.weights, dir.file("v"), opt);
  // (expert_source() makes a source each call: it is kept alive while its slices are read)
  const auto read_expert = [&](const GgufWeights& gw, int layer, int e, std::vector<std::vector<uint8_t>>& bytes) {
    const std::shared_ptr<const ExpertSource> src = gw.expert_source();
    const ExpertSliceMap::Expert& ex = src->slices().at(layer, e);
    bytes.assign(ex.parts.size(), {});
    for (size_t i = 0; i < ex.parts.size(); ++i) {
      bytes[i].resize(ex.parts[i].bytes);
      gw.shards().read(ex.parts[i].shard, bytes[i].data(), ex.parts[i].bytes, ex.parts[i].offset, "test");
    }
  };
  {
    GgufWeights gw(wr.paths[0]);
    std::vector<std::vector<uint8_t>> bytes;
    read_expert(gw, 0, 1, bytes);
    const uint8_t* parts[3] = {bytes[0].data(), bytes[1].data(), bytes[2].data()};
    std::array<MatrixView, 3> views;
    std::array<std::vector<float>, 3> scales;
    const std::shared_ptr<const ExpertSource> src = gw.expert_source();
    REQUIRE(src->views(0, 1, parts, views, scales));
    const std::array<HostTensor, 3> decoded = src->decode(0, 1, parts);
    for (int k = 0; k < 3; ++k) {
      CHECK(views[k].format == WeightFormat::kGgmlBlocks);
      CHECK(views[k].data == parts[k]);  // the staged bytes themselves
      CHECK(decoded[k].format == WeightFormat::kGgmlBlocks);
      CHECK(std::memcmp(decoded[k].payload.data(), parts[k], decoded[k].payload.size()) == 0);
    }
  }
  // expert 1 of layer 0's w1: its second block's d = +inf, in the file
  {
    GgufShards s(wr.paths[0]);
    const TensorInfo* t = s.find(blk(0, expert_tensor(1)));
    REQUIRE(t != nullptr);
    const uint64_t at = t->offset + t->bytes / t->dims[2] * 1 + 144 + 1;  // expert 1, block 1, d's high byte
    std::fstream f(s.shard(t->shard).path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(at));
    const char hi = 0x7C;
    f.write(&hi, 1);
    f.seekp(static_cast<std::streamoff>(at - 1));
    const char lo = 0x00;
    f.write(&lo, 1);
  }
  GgufWeights gw(wr.paths[0]);
  std::vector<std::vector<uint8_t>> bytes;
  read_expert(gw, 0, 1, bytes);
  const uint8_t* parts[3] = {bytes[0].data(), bytes[1].data(), bytes[2].data()};
  std::array<MatrixView, 3> views;
  std::array<std::vector<float>, 3> scales;
  const std::shared_ptr<const ExpertSource> src = gw.expert_source();
  const std::string e = error_of([&] { src->views(0, 1, parts, views, scales); });
  CHECK(e.find(wr.paths[0]) != std::string::npos);
  CHECK(e.find(blk(0, expert_tensor(1))) != std::string::npos);
  CHECK(e.find("expert 1 of layer 0: Q4_K block 1 has non-finite values") != std::string::npos);
  const std::string d = error_of([&] { src->decode(0, 1, parts); });
  CHECK(d.find("Q4_K block 1 has non-finite values") != std::string::npos);
}

TEST_CASE("gguf types: the writer keeps a tensor whose rows are not whole blocks, and says so") {
  const golden::Golden& g = tiny();  // dim 64: no K-quant row fits
  TempDir dir;
  WriteOptions opt;
  opt.experts = TensorType::kQ4_K;
  opt.dense = TensorType::kQ8_0;
  const WriteResult wr = write_model(g.config, golden::regenerate_weights(g), dir.file("t"), opt);
  CHECK(wr.converted > 0);  // Q8_0 dense weights (rows of 64 or 32)
  REQUIRE(!wr.kept.empty());
  CHECK(wr.kept[0].find("not whole Q4_K blocks of 256") != std::string::npos);
  GgufShards s(wr.paths[0]);
  CHECK(s.find("blk.0.ffn_gate_exps.weight")->type == TensorType::kBF16);
  CHECK(s.find("blk.0.attn_q_a.weight")->type == TensorType::kQ8_0);
  CHECK(s.find("blk.0.ffn_gate_inp.weight")->type != TensorType::kQ8_0);  // the router stays wide
}

TEST_CASE("gguf types: truncated tensors, unknown and unread types, non-finite scales are refused by name") {
  TempDir dir;
  std::vector<float> v(2 * 256);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 13) - 6.0f;

  SUBCASE("a Q2_K tensor cut short") {
    GgufWriter w;
    w.add_tensor("blk.0.ffn_gate_exps.weight", {2, 256}, TensorType::kQ2_K, encode_values(v, TensorType::kQ2_K));
    const std::string p = dir.file("cut.gguf");
    w.write_file(p);
    fs::resize_file(p, fs::file_size(p) - 100);
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("blk.0.ffn_gate_exps.weight") != std::string::npos);
    CHECK(e.find("offset past the file") != std::string::npos);
    // the bytes themselves one block short
    const std::vector<uint8_t> b = encode_values(v, TensorType::kQ2_K);
    const std::string d =
        error_of([&] { decode_tensor(TensorType::kQ2_K, {2, 256}, b.data(), 84, Part::kWhole, "tensor 'x'"); });
    CHECK(d.find("tensor 'x'") != std::string::npos);
    CHECK(d.find("84 bytes do not hold a Q2_K tensor of shape [2, 256]") != std::string::npos);
  }
  SUBCASE("an id ggml does not know") {
    GgufWriter w;
    w.add_tensor("a", {256}, TensorType::kF32, encode_values(std::vector<float>(256, 0.0f), TensorType::kF32));
    const std::string p = dir.file("id.gguf");
    w.write_file(p);
    std::vector<uint8_t> bytes;
    {
      std::ifstream in(p, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    // tensor info: name (8 + 1 bytes), n_dims u32, dims u64, type u32 at the end of the header's 24 bytes
    const size_t at = 24 + 8 + 1 + 4 + 8;
    uint32_t type;
    std::memcpy(&type, &bytes[at], 4);
    REQUIRE(type == 0);
    type = 99;
    std::memcpy(&bytes[at], &type, 4);
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("tensor 'a' has unknown or unsupported type 99") != std::string::npos);
  }
  SUBCASE("a type ggml knows and ds41 does not read") {
    std::vector<uint8_t> q8_k(2 * 292, 0);  // Q8_K: 256 values in 292 bytes
    const std::string e =
        error_of([&] { decode_tensor(static_cast<TensorType>(15), {2, 256}, q8_k.data(), q8_k.size(), Part::kWhole, "tensor 'q'"); });
    CHECK(e.find("tensor 'q' has type Q8_K, which ds41 does not read") != std::string::npos);
    CHECK(e.find("Q4_0, Q4_1") != std::string::npos);  // the message lists what it reads
  }
  SUBCASE("a block with an infinite scale") {
    std::vector<uint8_t> b = encode_values(v, TensorType::kQ4_K);
    b[144] = 0x00, b[145] = 0x7C;  // the second block's d = +inf
    const std::string e =
        error_of([&] { decode_tensor(TensorType::kQ4_K, {2, 256}, b.data(), b.size(), Part::kWhole, "tensor 'k'"); });
    CHECK(e.find("tensor 'k': Q4_K block 1") != std::string::npos);
    CHECK(e.find("non-finite") != std::string::npos);
  }
  SUBCASE("an engram table of a type that is neither rows of codes and scales nor a type of values ds41 reads") {
    const std::vector<uint8_t> b(2 * 292, 0);  // two Q8_K blocks of 256, a type ds41 does not read
    const std::string e = error_of(
        [&] { decode_tensor(static_cast<TensorType>(15), {2, 256}, b.data(), b.size(), Part::kEngramCodes, "tensor 'e'"); });
    CHECK(e.find("tensor 'e': engram table has type Q8_K, expected DS41_FP8_ROW") != std::string::npos);
  }
}

TEST_CASE("gguf types: MXFP4 engram rows (mxxm-t's tables) read with exactly ggml's values") {
  SUBCASE("every code in both nibbles, scales from 0 to 254: the fp8 row's values are ggml's") {
    const long K = 64, rows = 7;
    const uint8_t es[rows] = {0, 1, 2, 100, 127, 200, 254};
    std::vector<uint8_t> raw;
    for (long r = 0; r < rows; ++r)
      for (long b = 0; b < K / 32; ++b) {
        raw.push_back(es[r]);
        for (int j = 0; j < 16; ++j) raw.push_back(static_cast<uint8_t>(((j + b) & 15) | (((15 - j + r) & 15) << 4)));
      }
    const std::vector<uint8_t> fp8 = mxfp4_engram_rows(raw.data(), rows, K, "t");
    REQUIRE(fp8.size() == static_cast<size_t>(rows * (K + K / 32)));
    int checked = 0;
    for (long r = 0; r < rows; ++r)
      for (long b = 0; b < K / 32; ++b) {
        float want[32];
        REQUIRE(dequantize_ggml_block(GgmlType::kMXFP4, raw.data() + (r * K / 32 + b) * 17, want));
        for (int j = 0; j < 32; ++j) {
          const uint8_t code = fp8[static_cast<size_t>(r * (K + K / 32) + b * 32 + j)];
          const uint8_t e = fp8[static_cast<size_t>(r * (K + K / 32) + K + b)];
          const float got = e4m3_decode(code) * e8m0_to_f32(e);
          CHECK_MESSAGE(f32_bits(got) == f32_bits(want[j]), "row ", r, " block ", b, " element ", j);
          ++checked;
        }
      }
    CHECK(checked == rows * K);
    raw[0] = 0xFF;
    CHECK(error_of([&] { mxfp4_engram_rows(raw.data(), rows, K, "tensor 'x'"); })
              .find("tensor 'x': MXFP4 engram row 0 block 0 has the scale byte 0xFF") != std::string::npos);
  }

  SUBCASE("the tiny model with MXFP4 engram tables, resident and row-read, has the bits of their fp8 rows") {
    const golden::Golden& g = tiny();
    const WeightSet ws = golden::regenerate_weights(g);
    TempDir dir;
    WriteOptions opt;
    opt.dialect = Dialect::kMxxm;  // engram_embed: DS41_FP8_ROW as written, MXFP4 as published
    opt.engram_i8 = false;         // (the rows' dims then the table's [K, rows], as MXFP4's)
    opt.shards = 1;
    const std::string first = write_model(g.config, ws, dir.file("m"), opt).paths[0];
    // the same file with each engram table as MXFP4 blocks of its values (ds41's quantizer)
    GgufFile f(first);
    GgufShards s0(first);
    GgufWriter w;
    for (const std::string& key : f.keys())
      if (key.rfind("split.", 0) != 0 && key != "general.alignment") w.set(key, *f.find(key));
    WeightSet oracle;
    for (const auto& kv : ws.all()) oracle.put(kv.first, kv.second);
    for (const TensorInfo& t : f.tensors()) {
      std::vector<uint8_t> b = s0.read_tensor(*s0.find(t.name));
      if (t.name.find("engram_embed") == std::string::npos) {
        w.add_tensor(t.name, t.shape(), t.type, std::move(b));
        continue;
      }
      const long rows = t.shape()[0], K = t.shape()[1];
      const HostTensor codes = decode_tensor(t.type, {rows, K}, b.data(), b.size(), Part::kEngramCodes, t.name);
      const HostTensor sc = decode_tensor(t.type, {rows, K}, b.data(), b.size(), Part::kEngramScales, t.name);
      const std::vector<float> scales = sc.to_f32();
      std::vector<float> v(static_cast<size_t>(rows * K));
      for (long i = 0; i < rows * K; ++i) v[i] = e4m3_decode(codes.payload[i]) * scales[i / 32];
      std::vector<uint8_t> mx = encode_values(v, TensorType::kMXFP4);
      // the oracle: ggml's values of those blocks as rows of e4m3 codes and e8m0 scales
      HostTensor oc = codes;
      std::vector<float> os(static_cast<size_t>(rows * K / 32));
      for (long blk = 0; blk < rows * K / 32; ++blk) {
        float vals[32];
        REQUIRE(dequantize_ggml_block(GgmlType::kMXFP4, mx.data() + blk * 17, vals));
        os[blk] = e8m0_to_f32(mx[blk * 17]);
        for (int j = 0; j < 32; ++j) {
          oc.payload[blk * 32 + j] = e4m3_encode(vals[j] / os[blk]);
          REQUIRE(e4m3_decode(oc.payload[blk * 32 + j]) * os[blk] == vals[j]);
        }
      }
      const std::string layer = "layers." + t.name.substr(4, t.name.find('.', 4) - 4) + ".engram.embed.";
      oracle.put(layer + "weight", oc);
      oracle.put(layer + "scale", HostTensor::from_f32({rows, K / 32}, os));
      w.add_tensor(t.name, {rows, K}, TensorType::kMXFP4, std::move(mx));
    }
    const std::string p = dir.file("mx.gguf");
    w.write_file(p);
    GgufWeights gw(p);
    REQUIRE(gw.shards().find(engram_table(Dialect::kMxxm, g.config.engram_layer_ids[0]))->type == TensorType::kMXFP4);
    using HB = HostBackend;
    Model<HB> want_model(g.config, oracle);
    const Run want = run(want_model);
    Model<HB> resident(gw.config(), gw);
    CHECK(compare(want, run(resident), "mxfp4 engram resident") > 100);
    StreamedExperts<HB>::Cache cache(gw, {.capacity_experts = 3});
    Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(gw.config(), gw, cache);
    CHECK(compare(want, run(streamed), "mxfp4 engram row-read") > 100);
  }
}

}  // namespace test_gguf_types
