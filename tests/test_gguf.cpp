// GGUF: round trips of every metadata and tensor type, the tiny golden from 2 shards with streamed
// experts (cache smaller than one layer) and row-read engram tables, cache counters on a
// multi-step decode, and one test per malformed-file fault.
#include <doctest/doctest.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden_run.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "temp_dir.hpp"

namespace test_gguf {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using namespace ds41::gguf;
namespace fs = std::filesystem;

namespace {

/// A temporary directory of this test binary (tests/temp_dir.hpp).
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-gguf") {}
};
using testing::error_of;

const golden::Golden& tiny() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  return g;
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}
std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// Hand-built GGUF bytes for faults the writer refuses to produce.
struct Bytes {
  std::vector<uint8_t> b;
  template <class T>
  Bytes& pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof v);
    return *this;
  }
  Bytes& str(const std::string& s) {
    pod<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
};

}  // namespace

TEST_CASE("gguf: every metadata type and tensor type round-trips") {
  TempDir dir;
  GgufWriter w(64);
  w.set("t.u8", Value::scalar(ValueType::kU8, 200));
  w.set("t.i8", Value::scalar(ValueType::kI8, static_cast<uint8_t>(-5)));
  w.set("t.u16", Value::scalar(ValueType::kU16, 60000));
  w.set("t.i16", Value::scalar(ValueType::kI16, static_cast<uint16_t>(-300)));
  w.set("t.u32", Value::u32(4000000000u));
  w.set("t.i32", Value::i32(-2000000000));
  w.set("t.f32", Value::f32(0.1f));
  w.set("t.bool", Value::boolean(true));
  w.set("t.str", Value::string("deepseek41 ✓"));
  w.set("t.u64", Value::u64(0xFEDCBA9876543210ull));  // above 2^63 and 2^53: must not pass a double
  w.set("t.i64", Value::i64(-9007199254740993LL));    // 2^53 + 1: not a double
  w.set("t.f64", Value::f64(1e-20));
  w.set("t.strs", Value::array(ValueType::kString, {Value::string("a"), Value::string(""), Value::string("ccc")}));
  w.set("t.nested", Value::array(ValueType::kArray, {Value::int_array(ValueType::kI32, std::vector<int>{1, 2}),
                                                     Value::int_array(ValueType::kI32, std::vector<int>{-3})}));
  w.set("t.mults", Value::array(ValueType::kU64, {Value::u64(6150102932744347341ull), Value::u64(1)}));

  const std::vector<long> shape{4, 64};
  std::vector<float> v(256);
  for (int i = 0; i < 256; ++i) v[i] = static_cast<float>((i * 37) % 23 - 11) * 0.25f;
  w.add_tensor("f32", shape, TensorType::kF32, encode_values(v, TensorType::kF32));
  w.add_tensor("f16", shape, TensorType::kF16, encode_values(v, TensorType::kF16));
  w.add_tensor("bf16", shape, TensorType::kBF16, encode_values(v, TensorType::kBF16));
  w.add_tensor("q8_0", shape, TensorType::kQ8_0, encode_values(v, TensorType::kQ8_0));
  HostTensor fp4;  // e2m1 codes with power-of-two block scales
  fp4.shape = shape;
  fp4.format = WeightFormat::kFp4Block32;
  fp4.payload.resize(128);
  for (int i = 0; i < 128; ++i) fp4.payload[i] = static_cast<uint8_t>((i * 7 + 3) & 0xFF);
  for (int b = 0; b < 8; ++b) fp4.scales.push_back(std::ldexp(1.0f, b - 4));
  auto [t4, b4] = encode_tensor(fp4, "fp4");
  CHECK(t4 == TensorType::kMXFP4);
  w.add_tensor("mxfp4", shape, t4, b4);
  HostTensor fp8;
  fp8.shape = {40, 64};
  fp8.format = WeightFormat::kFp8Block32;
  for (int i = 0; i < 40 * 64; ++i) fp8.payload.push_back(static_cast<uint8_t>(i * 13 % 0x7E));
  fp8.scales = {0.5f, 0.25f, 3.0f, 0.125f};  // [ceil(40/32), 64/32]
  auto [t8, b8] = encode_tensor(fp8, "fp8");
  w.add_tensor("fp8", fp8.shape, t8, b8);
  HostTensor codes = HostTensor::from_f32({3, 64}, std::vector<float>(192, 1.5f));
  HostTensor scales = HostTensor::from_f32({3, 2}, {1.0f, 2.0f, 0.5f, 0.25f, 4.0f, 1.0f});
  w.add_tensor("rows", {3, 64}, TensorType::kDs41Fp8Row, encode_engram_rows(codes, scales, "rows"));
  const std::string path = dir.file("all.gguf");
  w.write_file(path);

  GgufFile f(path);
  CHECK(f.version() == 3);
  CHECK(f.alignment() == 64);
  CHECK(f.find("t.u8")->bits == 200);
  CHECK(f.find("t.i8")->as_i64() == -5);
  CHECK(f.find("t.u16")->bits == 60000);
  CHECK(f.find("t.i16")->as_i64() == -300);
  CHECK(f.find("t.u32")->bits == 4000000000u);
  CHECK(f.find("t.i32")->as_i64() == -2000000000);
  CHECK(static_cast<float>(f.find("t.f32")->as_f64()) == 0.1f);
  CHECK(f.find("t.f32")->type == ValueType::kF32);
  CHECK(f.find("t.bool")->bits == 1);
  CHECK(f.find("t.str")->str == "deepseek41 ✓");
  CHECK(f.find("t.u64")->bits == 0xFEDCBA9876543210ull);
  CHECK(f.find("t.i64")->as_i64() == -9007199254740993LL);
  CHECK(f.find("t.f64")->as_f64() == 1e-20);
  REQUIRE(f.find("t.strs")->arr.size() == 3);
  CHECK(f.find("t.strs")->arr[2].str == "ccc");
  const Value& nested = *f.find("t.nested");
  REQUIRE(nested.arr.size() == 2);
  CHECK(nested.arr[0].arr[1].as_i64() == 2);
  CHECK(nested.arr[1].arr[0].as_i64() == -3);
  MetaReader m(f);
  CHECK(m.ints("t.mults") == std::vector<int64_t>{6150102932744347341LL, 1});
  CHECK(error_of([&] { m.ints("t.u64"); }).find("expected an array") != std::string::npos);

  GgufShards s(path);
  auto load = [&](const char* name) {
    const TensorInfo* t = s.find(name);
    REQUIRE(t);
    CHECK(t->offset % 64 == 0);
    auto raw = s.read_tensor(*t);
    return decode_tensor(t->type, t->shape(), raw.data(), raw.size(), Part::kWhole, name);
  };
  CHECK(load("f32").to_f32() == v);  // these values are exact in every type below
  CHECK(load("f16").to_f32() == v);
  CHECK(load("bf16").format == WeightFormat::kBF16);
  CHECK(load("bf16").to_f32() == v);
  const std::vector<float> q8 = load("q8_0").to_f32();  // quantised: within half a step (amax/127)
  for (size_t i = 0; i < v.size(); ++i) CHECK(std::fabs(q8[i] - v[i]) <= 2.75f / 127.0f * 0.51f);
  HostTensor back4 = load("mxfp4");
  CHECK(back4.format == WeightFormat::kFp4Block32);
  CHECK(back4.payload == fp4.payload);
  CHECK(back4.scales == fp4.scales);
  HostTensor back8 = load("fp8");
  CHECK(back8.payload == fp8.payload);
  CHECK(back8.scales == fp8.scales);
  const TensorInfo* rt = s.find("rows");
  auto raw = s.read_tensor(*rt);
  HostTensor rc = decode_tensor(rt->type, rt->shape(), raw.data(), raw.size(), Part::kEngramCodes, "rows");
  HostTensor rs = decode_tensor(rt->type, rt->shape(), raw.data(), raw.size(), Part::kEngramScales, "rows");
  CHECK(rc.payload == std::vector<uint8_t>(192, e4m3_encode(1.5f)));
  CHECK(rs.to_f32() == scales.to_f32());
}

namespace {

/// Every capture of every step of the tiny golden's run on `model`, in order.
template <class ModelT>
std::vector<golden::CollectSink> captures(ModelT& model) {
  std::vector<golden::CollectSink> out;
  const golden::Golden& g = tiny();
  for (const golden::Step& st : g.steps) {
    out.emplace_back();
    if (st.index == 0) model.prefill(st.tokens, &out.back());
    else model.decode(st.tokens.at(0), &out.back());
  }
  model.release();
  return out;
}

struct RunCounts {
  int passed = 0, failed = 0, exact = 0;
};
template <class ModelT>
RunCounts run_golden(ModelT& model) {
  RunCounts c;
  for (const auto& rep : golden::run(tiny(), model))
    for (const auto& r : rep.results) {
      (r.pass ? c.passed : c.failed)++;
      c.exact += r.exact;
    }
  return c;
}

}  // namespace

TEST_CASE("gguf: the tiny golden from 2 shards, streamed experts (3 of 8) and row-read engram, is bit-identical") {
  TempDir dir;
  const golden::Golden& g = tiny();
  const WeightSet ws = golden::regenerate_weights(g);
  const auto paths = write_model(g.config, ws, dir.file("tiny"), 2);
  REQUIRE(paths.size() == 2);
  for (const auto& p : paths) CHECK(fs::exists(p));

  Model<HostBackend> resident(g.config, ws);
  const auto want = captures(resident);

  GgufWeights w(paths[0]);
  CHECK(w.shards().shard_count() == 2);
  CHECK(w.config().engram.multipliers == g.config.engram.multipliers);
  CHECK(w.config().engram_num_embeddings == g.config.engram_num_embeddings);
  using HB = HostBackend;
  StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 3});
  REQUIRE(cache.capacity() < g.config.n_routed_experts);
  Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(w.config(), w, cache);
  const auto got = captures(streamed);
  REQUIRE(got.size() == want.size());
  long compared = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    REQUIRE(got[s].order == want[s].order);
    for (const std::string& name : want[s].order) {
      const auto& a = want[s].items.at(name);
      const auto& b = got[s].items.at(name);
      CHECK_MESSAGE(a.shape == b.shape, name);
      CHECK_MESSAGE(a.i32 == b.i32, name);
      CHECK_MESSAGE(a.f32.size() == b.f32.size(), name);
      // bitwise (memcmp, not ==): -0 and NaN patterns count; empty vectors may hold null pointers
      CHECK_MESSAGE((a.f32.empty() || std::memcmp(a.f32.data(), b.f32.data(), a.f32.size() * 4) == 0), "step ", s,
                    " ", name);
      ++compared;
    }
  }
  CHECK(compared > 1000);
  const RunCounts c = run_golden(streamed);
  CHECK(c.failed == 0);
  CHECK(c.passed == 1006);
  CHECK(c.exact == 1006);
  const ExpertCounters k = cache.counters();
  // experts were read when asked for: a miss, or (MoeT queues a layer's experts once it is
  // routed) a prefetch hit
  CHECK(k.misses + k.prefetch_hits > 0);
  CHECK(k.prefetch_hits > 0);
  CHECK(k.bytes_read > 0);
}

TEST_CASE("gguf: expert cache counters show hits, misses and prefetch hits on a multi-step decode") {
  TempDir dir;
  const golden::Golden& g = tiny();
  const auto paths = write_model(g.config, golden::regenerate_weights(g), dir.file("tiny"), 3);
  GgufWeights w(paths[0]);
  using HB = HostBackend;
  // room for two layers' worth of experts: a decode step's 6 layers x 2 experts partly stay resident
  StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 16});
  Model<HB, StreamedExperts<HB>> model(w.config(), w, cache);
  StepResult r = model.prefill(g.prompt_tokens);
  cache.reset_counters();
  for (int i = 0; i < 8; ++i) r = model.decode(g.decode_tokens.at(i % g.decode_tokens.size()));
  const ExpertCounters k = cache.counters();
  MESSAGE("decode x8: hits ", k.hits, ", misses ", k.misses, ", prefetch hits ", k.prefetch_hits, " (rate ",
          k.prefetch_hit_rate(), "), issued ", k.prefetch_issued, ", dropped ", k.prefetch_dropped, ", bytes ",
          k.bytes_read);
  CHECK(k.hits > 0);
  CHECK(k.misses > 0);
  CHECK(k.prefetch_hits > 0);
  CHECK(k.bytes_read > 0);
}

TEST_CASE("gguf: malformed files raise errors naming the file and the fault") {
  TempDir dir;
  // a small valid file to corrupt
  GgufWriter w;
  w.set("general.architecture", Value::string("deepseek41"));
  w.set("deepseek41.block_count", Value::string("six"));  // wrong type on purpose
  w.add_tensor("blk.0.attn_norm.weight", {64}, TensorType::kF32, encode_values(std::vector<float>(64, 1.0f), TensorType::kF32));
  const std::string good = dir.file("good.gguf");
  w.write_file(good);
  const std::vector<uint8_t> bytes = read_bytes(good);

  SUBCASE("truncated header") {
    const std::string p = dir.file("trunc.gguf");
    write_bytes(p, {bytes.begin(), bytes.begin() + 30});
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("truncated header") != std::string::npos);
  }
  SUBCASE("big-endian file") {
    // gguf-py's big-endian writer: the magic as bytes, every number swapped (version 3 as 0x03000000)
    const std::string p = dir.file("be.gguf");
    Bytes b;
    b.pod<uint32_t>(kMagic).pod<uint32_t>(0x03000000u).pod<uint64_t>(0).pod<uint64_t>(0);
    write_bytes(p, b.b);
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("a big-endian GGUF (version 3 with its bytes swapped)") != std::string::npos);
    // any other version is still reported as the number it reads as
    Bytes v9;
    v9.pod<uint32_t>(kMagic).pod<uint32_t>(9).pod<uint64_t>(0).pod<uint64_t>(0);
    write_bytes(p, v9.b);
    CHECK(error_of([&] { GgufFile f(p); }).find("unsupported GGUF version 9") != std::string::npos);
  }
  SUBCASE("metadata length past the end") {
    const std::string p = dir.file("len.gguf");
    Bytes b;
    b.pod<uint32_t>(kMagic).pod<uint32_t>(3).pod<uint64_t>(0).pod<uint64_t>(1);
    b.pod<uint64_t>(1ull << 40);  // key length far past the end
    b.b.resize(b.b.size() + 64, 'k');
    write_bytes(p, b.b);
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("metadata length past the end") != std::string::npos);
  }
  SUBCASE("tensor offset past the file") {
    const std::string p = dir.file("short.gguf");
    write_bytes(p, {bytes.begin(), bytes.end() - 64});  // cut into the tensor data
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("offset past the file") != std::string::npos);
    CHECK(e.find("blk.0.attn_norm.weight") != std::string::npos);
  }
  SUBCASE("unknown tensor type") {
    const std::string p = dir.file("type.gguf");
    Bytes b;
    b.pod<uint32_t>(kMagic).pod<uint32_t>(3).pod<uint64_t>(1).pod<uint64_t>(0);
    b.str("x").pod<uint32_t>(1).pod<uint64_t>(32).pod<uint32_t>(77).pod<uint64_t>(0);
    b.b.resize(256, 0);
    write_bytes(p, b.b);
    const std::string e = error_of([&] { GgufFile f(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("unknown or unsupported type 77") != std::string::npos);
  }
  SUBCASE("wrong metadata type") {
    GgufShards s(good);
    const std::string e = error_of([&] { MetaReader(s.meta()).integer("deepseek41.block_count"); });
    CHECK(e.find(good) != std::string::npos);
    CHECK(e.find("'deepseek41.block_count' has type string, expected an integer") != std::string::npos);
  }
  SUBCASE("missing key") {
    GgufShards s(good);
    const std::string e = error_of([&] { read_config(s); });
    CHECK(e.find(good) != std::string::npos);
    CHECK(e.find("missing key 'deepseek41.context_length'") != std::string::npos);
  }
  SUBCASE("shard missing") {
    const auto paths = w.write_shards(dir.file("split"), 1);
    GgufWriter w3;
    for (int i = 0; i < 3; ++i)
      w3.add_tensor("t" + std::to_string(i), {32}, TensorType::kF32, encode_values(std::vector<float>(32, 0.0f), TensorType::kF32));
    const auto p3 = w3.write_shards(dir.file("three"), 3);
    CHECK_NOTHROW(GgufShards{p3[0]});
    CHECK(GgufShards(p3[0]).tensors().size() == 3);
    fs::remove(p3[1]);
    const std::string e = error_of([&] { GgufShards s(p3[0]); });
    CHECK(e.find(p3[0]) != std::string::npos);
    CHECK(e.find("shard missing: " + p3[1]) != std::string::npos);
    CHECK(paths.size() == 1);
  }
  SUBCASE("a failing write leaves no file behind") {
    GgufWriter bad;
    bad.add_tensor("a", {32}, TensorType::kF32, encode_values(std::vector<float>(32, 0.0f), TensorType::kF32));
    CHECK_THROWS(bad.write_shards(dir.file("no/such/dir/x"), 1));
    CHECK(!fs::exists(dir.file("no")));
  }
}

}  // namespace test_gguf
