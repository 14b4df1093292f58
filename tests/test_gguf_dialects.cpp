// GGUF dialects (issue 39 item 5): the three published metadata and tensor-name dialects —
// llama.cpp's deepseek41 (vcruz305's files), antirez's ds4 and mxxm-t's — recognised from the
// metadata. For each: a header-only replica of a published file's header (tensor names, types and
// ggml dims as the public converter / loader writes them, at tiny sizes) maps every tensor; the
// tiny golden written in the dialect loads, detects and runs bit-identical to the golden; and the
// errors for an unknown architecture, no fitting dialect and a missing key.
#include <doctest/doctest.h>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden_run.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "temp_dir.hpp"

namespace test_gguf_dialects {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using namespace ds41::gguf;

namespace {

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-gguf-dialects") {}
};
using testing::error_of;

const golden::Golden& tiny() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  return g;
}

/// One tensor of a replica header: GGUF name, ggml dims (innermost first, as the header lists
/// them) and type; the data are zeros.
struct Spec {
  std::string name;
  std::vector<long> dims;
  TensorType type;
};
void add(GgufWriter& w, const Spec& t) {
  std::vector<long> shape(t.dims.rbegin(), t.dims.rend());
  std::vector<uint64_t> d(t.dims.begin(), t.dims.end());
  w.add_tensor(t.name, shape, t.type, std::vector<uint8_t>(tensor_bytes(t.type, d, t.name), 0));
}

// Tiny sizes with the published structure: 4 layers, kv sources {2, 3} (ratio 2 at layer 2, 1 at
// layer 3: only layer 2 has a compressor gate), index sources {2, 3}, engram layer 1; dims are
// multiples of 256 where the published type is a K-quant or IQ2_XXS.
constexpr long D = 256, I = 256, E = 4, HD = 64, Q = 64, HC = 2, IDX = 32, IH = 2, H = 2, OG = 2, OR = 32, V = 64;
constexpr long HCM = (2 + HC) * HC, ROWS = 96;
const std::vector<int> kKvSources = {2, 3}, kIndexSources = {2, 3};

/// The tensors of one published file at the tiny sizes. ds4: antirez/ds4
/// gguf-tools/deepseek41_quantize.py build_plan (q2 recipe). mxxm: mxxm-t/mx-llama.cpp
/// src/models/deepseek41.cpp load_arch_tensors, types from the census of mxxm-t's header.
/// llama.cpp: vcruz305's Q2_K file (Q2_K/Q3_K experts, exp_probs_b_vl as in its header).
std::vector<Spec> published_header(Dialect d) {
  const bool ds4 = d == Dialect::kDs4, mx = d == Dialect::kMxxm;
  const TensorType dense = TensorType::kQ8_0, wide = mx ? TensorType::kBF16 : TensorType::kF16;
  std::vector<Spec> t = {{"token_embd.weight", {D, V}, wide},
                         {"output_norm.weight", {D}, TensorType::kF32},
                         {"output.weight", {D, V}, mx ? TensorType::kBF16 : dense}};
  for (int l = 0; l < 4; ++l) {
    auto b = [&](const char* s) { return blk(l, s); };
    for (const char* site : {"attn", "ffn"}) {
      const std::string p = std::string("hc_") + site;
      t.push_back({b((p + "_fn.weight").c_str()), {HC * D, HCM}, mx ? TensorType::kF32 : TensorType::kF16});
      t.push_back({b((p + "_base.weight").c_str()), {HCM}, TensorType::kF32});
      t.push_back({b((p + "_scale.weight").c_str()), {3}, TensorType::kF32});
      t.push_back({b((std::string(site) + "_norm.weight").c_str()), {D}, TensorType::kF32});
    }
    t.push_back({b("attn_sinks.weight"), {H}, TensorType::kF32});
    t.push_back({b("attn_q_a.weight"), {D, Q}, dense});
    t.push_back({b("attn_q_a_norm.weight"), {Q}, TensorType::kF32});
    t.push_back({b("attn_q_b.weight"), {Q, H * HD}, dense});
    t.push_back({b("attn_kv.weight"), {D, HD}, dense});
    t.push_back({b("attn_kv_a_norm.weight"), {HD}, TensorType::kF32});
    t.push_back({b("attn_output_a.weight"), {H * HD / OG, OG * OR}, dense});
    t.push_back({b("attn_output_b.weight"), {OG * OR, D}, dense});
    const bool kv_src = l == 2 || l == 3, idx_src = kv_src;
    if (kv_src) {
      t.push_back({b("attn_compressor_kv.weight"), {D, HD}, wide});
      t.push_back({b("attn_compressor_norm.weight"), {HD}, TensorType::kF32});
      if (l == 2) t.push_back({b("attn_compressor_gate.weight"), {D, HD}, wide});
      t.push_back({b(mx ? "indexer_compressor_kv.weight" : "indexer.attn_k.weight"), {HD, IDX}, wide});
      t.push_back({b(mx ? "indexer_compressor_norm.weight" : "indexer.k_norm.weight"), {IDX}, TensorType::kF32});
    }
    if (idx_src) {
      t.push_back({b("indexer.attn_q_b.weight"), {Q, IH * IDX}, mx ? dense : wide});
      t.push_back({b("indexer.proj.weight"), {D, IH}, wide});
    }
    t.push_back({b("ffn_gate_inp.weight"), {D, E}, mx ? TensorType::kBF16 : TensorType::kF32});
    t.push_back({b("exp_probs_b.bias"), {E}, TensorType::kF32});
    if (!mx) t.push_back({b("exp_probs_b_vl.bias"), {E}, TensorType::kF32});
    t.push_back({b("ffn_gate_shexp.weight"), {D, I}, dense});
    t.push_back({b("ffn_up_shexp.weight"), {D, I}, dense});
    t.push_back({b("ffn_down_shexp.weight"), {I, D}, dense});
    const TensorType gu = ds4 ? TensorType::kIQ2_XXS : mx ? TensorType::kMXFP4 : TensorType::kQ2_K;
    const TensorType dn = ds4 ? TensorType::kQ2_K : mx ? TensorType::kMXFP4 : TensorType::kQ3_K;
    t.push_back({b("ffn_gate_exps.weight"), {D, I, E}, gu});
    t.push_back({b("ffn_up_exps.weight"), {D, I, E}, gu});
    t.push_back({b("ffn_down_exps.weight"), {I, D, E}, dn});
    if (l == 1) {
      const long cols = 2 * 2;  // (max_ngram 3 - 1) x 2 heads
      t.push_back({b(ds4 ? "engram_kv.weight" : "engram_wkv.weight"), {cols * 32, (HC + 1) * D},
                   ds4 ? TensorType::kF16 : dense});
      t.push_back({b(ds4 ? "engram_q_norm.weight" : "engram_q.weight"), {D, HC},
                   mx ? TensorType::kBF16 : TensorType::kF32});
      t.push_back({b(ds4 ? "engram_k_norm.weight" : "engram_k.weight"), {D, HC},
                   mx ? TensorType::kBF16 : TensorType::kF32});
      if (ds4) t.push_back({b("engram_embd.weight"), {32 + 1, ROWS}, TensorType::kI8});  // row264 at K = 32
      else if (mx) t.push_back({b("engram_embed.weight"), {32, ROWS}, TensorType::kMXFP4});
      else t.push_back({b("engram_embd.weight"), {32, ROWS}, TensorType::kDs41Fp8Row});
    }
  }
  return t;
}

/// The metadata keys that identify each dialect in its published files (values at the tiny sizes).
void published_keys(GgufWriter& w, Dialect d) {
  w.set("general.architecture", Value::string("deepseek41"));
  if (d == Dialect::kDs4) {
    w.set("deepseek41.config", Value::string("{}"));
    w.set("deepseek41.hidden_size", Value::u32(D));
    w.set("deepseek41.num_hidden_layers", Value::u32(4));
    w.set("deepseek41.engram.encoding", Value::string("e4m3_e8m0_32_row264"));
    w.set("deepseek41.engram.primes", Value::int_array(ValueType::kU32, std::vector<uint32_t>{11, 13, 17, 19}));
    return;
  }
  w.set("deepseek41.block_count", Value::u32(4));
  w.set("deepseek41.embedding_length", Value::u32(D));
  if (d == Dialect::kMxxm) {
    w.set("deepseek41.engram.n_heads", Value::u32(2));
    w.set("deepseek41.engram.head_dim", Value::u32(32));
  } else {
    w.set("deepseek41.engram.head_count", Value::u32(2));
    w.set("deepseek41.engram.key_length", Value::u32(32));
  }
}

/// Every tensor of `s` is a reference tensor of `d` (to_gguf gives the name back) or one the
/// dialect's published files carry and ds41 ignores. Returns how many were mapped.
int check_every_tensor_maps(const GgufShards& s, Dialect d) {
  int mapped = 0;
  for (const auto& kv : s.tensors()) {
    const std::string& name = kv.first;  // not a structured binding: Clang 14 cannot capture one (doctest's lambdas)
    const auto& t = kv.second;
    const auto ref = from_gguf(name, d);
    if (!ref) {
      CHECK_MESSAGE(ignored_tensor(d, name), dialect_name(d), ": tensor '", name, "' maps to no reference tensor");
      continue;
    }
    ++mapped;
    std::string probe = *ref;
    if (probe.size() > 20 && probe.find(".ffn.experts.w") != std::string::npos)  // merged: expert 0's slice
      probe.insert(probe.find(".ffn.experts.") + 13, "0.");
    if (probe.size() > 13 && probe.compare(probe.size() - 13, 13, ".engram.embed") == 0) probe += ".weight";
    const auto back = to_gguf(probe, d);
    REQUIRE_MESSAGE(back, probe);
    CHECK_MESSAGE(back->gguf == name, dialect_name(d), ": ", probe, " -> ", back->gguf, ", expected ", name);
    if (back->part == Part::kExpertSlice) CHECK_MESSAGE(t.dims.size() == 3, name);
  }
  return mapped;
}

template <class ModelT>
void run_bit_identical(ModelT& model) {
  int passed = 0, failed = 0, exact = 0;
  for (const auto& rep : golden::run(tiny(), model))
    for (const auto& r : rep.results) {
      (r.pass ? passed : failed)++;
      exact += r.exact;
    }
  CHECK(failed == 0);
  CHECK(passed > 1000);
  CHECK(exact == passed);
}

}  // namespace

TEST_CASE("gguf dialects: names, lookups and the tables") {
  CHECK(dialect_from_name("llama.cpp") == Dialect::kLlamaCpp);
  CHECK(dialect_from_name("ds4") == Dialect::kDs4);
  CHECK(dialect_from_name("mxxm") == Dialect::kMxxm);
  CHECK(!dialect_from_name("vcruz"));
  CHECK(to_gguf("layers.1.engram.wkv.weight", Dialect::kDs4)->gguf == "blk.1.engram_kv.weight");
  CHECK(to_gguf("layers.1.engram.q_weight", Dialect::kDs4)->gguf == "blk.1.engram_q_norm.weight");
  CHECK(to_gguf("layers.1.engram.k_weight", Dialect::kDs4)->gguf == "blk.1.engram_k_norm.weight");
  CHECK(to_gguf("layers.1.engram.embed.scale", Dialect::kDs4)->gguf == "blk.1.engram_embd.weight");
  CHECK(to_gguf("layers.2.attn.indexer.wk.weight", Dialect::kMxxm)->gguf == "blk.2.indexer_compressor_kv.weight");
  CHECK(to_gguf("layers.2.attn.indexer.k_norm.weight", Dialect::kMxxm)->gguf == "blk.2.indexer_compressor_norm.weight");
  CHECK(to_gguf("layers.1.engram.embed.weight", Dialect::kMxxm)->gguf == "blk.1.engram_embed.weight");
  CHECK(to_gguf("layers.2.attn.indexer.wk.weight")->gguf == "blk.2.indexer.attn_k.weight");
  const auto ex = to_gguf("layers.3.ffn.experts.5.w2.weight", Dialect::kDs4);
  CHECK(ex->gguf == "blk.3.ffn_down_exps.weight");
  CHECK(ex->part == Part::kExpertSlice);
  CHECK(ex->expert == 5);
  for (Dialect d : {Dialect::kLlamaCpp, Dialect::kDs4, Dialect::kMxxm}) {
    CHECK(ignored_tensor(d, "blk.7.exp_probs_b_vl.bias"));
    CHECK(!ignored_tensor(d, "blk.7.exp_probs_b.bias"));
    CHECK(!from_gguf("blk.7.exp_probs_b_vl.bias", d));
  }
}

TEST_CASE("gguf dialects: a replica of each published header is recognised and every tensor maps") {
  TempDir dir;
  for (Dialect d : {Dialect::kLlamaCpp, Dialect::kDs4, Dialect::kMxxm}) {
    CAPTURE(dialect_name(d));
    GgufWriter w(d == Dialect::kDs4 ? 16384 : kDefaultAlignment);  // ds4: general.alignment 16384
    published_keys(w, d);
    const std::vector<Spec> specs = published_header(d);
    for (const Spec& t : specs) add(w, t);
    const std::string path = dir.file(std::string(dialect_name(d)) + ".gguf");
    w.write_file(path);
    GgufShards s(path);
    CHECK(detect_dialect(s) == d);
    CHECK(s.tensors().size() == specs.size());
    const int mapped = check_every_tensor_maps(s, d);
    const int ignored = d == Dialect::kMxxm ? 0 : 4;  // exp_probs_b_vl.bias, one a layer
    CHECK(mapped + ignored == static_cast<int>(specs.size()));
    // the merged experts are [E, rows, cols] in every dialect
    for (const char* n : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"}) {
      const TensorInfo* t = s.find(blk(0, n));
      REQUIRE(t);
      CHECK(t->shape()[0] == E);
    }
    const TensorInfo* table = s.find(engram_table(d, 1));
    REQUIRE(table);
    CHECK(table->shape()[0] == ROWS);
    if (d == Dialect::kDs4) CHECK(engram_row_dim(table->type, table->shape()[1]) == 32);  // I8 row264 form
  }
}

TEST_CASE("gguf dialects: the tiny golden written in each dialect is detected and bit-identical") {
  const golden::Golden& g = tiny();
  const WeightSet ws = golden::regenerate_weights(g);
  for (Dialect d : {Dialect::kLlamaCpp, Dialect::kDs4, Dialect::kMxxm}) {
    CAPTURE(dialect_name(d));
    TempDir dir;
    WriteOptions opt;
    opt.dialect = d;
    const auto paths = write_model(g.config, ws, dir.file("tiny"), opt).paths;
    GgufWeights w(paths[0]);
    CHECK(w.dialect() == d);
    const ModelConfig& c = w.config();
    CHECK(c.dim == g.config.dim);
    CHECK(c.n_layers == g.config.n_layers);
    CHECK(c.max_seq_len == g.config.max_seq_len);
    CHECK(c.norm_eps == g.config.norm_eps);  // exact: ds4's from its JSON, not its f32 key
    CHECK(c.swiglu_limit == g.config.swiglu_limit);
    CHECK(c.gate_temp == g.config.gate_temp);
    CHECK(c.engram_layer_ids == g.config.engram_layer_ids);
    CHECK(c.engram_num_embeddings == g.config.engram_num_embeddings);
    CHECK(c.engram.primes == g.config.engram.primes);
    CHECK(c.engram.offsets == g.config.engram.offsets);  // ds4: the running sums of the primes
    CHECK(c.engram.multipliers == g.config.engram.multipliers);
    CHECK(c.engram.token_map == g.config.engram.token_map);
    CHECK(c.engram.pad_id == g.config.engram.pad_id);  // mxxm: compressed from pad_token_id
    CHECK(c.engram_pad_id == g.config.engram_pad_id);
    const int mapped = check_every_tensor_maps(w.shards(), d);
    CHECK(mapped == static_cast<int>(w.shards().tensors().size()));
    if (d == Dialect::kDs4) {
      CHECK(w.shards().meta().find("deepseek41.engram.offsets") == nullptr);
      CHECK(w.shards().meta().find("deepseek41.engram.primes")->elem == ValueType::kU32);
      CHECK(w.shards().find(engram_table(d, g.config.engram_layer_ids[0]))->type == TensorType::kI8);
    }
    Model<HostBackend> resident(w.config(), w);
    run_bit_identical(resident);
    using HB = HostBackend;
    StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 3});
    Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(w.config(), w, cache);
    run_bit_identical(streamed);
  }
}

TEST_CASE("gguf dialects: errors name what was seen") {
  TempDir dir;
  auto file = [&](const std::string& n, auto&& keys) {
    GgufWriter w;
    keys(w);
    w.add_tensor("token_embd.weight", {2, 32}, TensorType::kF32, std::vector<uint8_t>(256, 0));
    const std::string p = dir.file(n);
    w.write_file(p);
    return p;
  };
  SUBCASE("unknown architecture") {
    const std::string p = file("llama.gguf", [](GgufWriter& w) {
      w.set("general.architecture", Value::string("llama"));
      w.set("llama.block_count", Value::u32(2));
    });
    const std::string e = error_of([&] { GgufWeights w(p); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("'general.architecture' = \"llama\", expected \"deepseek41\"") != std::string::npos);
  }
  SUBCASE("no architecture") {
    const std::string p = file("none.gguf", [](GgufWriter& w) { w.set("general.name", Value::string("x")); });
    CHECK(error_of([&] { GgufWeights w(p); }).find("missing key 'general.architecture'") != std::string::npos);
  }
  SUBCASE("no dialect fits") {
    const std::string p = file("odd.gguf", [](GgufWriter& w) {
      w.set("general.architecture", Value::string("deepseek41"));
      w.set("deepseek41.n_layer", Value::u32(2));
    });
    const std::string e = error_of([&] { GgufShards s(p); detect_dialect(s); });
    CHECK(e.find("no DeepSeek-V4.1 GGUF dialect fits") != std::string::npos);
    CHECK(e.find("deepseek41.n_layer") != std::string::npos);
  }
  SUBCASE("ds4 without its config") {
    const std::string p = file("ds4.gguf", [](GgufWriter& w) {
      w.set("general.architecture", Value::string("deepseek41"));
      w.set("deepseek41.hidden_size", Value::u32(256));
    });
    GgufShards s(p);
    CHECK(detect_dialect(s) == Dialect::kDs4);
    const std::string e = error_of([&] { read_config(s); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("missing key 'deepseek41.config'") != std::string::npos);
  }
  SUBCASE("a missing key of each dialect, in a tiny model's file") {
    const golden::Golden& g = tiny();
    const WeightSet ws = golden::regenerate_weights(g);
    struct Case {
      Dialect d;
      const char* drop;
    };
    for (Case k : {Case{Dialect::kLlamaCpp, "deepseek41.engram.head_count"}, Case{Dialect::kDs4, "deepseek41.engram.pad_id"},
                   Case{Dialect::kMxxm, "deepseek41.engram.n_heads"}}) {
      CAPTURE(dialect_name(k.d));
      WriteOptions opt;
      opt.dialect = k.d;
      opt.shards = 1;
      const auto paths = write_model(g.config, ws, dir.file(std::string("m-") + dialect_name(k.d)), opt).paths;
      // rewrite the single shard without one key
      GgufFile f(paths[0]);
      GgufWriter w;
      for (const std::string& key : f.keys())
        if (key != k.drop && key.rfind("split.", 0) != 0 && key != "general.alignment") w.set(key, *f.find(key));
      GgufShards s0(paths[0]);
      for (const TensorInfo& t : f.tensors()) {
        std::vector<uint8_t> b = s0.read_tensor(*s0.find(t.name));
        w.add_tensor(t.name, t.shape(), t.type, std::move(b));
      }
      const std::string p = dir.file(std::string("drop-") + dialect_name(k.d) + ".gguf");
      w.write_file(p);
      const std::string e = error_of([&] { GgufWeights gw(p); });
      CHECK(e.find(p) != std::string::npos);
      CHECK(e.find(std::string("missing key '") + k.drop + "'") != std::string::npos);
    }
  }
}

// ------------------------------------------------------------------ facts derived (docs/GGUF.md)
namespace {

/// The whole configuration as comparable text: the ModelArgs JSON plus what it leaves out.
std::string config_text(const ModelConfig& c) {
  std::string s = safetensors::config_json(c, "bf16", "bf16").dump();
  s += " max_seq_len " + std::to_string(c.max_seq_len) + " pad " + std::to_string(c.engram.pad_id) + " map";
  for (int32_t t : c.engram.token_map) s += " " + std::to_string(t);
  for (const auto* v : {&c.engram.primes, &c.engram.offsets, &c.engram.multipliers}) {
    s += " |";
    for (int64_t x : *v) s += " " + std::to_string(x);
  }
  return s;
}

/// The configuration of published_header's tiny model (its tensors' sizes and roles).
ModelConfig replica_config() {
  ModelConfig c;
  c.max_seq_len = 64;
  c.vocab_size = V;
  c.dim = D;
  c.moe_inter_dim = I;
  c.n_layers = 4;
  c.n_heads = H;
  c.n_routed_experts = E;
  c.n_activated_experts = 2;
  c.route_scale = 1.5;
  c.swiglu_limit = 10;
  c.q_lora_rank = Q;
  c.head_dim = HD;
  c.rope_head_dim = 16;
  c.o_groups = OG;
  c.o_lora_rank = OR;
  c.window_size = 8;
  c.compress_ratios = {0, 0, 2, 1};
  c.kv_source_layers = kKvSources;
  c.index_source_layers = kIndexSources;
  c.original_seq_len = 16;
  c.index_n_heads = IH;
  c.index_head_dim = IDX;
  c.index_topk = 4;
  c.candidate_source_layer = 3;
  c.candidate_topk_blocks = 2;
  c.candidate_block_size = 4;
  c.hc_mult = HC;
  c.hc_sinkhorn_iters = 3;
  c.engram_layer_ids = {1};
  c.engram_num_embeddings = {ROWS};
  c.engram_max_ngram_size = 3;
  c.engram_n_heads = 2;
  c.engram_head_dim = 32;
  for (int t = 0; t < V; ++t) c.engram.token_map.push_back((t * 7) % 50);  // every id below 50 used
  c.engram_compressed_vocab_size = 50;
  c.engram_pad_id = 2;
  c.engram.pad_id = c.engram.token_map[2];
  c.engram.primes = {11, 13, 17, 19};
  c.engram.offsets = {0, 11, 24, 41};
  c.engram.multipliers = {3, 5, 7};
  c.validate();
  return c;
}

/// A file with `c`'s llama.cpp metadata but the keys `omit`, and `tensors`.
std::string replica_file(const TempDir& dir, const std::string& name, const ModelConfig& c,
                         const std::vector<std::string>& omit, const std::vector<Spec>& tensors) {
  GgufWriter w;
  write_config(w, c, Dialect::kLlamaCpp);
  for (const std::string& k : omit) w.erase(k);
  for (const Spec& t : tensors) add(w, t);
  const std::string p = dir.file(name);
  w.write_file(p);
  return p;
}

/// The ds41-only keys but the candidate prefilter's (which only the release's layout derives).
std::vector<std::string> derivable_keys() {
  std::vector<std::string> k;
  for (const std::string& s : ds41_only_keys())
    if (s.find("candidate") == std::string::npos) k.push_back(s);
  return k;
}

std::set<std::string> keys_of(const std::vector<DerivedFact>& d) {
  std::set<std::string> out;
  for (const DerivedFact& f : d) out.insert(f.key);
  return out;
}

}  // namespace

TEST_CASE("gguf derived facts: vcruz305's header without ds41's keys gives the same config") {
  TempDir dir;
  const ModelConfig c = replica_config();
  const std::vector<Spec> specs = published_header(Dialect::kLlamaCpp);
  const std::string with = replica_file(dir, "with.gguf", c, {}, specs);
  std::vector<std::string> omit = derivable_keys();
  omit.push_back("deepseek41.vocab_size");  // llama.cpp takes it from the vocabulary: derived too
  const std::string without = replica_file(dir, "without.gguf", c, omit, specs);
  GgufShards a(with), b(without);
  CHECK(detect_dialect(b) == Dialect::kLlamaCpp);
  for (const std::string& k : ds41_only_keys())
    CHECK_MESSAGE(b.meta().has(k) == (k.find("candidate") != std::string::npos), k);
  std::vector<DerivedFact> da, db;
  const ModelConfig ca = read_config(a, Dialect::kLlamaCpp, &da), cb = read_config(b, Dialect::kLlamaCpp, &db);
  CHECK(da.empty());
  CHECK(config_text(ca) == config_text(c));
  CHECK(config_text(cb) == config_text(c));
  std::set<std::string> want(omit.begin(), omit.end());
  CHECK(keys_of(db) == want);
  for (const DerivedFact& f : db) CHECK_MESSAGE(!f.from.empty(), f.key);
  CHECK(check_every_tensor_maps(b, Dialect::kLlamaCpp) + 4 == static_cast<int>(specs.size()));  // 4 exp_probs_b_vl

  SUBCASE("without the candidate keys too: refused, naming the key") {
    const std::string p = replica_file(dir, "none.gguf", c, ds41_only_keys(), specs);
    const std::string e = error_of([&] { GgufShards s(p); read_config(s); });
    CHECK(e.find(p) != std::string::npos);
    CHECK(e.find("missing key 'deepseek41.attention.candidate_source_layer_id'") != std::string::npos);
    CHECK(e.find("cannot be derived") != std::string::npos);
  }
  SUBCASE("a stated role that the tensors contradict") {
    std::vector<Spec> t;
    for (const Spec& x : specs)
      if (x.name.rfind("blk.3.attn_compressor_", 0) != 0 && x.name.rfind("blk.3.indexer.attn_k", 0) != 0 &&
          x.name.rfind("blk.3.indexer.k_norm", 0) != 0)
        t.push_back(x);  // layer 3 no kv source by its tensors
    const std::string p = replica_file(dir, "roles.gguf", c, {}, t);
    const std::string e = error_of([&] { GgufShards s(p); read_config(s); });
    CHECK(e.find("key 'deepseek41.attention.kv_source_layer_ids' = [2, 3] disagrees with the tensors") !=
          std::string::npos);
    CHECK(e.find("attn_compressor_kv.weight are [2]") != std::string::npos);
  }
  SUBCASE("index keys on a layer that is no kv source") {
    std::vector<Spec> t = specs;
    t.push_back({"blk.1.indexer.attn_k.weight", {HD, IDX}, TensorType::kF16});
    const std::string p = replica_file(dir, "keys.gguf", c, omit, t);
    const std::string e = error_of([&] { GgufShards s(p); read_config(s); });
    CHECK(e.find("the layers carrying the index keys (indexer.attn_k.weight) [1, 2, 3]") != std::string::npos);
  }
  SUBCASE("a token map that leaves compressed ids unused: the count is not derived") {
    ModelConfig g = c;
    for (int32_t& t : g.engram.token_map) t = t == 10 ? 11 : t;  // id 10 unused below the largest, 49
    g.engram_compressed_vocab_size = 50;
    const std::string p = replica_file(dir, "gaps.gguf", g, omit, specs);
    const std::string e = error_of([&] { GgufShards s(p); read_config(s); });
    CHECK(e.find("missing key 'deepseek41.engram.compressed_vocab_size'") != std::string::npos);
  }
  SUBCASE("a stated compressed vocabulary the map exceeds") {
    ModelConfig g = c;
    g.engram_compressed_vocab_size = 40;  // the map holds ids up to 49
    const std::string p = replica_file(dir, "cv.gguf", g, {}, specs);
    const std::string e = error_of([&] { GgufShards s(p); read_config(s); });
    CHECK(e.find("key 'deepseek41.engram.compressed_vocab_size' = 40 disagrees with the token map, which holds the "
                 "compressed ids 0 to 49") != std::string::npos);
  }
  SUBCASE("a pad token no id maps to") {
    ModelConfig g = c;
    g.engram.pad_id = 49;
    for (int32_t& t : g.engram.token_map) t = t == 49 ? 48 : t;
    g.engram_compressed_vocab_size = 50;  // still in range: validate accepts pad 49
    std::vector<std::string> o = omit;
    o.erase(std::find(o.begin(), o.end(), "deepseek41.engram.compressed_vocab_size"));
    const std::string p = replica_file(dir, "pad.gguf", g, o, specs);
    const std::string e = error_of([&] { GgufShards s(p); read_config(s); });
    CHECK(e.find("missing key 'deepseek41.engram.pad_token_id', and no token maps to the compressed pad") !=
          std::string::npos);
  }
}

TEST_CASE("gguf derived facts: the tiny golden written without ds41's keys is bit-identical") {
  const golden::Golden& g = tiny();
  const WeightSet ws = golden::regenerate_weights(g);
  TempDir dir;
  WriteOptions opt;
  opt.omit_keys = derivable_keys();
  const auto paths = write_model(g.config, ws, dir.file("tiny"), opt).paths;
  WriteOptions full;
  GgufWeights w(paths[0]), ref(write_model(g.config, ws, dir.file("full"), full).paths[0]);
  CHECK(config_text(w.config()) == config_text(ref.config()));
  std::vector<DerivedFact> d;
  read_config(w.shards(), w.dialect(), &d);
  CHECK(keys_of(d) == std::set<std::string>(opt.omit_keys.begin(), opt.omit_keys.end()));
  Model<HostBackend> resident(w.config(), w);
  run_bit_identical(resident);
  using HB = HostBackend;
  StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 3});
  Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(w.config(), w, cache);
  run_bit_identical(streamed);

  // its candidate prefilter (source 3, 3 blocks of 2) is the golden's own: not derivable
  opt.omit_keys = ds41_only_keys();
  const std::string p = write_model(g.config, ws, dir.file("bare"), opt).paths[0];
  const std::string e = error_of([&] { GgufWeights x(p); });
  CHECK(e.find("missing key 'deepseek41.attention.candidate_source_layer_id'") != std::string::npos);
}

TEST_CASE("gguf derived facts: the candidate prefilter of the release's layout") {
  std::ifstream in(std::string(DS41_RELEASE_CONFIG_DIR) + "/inference/config.json");
  REQUIRE(in.good());
  const nlohmann::json j = nlohmann::json::parse(in);
  ModelConfig c;
  c.n_layers = j["n_layers"].get<int>();
  c.dim = j["dim"].get<int>();
  c.vocab_size = j["vocab_size"].get<long>();
  c.n_heads = j["n_heads"].get<int>();
  c.head_dim = j["head_dim"].get<int>();
  c.compress_ratios = j["compress_ratios"].get<std::vector<int>>();
  c.kv_source_layers = j["kv_source_layers"].get<std::vector<int>>();
  c.index_source_layers = j["index_source_layers"].get<std::vector<int>>();
  c.index_n_heads = j["index_n_heads"].get<int>();
  c.index_head_dim = j["index_head_dim"].get<int>();
  c.index_topk = j["index_topk"].get<int>();
  CHECK(has_release_layout(c));  // 43 ratios (the DSpark stages'): the first 40 are the backbone's
  const ReleaseCandidates r;
  CHECK(r.source_layer == j["candidate_source_layer"].get<int>());
  CHECK(r.topk_blocks == j["candidate_topk_blocks"].get<int>());
  CHECK(r.block_size == j["candidate_block_size"].get<int>());
  ModelConfig other = c;
  other.index_source_layers.pop_back();
  CHECK(!has_release_layout(other));
  other = c;
  other.compress_ratios[5] = 1;
  CHECK(!has_release_layout(other));
}

}  // namespace test_gguf_dialects
