// Safetensors: the shared tiny fp8 checkpoint read tensor by tensor (config.json against the
// golden's fixture config, the golden's spot checks against the loaded values), a round trip
// through the writer (the bf16 tiny golden's model: same tensors, same captures bit for bit),
// streamed experts (cache smaller than one layer) and row-read engram over safetensors against
// resident, and one row per malformed input, each error naming the file and the tensor.
#include <doctest/doctest.h>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include "ds41/ds41.hpp"
#include "ds41/testing/golden_run.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/io/safetensors_writer.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "temp_dir.hpp"

namespace test_safetensors {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
namespace fs = std::filesystem;
namespace st = ds41::safetensors;

namespace {

const std::string kCkpt = DS41_GOLDEN_DIR "/ds41_tiny_fp8_ckpt";

/// A temporary directory of this test binary (tests/temp_dir.hpp).
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-st") {}
};
using testing::error_of;

const golden::Golden& fp8_golden() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json");
  return g;
}
const golden::Golden& bf16_golden() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  return g;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), b.size());
}
void write_text(const std::string& path, const std::string& s) { std::ofstream(path, std::ios::binary) << s; }
std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

/// A safetensors file from a header text and `data` bytes of payload.
std::vector<uint8_t> st_file(const std::string& header, size_t data, uint64_t len_override = 0) {
  std::vector<uint8_t> b(8 + header.size() + data, 0);
  const uint64_t n = len_override ? len_override : header.size();
  for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
  if (!header.empty()) std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void check_same_config(const ModelConfig& a, const ModelConfig& b) {
  CHECK(a.max_seq_len == b.max_seq_len);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.dim == b.dim);
  CHECK(a.moe_inter_dim == b.moe_inter_dim);
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.n_heads == b.n_heads);
  CHECK(a.n_routed_experts == b.n_routed_experts);
  CHECK(a.n_shared_experts == b.n_shared_experts);
  CHECK(a.n_activated_experts == b.n_activated_experts);
  CHECK(a.score_func == b.score_func);
  CHECK(a.gate_temp == b.gate_temp);
  CHECK(a.norm_topk_prob == b.norm_topk_prob);
  CHECK(a.route_scale == b.route_scale);
  CHECK(a.swiglu_limit == b.swiglu_limit);
  CHECK(a.q_lora_rank == b.q_lora_rank);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.rope_head_dim == b.rope_head_dim);
  CHECK(a.norm_eps == b.norm_eps);
  CHECK(a.o_groups == b.o_groups);
  CHECK(a.o_lora_rank == b.o_lora_rank);
  CHECK(a.window_size == b.window_size);
  CHECK(a.compress_ratios == b.compress_ratios);
  CHECK(a.kv_source_layers == b.kv_source_layers);
  CHECK(a.index_source_layers == b.index_source_layers);
  CHECK(a.compress_rope_theta == b.compress_rope_theta);
  CHECK(a.original_seq_len == b.original_seq_len);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rope_factor == b.rope_factor);
  CHECK(a.beta_fast == b.beta_fast);
  CHECK(a.beta_slow == b.beta_slow);
  CHECK(a.index_n_heads == b.index_n_heads);
  CHECK(a.index_head_dim == b.index_head_dim);
  CHECK(a.index_topk == b.index_topk);
  CHECK(a.candidate_source_layer == b.candidate_source_layer);
  CHECK(a.candidate_topk_blocks == b.candidate_topk_blocks);
  CHECK(a.candidate_block_size == b.candidate_block_size);
  CHECK(a.hc_mult == b.hc_mult);
  CHECK(a.hc_sinkhorn_iters == b.hc_sinkhorn_iters);
  CHECK(a.hc_eps == b.hc_eps);
  CHECK(a.engram_layer_ids == b.engram_layer_ids);
  CHECK(a.engram_num_embeddings == b.engram_num_embeddings);
  CHECK(a.engram_max_ngram_size == b.engram_max_ngram_size);
  CHECK(a.engram_n_heads == b.engram_n_heads);
  CHECK(a.engram_head_dim == b.engram_head_dim);
  CHECK(a.engram_pad_id == b.engram_pad_id);
  CHECK(a.engram_compressed_vocab_size == b.engram_compressed_vocab_size);
  CHECK(a.engram.token_map == b.engram.token_map);
  CHECK(a.engram.pad_id == b.engram.pad_id);
  CHECK(a.engram.primes == b.engram.primes);
  CHECK(a.engram.offsets == b.engram.offsets);
  CHECK(a.engram.multipliers == b.engram.multipliers);
}

SafetensorsWeights open_fp8(const std::string& dir = kCkpt) {
  return SafetensorsWeights(dir, fp8_golden().config.max_seq_len, fp8_golden().config.engram);
}

/// Logits (bits) of a prefill and `n` greedy decode steps.
template <class ModelT>
std::vector<std::vector<float>> logits_run(ModelT& m, const std::vector<int32_t>& prompt, int n) {
  std::vector<std::vector<float>> out;
  StepResult r = m.prefill(prompt);
  out.push_back(r.logits);
  for (int i = 0; i < n; ++i) {
    r = m.decode(r.argmax);
    out.push_back(r.logits);
  }
  m.release();
  return out;
}
bool same_bits(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].size() != b[i].size() || (!a[i].empty() && std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4) != 0))
      return false;
  return true;
}

}  // namespace

TEST_CASE("safetensors: the tiny fp8 checkpoint's config.json is the golden's fixture config") {
  std::vector<std::string> log;
  SafetensorsWeights w(kCkpt, fp8_golden().config.max_seq_len, fp8_golden().config.engram,
                       [&](const std::string& s) { log.push_back(s); });
  check_same_config(w.config(), fp8_golden().config);
  CHECK(w.shards().shard_count() == 2);
  CHECK(w.shards().tensors().size() == 495);
  CHECK(!log.empty());
  // without the engram hash parameters the engram layers cannot be built
  const std::string e = error_of([&] { SafetensorsWeights x(kCkpt, 64); });
  CHECK(e.find(kCkpt + "/config.json") != std::string::npos);
  CHECK(e.find("engram hash parameters") != std::string::npos);
}

TEST_CASE("safetensors: tensors load in the library's formats, with the golden's spot-check values") {
  const SafetensorsWeights w = open_fp8();
  const ModelConfig& c = w.config();
  const HostTensor emb = w.load("embed.weight", {c.vocab_size, c.dim});
  CHECK(emb.format == WeightFormat::kBF16);
  const HostTensor wq = w.load("layers.0.attn.wq_a.weight", {c.q_lora_rank, c.dim});
  CHECK(wq.format == WeightFormat::kFp8Block32);
  CHECK(wq.payload.size() == static_cast<size_t>(c.q_lora_rank * c.dim));
  CHECK(wq.scales.size() == 2);
  const HostTensor ex = w.load("layers.2.ffn.experts.5.w2.weight", {c.dim, c.moe_inter_dim});
  CHECK(ex.format == WeightFormat::kFp4Block32);
  CHECK(ex.payload.size() == static_cast<size_t>(c.dim * c.moe_inter_dim / 2));
  CHECK(ex.scales.size() == static_cast<size_t>(c.dim * c.moe_inter_dim / 32));
  const long hd_g = static_cast<long>(c.n_heads) * c.head_dim / c.o_groups;
  const HostTensor wo = w.load("layers.0.attn.wo_a.weight", {static_cast<long>(c.o_groups) * c.o_lora_rank, hd_g});
  CHECK(wo.format == WeightFormat::kBF16);
  CHECK(w.load("head.weight", {c.vocab_size, c.dim}).format == WeightFormat::kBF16);
  CHECK(w.load("layers.1.attn.compressor.wgate.weight", {c.head_dim, c.dim}).format == WeightFormat::kBF16);
  CHECK(w.load("layers.0.hc_attn_fn", {c.mix_hc(), static_cast<long>(c.hc_mult) * c.dim}).format == WeightFormat::kF32);
  const HostTensor codes = w.load("layers.1.engram.embed.weight", {c.engram_num_embeddings[0], c.engram_head_dim});
  CHECK(codes.format == WeightFormat::kFp8Block32);
  CHECK(codes.scales.empty());
  const HostTensor esc = w.load("layers.1.engram.embed.scale", {c.engram_num_embeddings[0], c.engram_head_dim / 32});
  CHECK(esc.format == WeightFormat::kF32);
  CHECK(!w.has("layers.0.attn.wo_a.bias"));
  CHECK(w.tensors_loaded() > 0);

  // every spot check of the golden (SCHEMA §1.6, §10.2): the loaded value at (row, col) or index
  long checked = 0;
  for (const auto& sc : fp8_golden().spot_checks) {
    const std::string name = sc.at("name").get<std::string>();
    const st::Parts p = w.parts(name);
    const HostTensor t = w.load(name, p.shape);
    const float want = sc.at("value").get<float>();
    float got;
    if (name.find("engram.embed.weight") != std::string::npos) {
      const long row = sc.at("row").get<long>(), col = sc.at("col").get<long>();
      const HostTensor s = w.load(name.substr(0, name.size() - 6) + "scale", {p.shape[0], p.shape[1] / 32});
      got = e4m3_decode(t.payload[row * p.shape[1] + col]) * s.to_f32()[row * (p.shape[1] / 32) + col / 32];
    } else if (sc.contains("row")) {
      got = t.view().at(sc.at("row").get<int>(), sc.at("col").get<int>());
    } else {
      got = t.to_f32().at(sc.at("index").get<long>());
    }
    CHECK_MESSAGE(got == want, name, " ", sc.dump());
    ++checked;
  }
  CHECK(checked == static_cast<long>(fp8_golden().spot_checks.size()));
  CHECK(checked > 50);
}

TEST_CASE("safetensors: streamed experts (3 of 8) and row-read engram give the resident model's logits bit for bit") {
  const SafetensorsWeights w = open_fp8();
  const ModelConfig& c = w.config();
  using HB = HostBackend;
  Model<HB> resident(c, w);
  const auto want = logits_run(resident, fp8_golden().prompt_tokens, 4);
  StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 3});
  REQUIRE(cache.capacity() < c.n_routed_experts);
  Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(c, w, cache);
  const auto got = logits_run(streamed, fp8_golden().prompt_tokens, 4);
  CHECK(same_bits(want, got));
  const ExpertCounters k = cache.counters();
  MESSAGE("streamed: hits ", k.hits, ", misses ", k.misses, ", prefetch hits ", k.prefetch_hits, ", bytes ", k.bytes_read);
  // experts were read when asked for: a miss, or (MoeT queues a layer's experts once it is
  // routed) a prefetch hit
  CHECK(k.misses + k.prefetch_hits > 0);
  CHECK(k.bytes_read > 0);
  // fp4 expert + scale of 32 x 64 (1024 + 64 bytes) twice, 64 x 32 (1024 + 64) once
  CHECK(cache.slices().at(0, 0).parts.size() == 6);
  CHECK(cache.slices().at(0, 0).bytes == 3 * (1024 + 64));
}

TEST_CASE("safetensors: a DSpark checkpoint streamed through a 2-expert cache, the stages' experts (mtp.s) included") {
  const std::string json = DS41_GOLDEN_DIR "/extra/dspark/f_d_s3_b4.json";
  const golden::Golden g = golden::load(json);
  const SafetensorsWeights w(DS41_GOLDEN_DIR "/extra/dspark/f_d_s3_b4_ckpt", g.config.max_seq_len, g.config.engram);
  const ModelConfig& c = w.config();
  REQUIRE(c.has_dspark());
  using HB = HostBackend;
  StreamedExperts<HB>::Cache cache(w, {.capacity_experts = 2});  // below any layer's experts
  REQUIRE(cache.capacity() < std::min(c.n_routed_experts, c.dspark_experts()));
  // the stages after the backbone in the file's slice map: mtp.s.ffn.experts.* as layer n_layers + s
  REQUIRE(cache.slices().layers() == c.n_layers + c.n_mtp_layers);
  for (int s = 0; s < c.n_mtp_layers; ++s) CHECK(cache.slices().experts(c.n_layers + s) == c.dspark_experts());
  Model<HB, StreamedExperts<HB>, RowReaderTable<HB>> streamed(c, w, cache);
  REQUIRE(streamed.has_draft_head());
  long passed = 0, draft = 0;
  for (const auto& rep : golden::run(g, streamed))
    for (const auto& r : rep.results) {
      CHECK_MESSAGE(r.pass, r.name);
      CHECK_MESSAGE(r.exact, r.name);
      passed += r.pass;
      draft += r.pass && golden::is_draft_capture(r.name);
    }
  CHECK(passed > 500);
  CHECK(draft > 0);
  // every stage's experts came through the cache (none resident)
  const ExpertCounters k = cache.counters();
  for (int s = 0; s < c.n_mtp_layers; ++s)
    CHECK_MESSAGE(k.layer_hits.at(c.n_layers + s) + k.layer_misses.at(c.n_layers + s) > 0, "stage ", s);
  MESSAGE("f_d_s3_b4 from its checkpoint, streamed: ", passed, " captures bit-identical, ", draft, " from drafts");
}

TEST_CASE("safetensors: the bf16 tiny golden written as a checkpoint reads back bit for bit and runs the same") {
  TempDir dir;
  const golden::Golden& g = bf16_golden();
  const WeightSet ws = golden::regenerate_weights(g);
  const std::string ck = dir.file("ckpt");
  const auto paths = st::write_checkpoint(g.config, ws, ck, 3);
  REQUIRE(paths.size() == 3);
  SafetensorsWeights w(ck, g.config.max_seq_len, g.config.engram);
  check_same_config(w.config(), g.config);
  for (const auto& entry : ws.all()) {  // not a structured binding: clang 14 cannot capture one (CHECK_MESSAGE)
    const std::string& name = entry.first;
    const HostTensor& t = entry.second;
    const HostTensor r = w.load(name, t.shape);
    if (name.find("engram.embed.weight") != std::string::npos) {  // e4m3 code values → codes
      REQUIRE(t.format == WeightFormat::kF32);
      const std::vector<float> v = t.to_f32();
      std::vector<uint8_t> codes(v.size());
      for (size_t i = 0; i < v.size(); ++i) codes[i] = e4m3_encode(v[i]);
      CHECK_MESSAGE(r.payload == codes, name);
      continue;
    }
    CHECK_MESSAGE(r.format == t.format, name);
    CHECK_MESSAGE(r.payload == t.payload, name);
    CHECK_MESSAGE(r.scales == t.scales, name);
  }
  using HB = HostBackend;
  Model<HB> from_set(g.config, ws);
  Model<HB> from_ckpt(w.config(), w);
  CHECK(same_bits(logits_run(from_set, g.prompt_tokens, 3), logits_run(from_ckpt, g.prompt_tokens, 3)));
  long passed = 0, failed = 0;
  for (const auto& rep : golden::run(g, from_ckpt))
    for (const auto& r : rep.results) (r.pass ? passed : failed)++;
  CHECK(failed == 0);
  CHECK(passed == 1006);

  // fp8 / fp4 tensors round-trip through the writer too (the shared checkpoint's, rewritten)
  const SafetensorsWeights f = open_fp8();
  WeightSet q;
  for (const auto& [name, info] : f.shards().tensors()) {
    if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0 && name.find("engram") == std::string::npos)
      continue;  // written with its weight
    if (name.find("wo_a") != std::string::npos) continue;  // bf16 after loading, by design
    q.put(name, f.load(name, f.parts(name).shape));
  }
  const std::string ck2 = dir.file("ckpt8");
  st::write_checkpoint(f.config(), q, ck2, 2);
  SafetensorsWeights f2(ck2, f.config().max_seq_len, f.config().engram);
  for (const auto& entry : q.all()) {
    const std::string& name = entry.first;
    const HostTensor& t = entry.second;
    const HostTensor r = f2.load(name, t.shape);
    CHECK_MESSAGE(r.format == t.format, name);
    CHECK_MESSAGE(r.payload == t.payload, name);
    CHECK_MESSAGE(r.scales == t.scales, name);
  }
  const nlohmann::json cfg = nlohmann::json::parse(read_text(ck2 + "/config.json"));
  CHECK(cfg.at("dtype") == "fp8");
  CHECK(cfg.at("expert_dtype") == "fp4");
}

TEST_CASE("safetensors: a single model.safetensors without an index is read too") {
  TempDir dir;
  const golden::Golden& g = bf16_golden();
  const WeightSet ws = golden::regenerate_weights(g);
  const std::string ck = dir.file("one");
  st::write_checkpoint(g.config, ws, ck, 1);
  fs::rename(ck + "/model-00001-of-00001.safetensors", ck + "/model.safetensors");
  fs::remove(ck + "/model.safetensors.index.json");
  SafetensorsWeights w(ck, g.config.max_seq_len, g.config.engram);
  CHECK(w.shards().shard_count() == 1);
  CHECK(w.shards().index_path().empty());
  CHECK(w.load("norm.weight", {g.config.dim}).payload == ws.at("norm.weight", {g.config.dim}).payload);
}

TEST_CASE("safetensors: malformed files raise errors naming the file and the tensor") {
  TempDir dir;
  struct Row {
    const char* what;
    std::vector<uint8_t> bytes;
    std::vector<std::string> expect;  // substrings besides the file's path
  };
  const std::string ok_t = R"("t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})";
  const std::vector<Row> rows = {
      {"truncated header length", {1, 2, 3}, {"truncated header"}},
      {"header length 0", st_file("", 16), {"header length is 0"}},
      {"header length huge", st_file("{}", 16, 1ull << 40), {"header length 1099511627776 is larger"}},
      {"header past the end", st_file("{}", 0, 4096), {"truncated header: header length 4096"}},
      {"header not JSON", st_file("{\"t\": [", 8), {"header is not JSON"}},
      {"header not an object", st_file("[1, 2]", 8), {"header is not a JSON object"}},
      {"unknown dtype", st_file(R"({"t": {"dtype": "F7", "shape": [2], "data_offsets": [0, 8]}})", 8),
       {"tensor 't'", "unknown dtype \"F7\""}},
      {"negative dim", st_file(R"({"t": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8),
       {"tensor 't'", "not a list of non-negative integers"}},
      {"shape not a list", st_file(R"({"t": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", 8),
       {"tensor 't'", "'shape'"}},
      {"offsets begin > end", st_file(R"({"t": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", 8),
       {"tensor 't'", "begin > end"}},
      {"offsets not [b, e]", st_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", 8),
       {"tensor 't'", "'data_offsets'"}},
      {"offsets lying about the size", st_file(R"({"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 6]}})", 8),
       {"tensor 't'", "hold 6 bytes, but F32 [2] needs 8"}},
      {"offsets past the end", st_file("{" + ok_t + "}", 4), {"tensor 't'", "past the end of the file"}},
      {"overlapping tensors",
       st_file("{" + ok_t + R"(, "u": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12),
       {"tensor 'u' overlaps tensor 't'"}},
      {"duplicated name", st_file("{" + ok_t + ", " + ok_t + "}", 8), {"tensor 't' appears twice"}},
  };
  for (const Row& r : rows) {
    const std::string p = dir.file(std::string("bad-") + std::to_string(&r - rows.data()) + ".safetensors");
    write_bytes(p, r.bytes);
    const std::string e = error_of([&] { st::SafetensorsFile f(p); });
    const std::string what = r.what;
    MESSAGE(what, " -> ", e);
    CHECK_MESSAGE(e.find(p) != std::string::npos, what, ": ", e);
    for (const std::string& s : r.expect) CHECK_MESSAGE(e.find(s) != std::string::npos, what, ": ", e);
  }
  CHECK_NOTHROW(st::SafetensorsFile(([&] {
    const std::string p = dir.file("good.safetensors");
    write_bytes(p, st_file("{" + ok_t + "}", 8));
    return p;
  })()));
}

TEST_CASE("safetensors: malformed checkpoints raise errors naming the file and the tensor") {
  TempDir dir;
  // checkpoint-level faults, each on a fresh copy of the shared checkpoint
  int n = 0;
  auto copy = [&] {
    const std::string d = dir.file("ck" + std::to_string(n++));
    fs::copy(kCkpt, d, fs::copy_options::recursive);
    for (const auto& e : fs::directory_iterator(d)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
    return d;
  };
  const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
  /// patches one tensor's header entry in place (the same length: the header is re-padded with spaces)
  auto patch_header = [&](const std::string& path, const std::string& from, const std::string& to) {
    std::vector<uint8_t> b = read_bytes(path);
    std::string s(b.begin(), b.end());
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    REQUIRE(to.size() <= from.size());
    s.replace(at, from.size(), to + std::string(from.size() - to.size(), ' '));
    write_bytes(path, {s.begin(), s.end()});
  };
  auto fp8 = [&](const std::string& d) {
    return SafetensorsWeights(d, fp8_golden().config.max_seq_len, fp8_golden().config.engram);
  };
  auto model = [&](const std::string& d) {
    const SafetensorsWeights w = fp8(d);
    Model<HostBackend> m(w.config(), w);
  };
  SUBCASE("missing checkpoint directory") {
    const std::string d = dir.file("nothing-here");
    const std::string e = error_of([&] { fp8(d); });
    CHECK(e.find(d) != std::string::npos);
    CHECK(e.find("no such checkpoint directory") != std::string::npos);
  }
  SUBCASE("missing shard") {
    const std::string d = copy();
    fs::remove(d + "/" + s2);
    const std::string e = error_of([&] { fp8(d); });
    CHECK(e.find(d + "/model.safetensors.index.json") != std::string::npos);
    CHECK(e.find("shard missing: " + d + "/" + s2) != std::string::npos);
    CHECK(e.find("tensor '") != std::string::npos);
  }
  SUBCASE("weight_map names a tensor its shard lacks") {
    const std::string d = copy();
    std::string idx = read_text(d + "/model.safetensors.index.json");
    idx.replace(idx.find("\"weight_map\": {") + 15, 0, "\"layers.0.bogus.weight\": \"" + s1 + "\", ");
    write_text(d + "/model.safetensors.index.json", idx);
    const std::string e = error_of([&] { fp8(d); });
    CHECK(e.find(d + "/" + s1) != std::string::npos);
    CHECK(e.find("missing tensor 'layers.0.bogus.weight'") != std::string::npos);
  }
  SUBCASE("a tensor in the shard the weight_map does not name") {
    const std::string d = copy();
    std::string idx = read_text(d + "/model.safetensors.index.json");
    const std::string from = "\"norm.weight\": \"" + s2 + "\"";
    REQUIRE(idx.find(from) != std::string::npos);
    idx.replace(idx.find(from), from.size(), "\"norm.weight\": \"" + s1 + "\"");
    write_text(d + "/model.safetensors.index.json", idx);
    const std::string e = error_of([&] { fp8(d); });
    CHECK(e.find(d + "/" + s2) != std::string::npos);
    CHECK(e.find("tensor 'norm.weight' is in this shard, but the weight_map") != std::string::npos);
  }
  SUBCASE("missing config.json") {
    const std::string d = copy();
    fs::remove(d + "/config.json");
    const std::string e = error_of([&] { fp8(d); });
    CHECK(e.find(d + "/config.json") != std::string::npos);
    CHECK(e.find("cannot open") != std::string::npos);
  }
  SUBCASE("config.json with a wrong type, a bad dtype") {
    const std::string d = copy();
    std::string cfg = read_text(d + "/config.json");
    const std::string good = cfg;
    cfg.replace(cfg.find("\"dim\": 64"), 9, "\"dim\": \"64\"");
    write_text(d + "/config.json", cfg);
    std::string e = error_of([&] { fp8(d); });
    CHECK(e.find(d + "/config.json") != std::string::npos);
    CHECK(e.find("key 'dim' = \"64\" is not an integer") != std::string::npos);
    cfg = good;
    cfg.replace(cfg.find("\"dtype\": \"fp8\""), 14, "\"dtype\": \"fp16\"");
    write_text(d + "/config.json", cfg);
    e = error_of([&] { fp8(d); });
    CHECK(e.find("key 'dtype' = \"fp16\", expected \"fp8\" or \"bf16\"") != std::string::npos);
  }
  SUBCASE("shape disagreeing with config.json") {
    const std::string d = copy();
    std::string cfg = read_text(d + "/config.json");
    cfg.replace(cfg.find("\"q_lora_rank\": 32"), 17, "\"q_lora_rank\": 64");
    write_text(d + "/config.json", cfg);
    const std::string e = error_of([&] { model(d); });
    CHECK(e.find(d + "/" + s1) != std::string::npos);
    CHECK(e.find("tensor 'layers.0.attn.wq_a.weight'") != std::string::npos);
    CHECK(e.find("config.json implies [64, 64]") != std::string::npos);
  }
  SUBCASE("wrong dtype of a scale") {
    const std::string d = copy();
    patch_header(d + "/" + s1, R"("layers.0.attn.wq_a.scale":{"dtype":"F8_E8M0")",
                 R"("layers.0.attn.wq_a.scale":{"dtype":"U8")");
    const std::string e = error_of([&] { model(d); });
    CHECK(e.find(d + "/" + s1) != std::string::npos);
    CHECK(e.find("tensor 'layers.0.attn.wq_a.scale': dtype U8, expected F8_E8M0") != std::string::npos);
  }
  SUBCASE("NaN e8m0 scale") {
    const std::string d = copy();
    const SafetensorsWeights w = fp8(d);
    const st::TensorInfo* t = w.shards().find("layers.0.attn.wq_a.scale");
    REQUIRE(t);
    std::vector<uint8_t> b = read_bytes(d + "/" + s1);
    b[t->offset + 1] = 0xFF;
    write_bytes(d + "/" + s1, b);
    const std::string e = error_of([&] { model(d); });
    CHECK(e.find(d + "/" + s1) != std::string::npos);
    CHECK(e.find("tensor 'layers.0.attn.wq_a.scale': scale 1 is the F8_E8M0 NaN byte 0xFF") != std::string::npos);
  }
  SUBCASE("NaN e8m0 scale of an engram row read on demand") {
    const std::string d = copy();
    const SafetensorsWeights w0 = fp8(d);
    const st::TensorInfo* t = w0.shards().find("layers.1.engram.embed.scale");
    REQUIRE(t);
    std::vector<uint8_t> b = read_bytes(d + "/" + s1);
    for (uint64_t i = 0; i < t->bytes; ++i) b[t->offset + i] = 0xFF;
    write_bytes(d + "/" + s1, b);
    const SafetensorsWeights w = fp8(d);
    using HB = HostBackend;
    const std::string e = error_of([&] {
      Model<HB, ResidentExperts<HB>, RowReaderTable<HB>> m(w.config(), w);
      m.prefill(fp8_golden().prompt_tokens);
    });
    CHECK(e.find(d + "/" + s1) != std::string::npos);
    CHECK(e.find("tensor 'layers.1.engram.embed.scale'") != std::string::npos);
    CHECK(e.find("NaN byte 0xFF") != std::string::npos);
  }
}

TEST_CASE("safetensors: MTP and vision tensors are skipped with a note, and n_mtp_layers is honoured") {
  TempDir dir;
  const golden::Golden& g = bf16_golden();
  WeightSet ws = golden::regenerate_weights(g);
  ws.put("mtp.0.attn_norm.weight", HostTensor::from_f32({g.config.dim}, std::vector<float>(g.config.dim, 1.0f)));
  ws.put("vision.patch_embed.weight", HostTensor::from_f32({4}, std::vector<float>(4, 0.5f)));
  const std::string ck = dir.file("mtp");
  st::write_checkpoint(g.config, ws, ck, 2);
  nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(read_text(ck + "/config.json"));
  cfg["n_mtp_layers"] = 1;
  cfg["compress_ratios"].push_back(0);
  write_text(ck + "/config.json", cfg.dump(4));
  std::vector<std::string> log;
  SafetensorsWeights w(ck, g.config.max_seq_len, g.config.engram, [&](const std::string& s) { log.push_back(s); });
  std::string all;
  for (const std::string& s : log) all += s + "\n";
  CHECK_MESSAGE(all.find("MTP: 1 layers without dspark_block_size (mtp.* not loaded)") != std::string::npos, all);
  CHECK_MESSAGE(all.find("2 mtp/vision tensors are not loaded") != std::string::npos, all);
  CHECK(!w.has("mtp.0.attn_norm.weight"));
  CHECK(w.config().compress_ratios == g.config.compress_ratios);
  Model<HostBackend> m(w.config(), w);
  Model<HostBackend> ref(g.config, ws);
  CHECK(same_bits(logits_run(m, g.prompt_tokens, 1), logits_run(ref, g.prompt_tokens, 1)));
  // compress_ratios must cover the MTP layers too
  cfg["compress_ratios"].erase(cfg["compress_ratios"].size() - 1);
  write_text(ck + "/config.json", cfg.dump(4));
  const std::string e = error_of([&] { SafetensorsWeights x(ck, g.config.max_seq_len, g.config.engram); });
  CHECK(e.find(ck + "/config.json") != std::string::npos);
  CHECK(e.find("'compress_ratios' has 6 entries, expected n_layers + n_mtp_layers = 7") != std::string::npos);
}

}  // namespace test_safetensors
