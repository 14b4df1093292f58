// DSpark draft files (io/gguf_draft.hpp, docs/GGUF.md "DSpark draft files"): every DSpark golden's
// model (golden/ds41_tiny_dspark_golden.json, golden/extra/dspark/) written as a main GGUF plus a
// draft file — llama.cpp's dflash family and ds4's support-GGUF family — loads as one GgufWeights
// whose model runs the golden, its draft calls included, bit-identical (f32/bf16/fp8/fp4 storage
// kept as it is); Q8_0 drafts run with the bits of their dequantized weights; the main file alone
// is unchanged (no head); and the refusals: a draft for another model, target layers out of range,
// missing tensors, a main file given as the draft, a V4 (0731) draft. Files only under a temporary
// directory, removed after.
#include <doctest/doctest.h>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <type_traits>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "ds41/testing/golden_run.hpp"
#include "temp_dir.hpp"

namespace test_gguf_dspark {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using namespace ds41::gguf;

namespace {

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-gguf-dspark") {}
};
using testing::error_of;

std::vector<std::string> dspark_goldens() {
  std::vector<std::string> out{DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json"};
  std::vector<std::string> extra;
  for (const auto& e : std::filesystem::directory_iterator(DS41_GOLDEN_DIR "/extra/dspark"))
    if (e.path().extension() == ".json") extra.push_back(e.path().string());
  std::sort(extra.begin(), extra.end());
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

const golden::Golden& public_dspark() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json");
  return g;
}

const DraftFamily kFamilies[] = {DraftFamily::kDflash, DraftFamily::kDs4};

struct Files {
  std::vector<std::string> main;
  std::string draft;
};
Files write_both(const ModelConfig& c, const WeightSet& ws, const TempDir& dir, DraftFamily f, const WriteOptions& opt,
                 const std::string& tag = "m") {
  Files out;
  out.main = write_model(c, ws, dir.file(tag), opt).paths;
  out.draft = write_draft(c, ws, dir.file(tag + "-draft-" + draft_family_name(f) + ".gguf"), opt, f).paths.at(0);
  return out;
}

struct Counts {
  int passed = 0, failed = 0, exact = 0, draft = 0;
};
template <class ModelT>
Counts run_golden(const golden::Golden& g, ModelT& model) {
  Counts c;
  for (const auto& rep : golden::run(g, model))
    for (const auto& r : rep.results) {
      (r.pass ? c.passed : c.failed)++;
      c.exact += r.exact;
      c.draft += r.pass && golden::is_draft_capture(r.name);
    }
  return c;
}

/// A copy of the single-file GGUF `from` at `to` with key `set` replaced by `v` (when given),
/// keys in `drop` and tensors in `drop_tensors` left out.
void rewrite(const std::string& from, const std::string& to, const std::vector<std::string>& drop,
             const std::vector<std::string>& drop_tensors, const std::string& set = "", const Value* v = nullptr) {
  GgufFile f(from);
  GgufWriter w(f.alignment());
  for (const std::string& k : f.keys())
    if (std::find(drop.begin(), drop.end(), k) == drop.end() && k != "general.alignment") w.set(k, *f.find(k));
  if (v) w.set(set, *v);
  GgufShards s(from);
  for (const TensorInfo& t : f.tensors())
    if (std::find(drop_tensors.begin(), drop_tensors.end(), t.name) == drop_tensors.end())
      w.add_tensor(t.name, t.shape(), t.type, s.read_tensor(*s.find(t.name)));
  w.write_file(to);
}

/// The logits, captures and draft results of the golden's token sequence with a draft after every
/// decode step (as golden::run), for comparing two models bit for bit.
struct Run {
  std::vector<std::vector<float>> logits;
  std::vector<golden::CollectSink> caps;
  std::vector<DraftResult> drafts;
};
template <class ModelT>
Run run_steps(const golden::Golden& g, ModelT& model) {
  Run out;
  out.caps.resize(1 + g.decode_tokens.size());
  auto seq = model.make_sequence();
  StepResult r = model.extend(seq, g.prompt_tokens, &out.caps[0]);
  out.logits.push_back(r.logits);
  for (size_t i = 0; i < g.decode_tokens.size(); ++i) {
    r = model.extend(seq, {g.decode_tokens[i]}, &out.caps[1 + i]);
    out.logits.push_back(r.logits);
    out.drafts.push_back(model.draft(seq, r.argmax, &out.caps[1 + i]));
  }
  return out;
}
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}
long compare(const Run& want, const Run& got, const std::string& label) {
  REQUIRE(got.logits.size() == want.logits.size());
  for (size_t s = 0; s < want.logits.size(); ++s)
    CHECK_MESSAGE(same_bits(want.logits[s], got.logits[s]), label, ": logits of step ", s);
  REQUIRE(got.drafts.size() == want.drafts.size());
  for (size_t s = 0; s < want.drafts.size(); ++s) {
    CHECK_MESSAGE(want.drafts[s].tokens == got.drafts[s].tokens, label, ": draft tokens after step ", s + 1);
    CHECK_MESSAGE(same_bits(want.drafts[s].logits, got.drafts[s].logits), label, ": draft logits after step ", s + 1);
    CHECK_MESSAGE(same_bits(want.drafts[s].confidence, got.drafts[s].confidence), label, ": confidence after step ", s + 1);
  }
  long compared = 0;
  for (size_t s = 0; s < want.caps.size(); ++s) {
    REQUIRE(got.caps[s].order == want.caps[s].order);
    for (const std::string& name : want.caps[s].order) {
      const auto& a = want.caps[s].items.at(name);
      const auto& b = got.caps[s].items.at(name);
      CHECK_MESSAGE((a.shape == b.shape && a.i32 == b.i32 && same_bits(a.f32, b.f32)), label, ": step ", s, " ", name);
      ++compared;
    }
  }
  return compared;
}

/// The weights with every tensor the files hold in F16 or a block type (Q8_0 here) replaced by
/// its dequantized f32 values, read from the files' bytes (the oracle of test_gguf_types).
WeightSet oracle_weights(const WeightSet& ws, const GgufWeights& gw, std::map<std::string, int>& replaced) {
  WeightSet out;
  for (const auto& kv : ws.all()) {
    const std::string& name = kv.first;
    const HostTensor& t = kv.second;
    const bool draft = name.rfind("mtp.", 0) == 0;
    const auto located = draft ? gw.draft()->locate(name) : gw.locate(name);
    const NameRef& ref = located.first;
    const TensorInfo* ti = located.second;
    const GgufShards& shards = draft ? gw.draft()->shards() : gw.shards();
    const GgmlTypeInfo* info = ggml_info(ti->type);
    const bool widen = ti->type == TensorType::kF16 ||
                       (info && ti->type != TensorType::kMXFP4 && ggml_block_dequantizable(static_cast<GgmlType>(ti->type)));
    if (ref.part == Part::kEngramCodes || ref.part == Part::kEngramScales || !widen) {
      out.put(name, t);
      continue;
    }
    uint64_t offset = ti->offset, bytes = ti->bytes;
    if (ref.part == Part::kExpertSlice) {
      bytes /= ti->dims[2];
      offset += bytes * ref.expert;
    }
    std::vector<uint8_t> raw(bytes);
    shards.read(ti->shard, raw.data(), bytes, offset, "oracle");
    std::vector<float> v;
    if (ti->type == TensorType::kF16) {
      for (size_t i = 0; i < raw.size() / 2; ++i) v.push_back(f16_to_f32(static_cast<uint16_t>(raw[2 * i] | raw[2 * i + 1] << 8)));
    } else {
      v.resize(raw.size() / info->block_bytes * info->block_elems);
      for (size_t b = 0; b < raw.size() / info->block_bytes; ++b)
        REQUIRE(dequantize_ggml_block(static_cast<GgmlType>(ti->type), raw.data() + b * info->block_bytes,
                                      v.data() + b * info->block_elems));
    }
    REQUIRE(static_cast<long>(v.size()) == t.numel());
    ++replaced[std::string(draft ? "draft " : "main ") + tensor_type_name(ti->type)];
    out.put(name, HostTensor::from_f32(t.shape, v));
  }
  return out;
}

}  // namespace

TEST_CASE("gguf dspark: the two families' names map both ways") {
  CHECK(draft_family_from_name("dflash") == DraftFamily::kDflash);
  CHECK(draft_family_from_name("ds4") == DraftFamily::kDs4);
  CHECK(!draft_family_from_name("mxxm"));
  struct Case {
    const char* ref;
    const char* dflash;
    const char* ds4;
  };
  const Case cases[] = {
      {"mtp.0.main_proj.weight", "fc.weight", "mtp.0.main_proj.weight"},
      {"mtp.0.main_norm.weight", "enc.output_norm.weight", "mtp.0.main_norm.weight"},
      {"mtp.2.norm.weight", "output_norm.weight", "mtp.2.norm.weight"},
      {"mtp.2.markov_head.embed.weight", "markov_w1.weight", "mtp.2.markov_head.markov_w1.weight"},
      {"mtp.2.markov_head.head.weight", "markov_w2.weight", "mtp.2.markov_head.markov_w2.weight"},
      {"mtp.2.confidence_head.proj.weight", "conf_proj.weight", "mtp.2.confidence_head.proj.weight"},
      {"mtp.1.attn.wkv.weight", "blk.1.attn_kv.weight", "mtp.1.attn_kv.weight"},
      {"mtp.0.attn.attn_sink", "blk.0.attn_sinks.weight", "mtp.0.attn_sinks.weight"},
      {"mtp.1.attn.kv_norm.weight", "blk.1.attn_kv_a_norm.weight", "mtp.1.attn_kv_a_norm.weight"},
      {"mtp.2.ffn.gate.bias", "blk.2.exp_probs_b.bias", "mtp.2.exp_probs_b.bias"},
      {"mtp.0.hc_ffn_fn", "blk.0.hc_ffn_fn.weight", "mtp.0.hc_ffn_fn.weight"},
      {"mtp.1.ffn.shared_experts.w2.weight", "blk.1.ffn_down_shexp.weight", "mtp.1.ffn_down_shexp.weight"},
  };
  for (const Case& k : cases) {
    CAPTURE(k.ref);
    CHECK(to_draft_gguf(k.ref, DraftFamily::kDflash, 3)->gguf == k.dflash);
    CHECK(to_draft_gguf(k.ref, DraftFamily::kDs4, 3)->gguf == k.ds4);
    CHECK(*from_draft_gguf(k.dflash, DraftFamily::kDflash, 3) == k.ref);
    CHECK(*from_draft_gguf(k.ds4, DraftFamily::kDs4, 3) == k.ref);
  }
  const auto ex = to_draft_gguf("mtp.1.ffn.experts.5.w3.weight", DraftFamily::kDflash, 3);
  CHECK(ex->gguf == "blk.1.ffn_up_exps.weight");
  CHECK(ex->part == Part::kExpertSlice);
  CHECK(ex->expert == 5);
  CHECK(to_draft_gguf("mtp.0.ffn.experts.2.w2.weight", DraftFamily::kDs4, 3)->gguf == "mtp.0.ffn_down_exps.weight");
  // the roots only on their stage; stages past the last; backbone names
  CHECK(!to_draft_gguf("mtp.1.main_proj.weight", DraftFamily::kDflash, 3));
  CHECK(!to_draft_gguf("mtp.0.norm.weight", DraftFamily::kDs4, 3));
  CHECK(!to_draft_gguf("mtp.3.attn.wkv.weight", DraftFamily::kDflash, 3));
  CHECK(!to_draft_gguf("layers.0.attn.wkv.weight", DraftFamily::kDflash, 3));
  for (DraftFamily f : kFamilies) {
    CHECK(ignored_draft_tensor(draft_stage_prefix(f, 0) + "exp_probs_b_vl.bias", f));
    CHECK(!ignored_draft_tensor(draft_stage_prefix(f, 0) + "exp_probs_b.bias", f));
  }
  CHECK(ignored_draft_tensor("output_hc_fn.weight", DraftFamily::kDflash));
  CHECK(ignored_draft_tensor("mtp.2.hc_head_fn.weight", DraftFamily::kDs4));
}

TEST_CASE("gguf dspark: every DSpark golden as a main GGUF and a draft file, both families, is bit-identical") {
  for (const std::string& path : dspark_goldens()) {
    const golden::Golden g = golden::load(path);
    const WeightSet ws = golden::regenerate_weights(g);
    for (DraftFamily f : kFamilies) {
      const std::string label = std::filesystem::path(path).filename().string() + " " + draft_family_name(f);
      CAPTURE(label);
      TempDir dir;
      const Files files = write_both(g.config, ws, dir, f, WriteOptions{});
      GgufWeights w(files.main[0], {}, files.draft);
      REQUIRE(w.draft() != nullptr);
      CHECK(w.draft()->family() == f);
      const ModelConfig& c = w.config();
      CHECK(c.n_mtp_layers == g.config.n_mtp_layers);
      CHECK(c.dspark_block_size == g.config.dspark_block_size);
      CHECK(c.dspark_noise_token_id == g.config.dspark_noise_token_id);
      CHECK(c.dspark_target_layer_ids == g.config.dspark_target_layer_ids);
      CHECK(c.dspark_markov_rank == g.config.dspark_markov_rank);
      CHECK(c.dspark_experts() == g.config.dspark_experts());
      CHECK(c.dspark_active_experts() == g.config.dspark_active_experts());
      // every tensor of the draft file is one of the head's (merged experts: expert 0's slice)
      int mapped = 0;
      for (const auto& kv : w.draft()->shards().tensors()) {
        const std::string& name = kv.first;
        const auto ref = from_draft_gguf(name, f, c.n_mtp_layers);
        REQUIRE_MESSAGE(ref, name);
        std::string probe = *ref;
        if (probe.find(".ffn.experts.w") != std::string::npos) probe.insert(probe.find(".ffn.experts.") + 13, "0.");
        CHECK_MESSAGE(to_draft_gguf(probe, f, c.n_mtp_layers)->gguf == name, probe);
        CHECK_MESSAGE(w.has(probe), probe);
        ++mapped;
      }
      CHECK(mapped > 20);
      Model<HostBackend> model(c, w);
      REQUIRE(model.has_draft_head());
      const Counts k = run_golden(g, model);
      CHECK(k.failed == 0);
      CHECK(k.passed > 200);
      CHECK(k.exact == k.passed);
      CHECK(k.draft > 0);
      MESSAGE(label, ": ", k.passed, " captures bit-identical, ", k.draft, " of them from draft calls");
    }
  }
}

// a streaming model's stages stream too: their Block holds the backbone's ExpertStore
static_assert(std::is_same_v<DSparkHead<HostBackend, StreamedExperts<HostBackend>>::Stage,
                             Block<HostBackend, StreamedExperts<HostBackend>, ResidentTable<HostBackend>>>);

TEST_CASE("gguf dspark: every DSpark golden streamed from main + draft file, the stages' experts through the same cache") {
  using HB = HostBackend;
  for (const std::string& path : dspark_goldens()) {
    const golden::Golden g = golden::load(path);
    const WeightSet ws = golden::regenerate_weights(g);
    TempDir dir;
    for (DraftFamily f : kFamilies) {
      const std::string label = std::filesystem::path(path).filename().string() + " " + draft_family_name(f);
      CAPTURE(label);
      const Files files = write_both(g.config, ws, dir, f, WriteOptions{}, draft_family_name(f));
      GgufWeights w(files.main[0], {}, files.draft);
      const ModelConfig& c = w.config();
      // a cache of 2 experts: fewer than any layer's, the backbone's or a stage's, so every layer
      // evicts and reads again
      StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 2});
      REQUIRE(cache.capacity() < std::min(c.n_routed_experts, c.dspark_experts()));
      // the stages are the file's layers n_layers + s, with the draft's expert count
      REQUIRE(cache.slices().layers() == c.n_layers + c.n_mtp_layers);
      for (int s = 0; s < c.n_mtp_layers; ++s) CHECK(cache.slices().experts(c.n_layers + s) == c.dspark_experts());
      Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(c, w, cache);
      REQUIRE(streamed.has_draft_head());
      const Counts k = run_golden(g, streamed);
      CHECK(k.failed == 0);
      CHECK(k.exact == k.passed);
      CHECK(k.draft > 0);
      // every stage took its experts from the cache (nothing of them resident)
      const ExpertCounters n = cache.counters();
      long stage_asks = 0;
      for (int s = 0; s < c.n_mtp_layers; ++s) {
        const uint64_t asked = n.layer_hits.at(c.n_layers + s) + n.layer_misses.at(c.n_layers + s);
        CHECK_MESSAGE(asked > 0, "stage ", s);
        stage_asks += static_cast<long>(asked);
      }
      MESSAGE(label, ": ", k.passed, " captures bit-identical (", k.draft, " from drafts); the stages asked the cache for ",
              stage_asks, " experts");
    }
  }
}

TEST_CASE("gguf dspark: the main file alone serves the backbone as before") {
  const golden::Golden& g = public_dspark();
  const WeightSet ws = golden::regenerate_weights(g);
  TempDir dir;
  const Files files = write_both(g.config, ws, dir, DraftFamily::kDflash, WriteOptions{});
  using HB = HostBackend;
  {  // streamed without the draft: the cache maps the backbone's layers alone
    GgufWeights alone(files.main[0]);
    StreamedExperts<HB>::Cache cache(alone, {.capacity_experts = 2});
    CHECK(cache.slices().layers() == alone.config().n_layers);
    Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> m(alone.config(), alone, cache);
    CHECK(!m.has_draft_head());
  }
  for (const std::string& draft : {std::string(), std::string("")}) {
    GgufWeights alone = draft.empty() ? GgufWeights(files.main[0]) : GgufWeights(files.main[0], {}, draft);
    CHECK(alone.draft() == nullptr);
    CHECK(!alone.config().has_dspark());  // llama.cpp's keys carry no DSpark fields
    CHECK(!alone.has("mtp.0.main_proj.weight"));
    Model<HB> m(alone.config(), alone);
    CHECK(!m.has_draft_head());
  }
  // the main file is the same bytes whether or not a draft is written beside it
  TempDir other;
  const auto plain = write_model(g.config, ws, other.file("m"), WriteOptions{}).paths;
  REQUIRE(plain.size() == files.main.size());
  auto bytes = [](const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(in), {});
  };
  for (size_t i = 0; i < plain.size(); ++i) CHECK(bytes(plain[i]) == bytes(files.main[i]));
}

TEST_CASE("gguf dspark: published arrangements — conf_proj 1-D, attn_output_a 3-D — read as the same bytes") {
  const golden::Golden& g = public_dspark();
  const ModelConfig& c = g.config;
  const WeightSet ws = golden::regenerate_weights(g);
  TempDir dir;
  const Files files = write_both(c, ws, dir, DraftFamily::kDflash, WriteOptions{});
  GgufFile f(files.draft);
  GgufWriter w(f.alignment());
  for (const std::string& k : f.keys())
    if (k != "general.alignment") w.set(k, *f.find(k));
  GgufShards s(files.draft);
  int reshaped = 0;
  for (const TensorInfo& t : f.tensors()) {
    std::vector<long> shape = t.shape();
    if (t.name == "conf_proj.weight") shape = {shape.at(1)};  // ggml {dim+R}
    if (t.name.find(".attn_output_a.weight") != std::string::npos)  // ggml {H*D/G, R_o, G}
      shape = {c.o_groups, c.o_lora_rank, shape.at(1)};
    reshaped += shape != t.shape();
    w.add_tensor(t.name, shape, t.type, s.read_tensor(*s.find(t.name)));
  }
  CHECK(reshaped == 1 + c.n_mtp_layers);
  const std::string p = dir.file("published.gguf");
  w.write_file(p);
  GgufWeights gw(files.main[0], {}, p);
  CHECK(gw.draft()->shards().find("conf_proj.weight")->dims.size() == 1);
  CHECK(gw.draft()->shards().find("blk.0.attn_output_a.weight")->dims.size() == 3);
  Model<HostBackend> model(gw.config(), gw);
  const Counts k = run_golden(g, model);
  CHECK(k.failed == 0);
  CHECK(k.exact == k.passed);
  CHECK(k.draft > 0);
}

TEST_CASE("gguf dspark: a Q8_0 draft and main file run with the bits of their dequantized weights") {
  const golden::Golden& g = public_dspark();
  const WeightSet ws = golden::regenerate_weights(g);
  for (DraftFamily f : kFamilies) {
    CAPTURE(draft_family_name(f));
    TempDir dir;
    WriteOptions opt;
    opt.experts = TensorType::kQ8_0;
    opt.dense = TensorType::kQ8_0;
    const std::vector<std::string> main = write_model(g.config, ws, dir.file("q"), opt).paths;
    const WriteResult dr = write_draft(g.config, ws, dir.file("q-draft.gguf"), opt, f);
    // per stage: 3 expert tensors and the dense matrices, plus main_proj
    CHECK(dr.converted >= g.config.n_mtp_layers * 3 + 1);
    GgufWeights gw(main[0], {}, dr.paths[0]);
    const GgufShards& ds = gw.draft()->shards();
    CHECK(ds.find(to_draft_gguf("mtp.0.main_proj.weight", f, 3)->gguf)->type == TensorType::kQ8_0);
    CHECK(ds.find(to_draft_gguf("mtp.1.ffn.experts.0.w1.weight", f, 3)->gguf)->type == TensorType::kQ8_0);
    CHECK(ds.find(to_draft_gguf("mtp.2.attn.wq_a.weight", f, 3)->gguf)->type == TensorType::kQ8_0);
    // the Markov embedding (a table), the router and the heads keep their encoding
    CHECK(ds.find(to_draft_gguf("mtp.2.markov_head.embed.weight", f, 3)->gguf)->type != TensorType::kQ8_0);
    CHECK(ds.find(to_draft_gguf("mtp.0.ffn.gate.weight", f, 3)->gguf)->type != TensorType::kQ8_0);
    std::map<std::string, int> replaced;
    const WeightSet oracle = oracle_weights(ws, gw, replaced);
    CHECK(replaced["draft Q8_0"] >= g.config.n_mtp_layers * 3 * g.config.dspark_experts());
    CHECK(replaced["main Q8_0"] > 0);
    Model<HostBackend> want_model(gw.config(), oracle);
    Model<HostBackend> got_model(gw.config(), gw);
    REQUIRE(got_model.has_draft_head());
    const Run want = run_steps(g, want_model);
    CHECK(compare(want, run_steps(g, got_model), draft_family_name(f)) > 500);
    // and it is not the golden's model: the values did change
    Model<HostBackend> exact(g.config, ws);
    CHECK(!same_bits(run_steps(g, exact).drafts.back().logits, want.drafts.back().logits));
  }
}

TEST_CASE("gguf dspark: draft files that do not fit are refused by name") {
  const golden::Golden& g = public_dspark();
  const WeightSet ws = golden::regenerate_weights(g);
  TempDir dir;
  const Files a = write_both(g.config, ws, dir, DraftFamily::kDflash, WriteOptions{}, "a");
  const std::string ds4 = write_draft(g.config, ws, dir.file("a-ds4.gguf"), WriteOptions{}, DraftFamily::kDs4).paths[0];
  // another DSpark model: dim 64 too, vocab 128, hc 2, 3 layers
  const golden::Golden other = golden::load(DS41_GOLDEN_DIR "/extra/dspark/d_fill_hc2_b3.json");
  const WeightSet ows = golden::regenerate_weights(other);
  const Files b = write_both(other.config, ows, dir, DraftFamily::kDflash, WriteOptions{}, "b");
  const std::string b_ds4 =
      write_draft(other.config, ows, dir.file("b-ds4.gguf"), WriteOptions{}, DraftFamily::kDs4).paths[0];

  SUBCASE("a draft for another model") {
    for (const std::string& d : {b.draft, b_ds4}) {
      const std::string e = error_of([&] { GgufWeights w(a.main[0], {}, d); });
      CAPTURE(e);
      CHECK(e.find(d) != std::string::npos);
      CHECK(e.find("a draft for another model") != std::string::npos);
    }
    // and the other way round
    const std::string e = error_of([&] { GgufWeights w(b.main[0], {}, a.draft); });
    CHECK(e.find("a draft for another model") != std::string::npos);
  }
  SUBCASE("target layers outside the main model") {
    const Value t = Value::int_array(ValueType::kI32, std::vector<int>{3, 4, 9});
    const std::string p = dir.file("targets.gguf");
    rewrite(a.draft, p, {}, {}, "dflash.target_layers", &t);
    const std::string e = error_of([&] { GgufWeights w(a.main[0], {}, p); });
    CAPTURE(e);
    CHECK(e.find("does not fit the main model") != std::string::npos);
    CHECK(e.find("dspark_target_layer_ids[2] = 9") != std::string::npos);
  }
  SUBCASE("missing tensors and keys") {
    struct Case {
      std::string from, tensor, key, expect;
    };
    const Case cases[] = {
        {a.draft, "blk.1.attn_kv.weight", "", "missing tensor 'blk.1.attn_kv.weight' (stage 1)"},
        {a.draft, "markov_w2.weight", "", "missing tensor 'markov_w2.weight' (the Markov head)"},
        {a.draft, "blk.2.ffn_down_exps.weight", "", "missing tensor 'blk.2.ffn_down_exps.weight'"},
        {ds4, "mtp.0.main_norm.weight", "", "missing tensor 'mtp.0.main_norm.weight' (main_norm)"},
        {ds4, "mtp.2.markov_head.markov_w1.weight", "", "missing tensor 'mtp.2.markov_head.markov_w1.weight'"},
        {a.draft, "", "dflash.block_size", "missing key 'dflash.block_size'"},
        {a.draft, "", "tokenizer.ggml.mask_token_id", "missing key 'tokenizer.ggml.mask_token_id'"},
        {ds4, "", "dspark.target_layer_ids", "missing key 'dspark.target_layer_ids'"},
        {ds4, "", "dspark.expert_used_count", "missing key 'dspark.expert_used_count'"},
    };
    int i = 0;
    for (const Case& k : cases) {
      CAPTURE(k.expect);
      const std::string p = dir.file("cut" + std::to_string(i++) + ".gguf");
      rewrite(k.from, p, k.key.empty() ? std::vector<std::string>{} : std::vector<std::string>{k.key},
              k.tensor.empty() ? std::vector<std::string>{} : std::vector<std::string>{k.tensor});
      const std::string e = error_of([&] { GgufWeights w(a.main[0], {}, p); });
      CHECK(e.find(p) != std::string::npos);
      CHECK(e.find(k.expect) != std::string::npos);
    }
  }
  SUBCASE("the main file given as the draft, and a file of neither family") {
    const std::string e = error_of([&] { GgufWeights w(a.main[0], {}, a.main[0]); });
    CHECK(e.find("not a DSpark draft file but a main model file") != std::string::npos);
    GgufWriter w;
    w.set("general.architecture", Value::string("llama"));
    w.add_tensor("x.weight", {2, 32}, TensorType::kF32, std::vector<uint8_t>(256, 0));
    const std::string p = dir.file("llama.gguf");
    w.write_file(p);
    const std::string e2 = error_of([&] { GgufWeights gw(a.main[0], {}, p); });
    CHECK(e2.find("not a DSpark draft file (general.architecture \"llama\"") != std::string::npos);
  }
  SUBCASE("a V4 (0731) dflash draft, a disagreeing key, a non-zero confidence bias") {
    const Value no = Value::boolean(false);
    const std::string p = dir.file("v4.gguf");
    rewrite(a.draft, p, {}, {}, "dflash.dsv41_semantics", &no);
    CHECK(error_of([&] { GgufWeights w(a.main[0], {}, p); }).find("a DeepSeek-V4 (0731) draft") != std::string::npos);
    const Value hc = Value::u32(2);
    const std::string q = dir.file("hc.gguf");
    rewrite(a.draft, q, {}, {}, "dflash.hyper_connection.count", &hc);
    const std::string e = error_of([&] { GgufWeights w(a.main[0], {}, q); });
    CHECK(e.find("key 'dflash.hyper_connection.count' = 2, the main model has 4") != std::string::npos);
    const Value spell = Value::u32(7);
    const std::string r = dir.file("spell.gguf");
    rewrite(ds4, r, {}, {}, "deepseek4.dspark_block_size", &spell);
    CHECK(error_of([&] { GgufWeights w(a.main[0], {}, r); }).find("keys 'dspark.block_size' and 'deepseek4.dspark_block_size' disagree") !=
          std::string::npos);
    // a bias: zero is accepted, anything else refused
    for (float x : {0.0f, 0.5f}) {
      GgufFile f(a.draft);
      GgufWriter w2(f.alignment());
      for (const std::string& k : f.keys())
        if (k != "general.alignment") w2.set(k, *f.find(k));
      GgufShards s(a.draft);
      for (const TensorInfo& t : f.tensors()) w2.add_tensor(t.name, t.shape(), t.type, s.read_tensor(*s.find(t.name)));
      w2.add_tensor("conf_proj.bias", {1}, TensorType::kF32, encode_values({x}, TensorType::kF32));
      const std::string bp = dir.file("bias.gguf");
      w2.write_file(bp);
      const std::string be = error_of([&] { GgufWeights gw(a.main[0], {}, bp); });
      if (x == 0.0f) CHECK(be.empty());
      else CHECK(be.find("'conf_proj.bias' is not zero") != std::string::npos);
    }
  }
  SUBCASE("the ds4 family under the forks' key spellings") {
    // fireworm71's deepseek4.dspark_* keys instead of dspark.*
    GgufFile f(ds4);
    GgufWriter w(f.alignment());
    for (const std::string& k : f.keys()) {
      if (k == "general.alignment") continue;
      if (k.rfind("dspark.", 0) == 0 && k != "dspark.target_architecture" && k != "dspark.stage_count") {
        std::string n = k.substr(7);
        if (n == "expert_count") n = "n_routed_experts";
        if (n == "expert_used_count") n = "num_experts_per_tok";
        w.set("deepseek4.dspark_" + n, *f.find(k));
      } else if (k.rfind("dspark.", 0) != 0) {
        w.set(k, *f.find(k));
      }
    }
    GgufShards s(ds4);
    for (const TensorInfo& t : f.tensors()) w.add_tensor(t.name, t.shape(), t.type, s.read_tensor(*s.find(t.name)));
    const std::string p = dir.file("fireworm.gguf");
    w.write_file(p);
    GgufWeights gw(a.main[0], {}, p);
    CHECK(gw.config().dspark_target_layer_ids == g.config.dspark_target_layer_ids);
    CHECK(gw.config().n_mtp_layers == 3);
    CHECK(gw.config().dspark_active_experts() == g.config.dspark_active_experts());
  }
}

}  // namespace test_gguf_dspark
