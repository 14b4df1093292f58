// The release's two config forms (tests/data/release_config: its config.json, HF form, and its
// inference/config.json, ModelArgs form; README there for provenance): each alone and both
// together give the released shapes; one changed value in either is refused naming both files and
// both keys; a wrong quantization_config / rope_scaling is refused naming the value; and a
// checkpoint written in the release's layout from the tiny fp8 golden's model reads back with the
// same config and tensors and runs the golden bit for bit.
#include <doctest/doctest.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include "ds41/ds41.hpp"
#include "ds41/testing/golden_run.hpp"
#include "ds41/io/hf_config.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/io/safetensors_writer.hpp"
#include "temp_dir.hpp"

namespace test_hf_config {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
namespace fs = std::filesystem;
namespace st = ds41::safetensors;
using testing::error_of;

namespace {

const std::string kRelease = DS41_RELEASE_CONFIG_DIR;  // config.json + inference/config.json

struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("ds41-hfcfg") {}
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return {std::istreambuf_iterator<char>(in), {}};
}
void write_text(const std::string& path, const std::string& s) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << s;
}

/// A copy of the release's config files in `dir` (`which`: "both", "hf", "args").
std::string release_copy(const TempDir& t, const std::string& name, const std::string& which = "both") {
  const std::string d = t.file(name);
  if (which != "args") write_text(d + "/config.json", read_text(kRelease + "/config.json"));
  if (which != "hf") write_text(d + "/inference/config.json", read_text(kRelease + "/inference/config.json"));
  return d;
}

/// Engram hash parameters of the released shapes' sizes (the values do not matter to the config:
/// only their counts are validated).
st::CheckpointParams release_params() {
  EngramHashParams e;
  e.token_map.assign(129280, 0);
  e.pad_id = 2;
  const long cols = 3 * 8;  // (max_ngram 4 - 1) * 8 heads
  for (long l = 0; l < 2; ++l)
    for (long c = 0; c < cols; ++c) {
      e.primes.push_back(16000057);
      e.offsets.push_back(c * 16000057);
    }
  e.multipliers.assign(2 * 4, 1);
  return {4096, e};
}

/// The released shapes (RELEASE.md, docs/: 40 layers, dim 5120, 384 experts top-6, window 128).
void check_release_shapes(const ModelConfig& c) {
  CHECK(c.vocab_size == 129280);
  CHECK(c.dim == 5120);
  CHECK(c.moe_inter_dim == 2304);
  CHECK(c.n_layers == 40);
  // DSpark: 3 stages of block 5 over layers 37-39, 128 experts top-3, Markov rank 256
  CHECK(c.n_mtp_layers == 3);
  CHECK(c.dspark_block_size == 5);
  CHECK(c.dspark_noise_token_id == 128799);
  CHECK(c.dspark_target_layer_ids == std::vector<int>{37, 38, 39});
  CHECK(c.dspark_markov_rank == 256);
  CHECK(c.dspark_experts() == 128);
  CHECK(c.dspark_active_experts() == 3);
  CHECK(c.has_dspark());
  CHECK(c.n_heads == 64);
  CHECK(c.head_dim == 512);
  CHECK(c.rope_head_dim == 64);
  CHECK(c.q_lora_rank == 1280);
  CHECK(c.o_lora_rank == 1024);
  CHECK(c.o_groups == 8);
  CHECK(c.n_routed_experts == 384);
  CHECK(c.n_shared_experts == 1);
  CHECK(c.n_activated_experts == 6);
  CHECK(c.score_func == ScoreFunc::kSqrtSoftplus);
  CHECK(c.route_scale == 1.5);
  CHECK(c.swiglu_limit == 10.0);
  CHECK(c.norm_eps == 1e-20);
  CHECK(c.window_size == 128);
  // 43 ratios in both files (3 DSpark stages); the backbone keeps its 40
  const std::vector<int> want_ratios = [] {
    std::vector<int> r = {0, 0};
    r.insert(r.end(), 18, 2);
    r.insert(r.end(), 20, 1);
    return r;
  }();
  CHECK(c.compress_ratios == want_ratios);
  CHECK(c.kv_source_layers == std::vector<int>{2, 8, 14, 20});
  CHECK(c.index_source_layers == std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36});
  CHECK(c.index_n_heads == 32);
  CHECK(c.index_head_dim == 128);
  CHECK(c.index_topk == 512);
  CHECK(c.candidate_source_layer == 20);
  CHECK(c.candidate_topk_blocks == 2048);
  CHECK(c.candidate_block_size == 8);
  CHECK(c.rope_theta == 10000.0);
  CHECK(c.compress_rope_theta == 160000.0);
  CHECK(c.original_seq_len == 65536);
  CHECK(c.rope_factor == 16.0);
  CHECK(c.beta_fast == 32.0);
  CHECK(c.beta_slow == 1.0);
  CHECK(c.hc_mult == 4);
  CHECK(c.hc_sinkhorn_iters == 20);
  CHECK(c.hc_eps == 1e-6);
  CHECK(c.engram_layer_ids == std::vector<int>{1, 14});
  CHECK(c.engram_num_embeddings == std::vector<long>{384006168, 384016682});
  CHECK(c.engram_max_ngram_size == 4);
  CHECK(c.engram_n_heads == 8);
  CHECK(c.engram_head_dim == 256);
  CHECK(c.engram_pad_id == 2);
  CHECK(c.engram_compressed_vocab_size == 99092);
  CHECK(c.max_seq_len == 4096);
}

/// Every field of two ModelConfigs, the engram hash parameters included.
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

std::string all_notes(const std::vector<std::string>& n) {
  std::string s;
  for (const std::string& x : n) s += x + "\n";
  return s;
}

/// Replaces the one occurrence of `from` in file `path` by `to`.
void patch(const std::string& path, const std::string& from, const std::string& to) {
  std::string s = read_text(path);
  const size_t at = s.find(from);
  REQUIRE_MESSAGE(at != std::string::npos, from);
  REQUIRE_MESSAGE(s.find(from, at + 1) == std::string::npos, from);
  s.replace(at, from.size(), to);
  write_text(path, s);
}

}  // namespace

TEST_CASE("hf config: the release's two config files parse, agree and give the released shapes") {
  TempDir t;
  std::vector<std::string> notes;
  const st::CheckpointConfig both = st::read_checkpoint_dir_config(kRelease, release_params(), &notes);
  check_release_shapes(both.model);
  CHECK(both.files == std::vector<std::string>{kRelease + "/config.json", kRelease + "/inference/config.json"});
  CHECK(both.generation.bos_token_id == 0);
  CHECK(both.generation.eos_token_ids == std::vector<long>{1});
  CHECK(both.generation.is_eos(1));
  CHECK(!both.generation.is_eos(0));
  CHECK(both.generation.pad_token_id == 2);
  CHECK(both.generation.max_position_embeddings == 1048576);
  const std::string n = all_notes(notes);
  // what ds41 reads past is listed once per file, under the names the file uses
  CHECK(n.find("config " + kRelease + "/config.json: not modelled by ds41, read past: ") != std::string::npos);
  for (const char* k : {"vision_config", "image_token_id", "architectures", "transformers_version", "dtype",
                        "text_config.max_position_embeddings",
                        "text_config.topk_method"})
    CHECK_MESSAGE(n.find(k) != std::string::npos, k);
  CHECK(n.find("engram_vocab_size") == std::string::npos);  // read: the engram primes' search start
  CHECK(both.model.engram_vocab_size == 16000000);
  CHECK(n.find("config " + kRelease + "/inference/config.json: not modelled by ds41, read past: ") != std::string::npos);
  CHECK(n.find("vision_n_layers") != std::string::npos);
  CHECK(n.find("dspark_") == std::string::npos);  // modelled (the draft head), not read past
  CHECK(n.find("unknown keys") == std::string::npos);  // the release has none
  CHECK(n.find("DSpark: 3 stages (mtp.*), block 5, 3 target layers") != std::string::npos);
  CHECK(n.find("vision: 32 ViT layers skipped") != std::string::npos);

  SUBCASE("each form alone") {
    for (const char* which : {"hf", "args"}) {
      const std::string d = release_copy(t, which, which);
      const st::CheckpointConfig one = st::read_checkpoint_dir_config(d, release_params());
      check_release_shapes(one.model);
      CHECK(one.files.size() == 1);
      // only the HF form states the token ids
      CHECK(one.generation.bos_token_id.has_value() == (std::string(which) == "hf"));
      CHECK(one.generation.eos_token_ids.empty() == (std::string(which) == "args"));
    }
  }
  SUBCASE("the HF form alone, as one file") {
    std::vector<std::string> n1;
    const ModelConfig c = st::read_checkpoint_config(kRelease + "/config.json", release_params(), &n1);
    check_release_shapes(c);
  }
}

TEST_CASE("hf config: a value the two files disagree on is refused, naming both files and both keys") {
  TempDir t;
  struct Row {
    const char* file;  // which file is changed
    const char* from;
    const char* to;
    const char* expect;  // the message after "config: "
  };
  const std::vector<Row> rows = {
      {"config.json", "\"hidden_size\": 5120", "\"hidden_size\": 4096",
       "{D}/config.json text_config.hidden_size = 4096 disagrees with {D}/inference/config.json dim = 5120"},
      {"inference/config.json", "\"n_activated_experts\": 6", "\"n_activated_experts\": 8",
       "{D}/config.json text_config.num_experts_per_tok = 6 disagrees with {D}/inference/config.json n_activated_experts = 8"},
      {"config.json", "\"factor\": 16", "\"factor\": 8",
       "{D}/config.json text_config.rope_scaling.factor = 8 disagrees with {D}/inference/config.json rope_factor = 16"},
      {"config.json", "\"sliding_window\": 128", "\"sliding_window\": 256",
       "text_config.sliding_window = 256 disagrees with {D}/inference/config.json window_size = 128"},
      {"config.json", "\"engram_pad_token_id\": 2", "\"engram_pad_token_id\": 3",
       "text_config.engram_pad_token_id = 3 disagrees with {D}/inference/config.json engram_pad_id = 2"},
      // fields ds41 does not model are compared too: the two files must describe one model
      {"inference/config.json", "\"vision_dim\": 1024", "\"vision_dim\": 1280",
       "vision_config.hidden_size = 1024 disagrees with {D}/inference/config.json vision_dim = 1280"},
      {"config.json", "\"expert_dtype\": \"fp4\"", "\"expert_dtype\": null",
       "quantization_config.expert_dtype = null disagrees with {D}/inference/config.json expert_dtype = \"fp4\""},
      {"config.json", "      \"original_max_position_embeddings\": 65536\n    },", "      \"original_max_position_embeddings\": 0\n    },",
       "text_config.rope_scaling.original_max_position_embeddings = 0 disagrees with {D}/inference/config.json original_seq_len = 65536"},
  };
  for (const Row& r : rows) {
    const std::string d = release_copy(t, "d" + std::to_string(&r - rows.data()));
    patch(d + "/" + r.file, r.from, r.to);
    const std::string e = error_of([&] { st::read_checkpoint_dir_config(d, release_params()); });
    std::string want = r.expect;
    for (size_t at; (at = want.find("{D}")) != std::string::npos;) want.replace(at, 3, d);
    CHECK_MESSAGE(e.find(want) != std::string::npos, r.from, "\n  got:  ", e, "\n  want: ", want);
    CHECK(e.find(d + "/config.json") != std::string::npos);
    CHECK(e.find(d + "/inference/config.json") != std::string::npos);
  }
  SUBCASE("rope_scaling null means no YaRN, which disagrees with original_seq_len 65536") {
    const std::string d = release_copy(t, "null-rope");
    std::string s = read_text(d + "/config.json");
    const size_t a = s.find("\"rope_scaling\": {"), b = s.find('}', a);
    s.replace(a, b + 1 - a, "\"rope_scaling\": null");
    write_text(d + "/config.json", s);
    const std::string e = error_of([&] { st::read_checkpoint_dir_config(d, release_params()); });
    CHECK_MESSAGE(e.find("text_config.rope_scaling (null) -> original_seq_len = 0 disagrees with " + d +
                         "/inference/config.json original_seq_len = 65536") != std::string::npos, e);
    // alone, it loads without YaRN (model.py: original_seq_len 0 turns it off)
    fs::remove(d + "/inference/config.json");
    const st::CheckpointConfig c = st::read_checkpoint_dir_config(d, release_params());
    CHECK(c.model.original_seq_len == 0);
  }
}

TEST_CASE("hf config: quantization_config, rope_scaling, constants and types outside what ds41 reads are refused") {
  TempDir t;
  struct Row {
    const char* from;
    const char* to;
    const char* expect;
  };
  const std::vector<Row> rows = {
      {"\"quant_method\": \"fp8\"", "\"quant_method\": \"exl3\"",
       "quantization_config.quant_method = \"exl3\", ds41 reads only \"fp8\""},
      {"\"scale_fmt\": \"ue8m0\"", "\"scale_fmt\": \"fp32\"", "quantization_config.scale_fmt = \"fp32\", ds41 reads only \"ue8m0\""},
      {"\"scale_fmt\": \"ue8m0\",", "", "quantization_config has no 'scale_fmt'"},
      {"\"weight_block_size\": [\n      32,\n      32\n    ]", "\"weight_block_size\": [128, 128]",
       "quantization_config.weight_block_size = [128,128], ds41 reads only [32,32]"},
      {"\"activation_scheme\": \"dynamic\"", "\"activation_scheme\": \"static\"", "quantization_config.activation_scheme = \"static\""},
      {"\"rope_type\": \"yarn\"", "\"rope_type\": \"linear\"", "text_config.rope_scaling.rope_type = \"linear\", ds41 implements only \"yarn\""},
      {"\"num_key_value_heads\": 1", "\"num_key_value_heads\": 8", "text_config.num_key_value_heads = 8, ds41 models 1"},
      {"\"model_type\": \"deepseek_v41\"", "\"model_type\": \"deepseek_v3\"", "model_type = \"deepseek_v3\", expected \"deepseek_v41\""},
      {"\"hidden_size\": 5120", "\"hidden_size\": \"5120\"", "key 'text_config.hidden_size' = \"5120\" is not an integer"},
      {"\"eos_token_id\": 1", "\"eos_token_id\": -1", "eos_token_id = -1 is not a token id"},
  };
  for (const Row& r : rows) {
    const std::string d = release_copy(t, "q" + std::to_string(&r - rows.data()), "hf");  // HF form alone
    patch(d + "/config.json", r.from, r.to);
    const std::string e = error_of([&] { st::read_checkpoint_dir_config(d, release_params()); });
    CHECK_MESSAGE(e.find(d + "/config.json") != std::string::npos, e);
    CHECK_MESSAGE(e.find(r.expect) != std::string::npos, r.to, "\n  got: ", e);
  }
  // an unknown key is noted, not fatal, not dropped silently
  const std::string d = release_copy(t, "unknown");
  patch(d + "/config.json", "\"use_cache\": true,", "\"use_cache\": true,\n    \"frobnication\": 3,");
  patch(d + "/inference/config.json", "\"n_heads\": 64,", "\"n_heads\": 64,\n    \"frobnication\": 3,");
  std::vector<std::string> notes;
  st::read_checkpoint_dir_config(d, release_params(), &notes);
  const std::string n = all_notes(notes);
  CHECK(n.find("config " + d + "/config.json: unknown keys, ignored: text_config.frobnication") != std::string::npos);
  CHECK(n.find("config " + d + "/inference/config.json: unknown keys, ignored: frobnication") != std::string::npos);
  // neither file: the error of the file a checkpoint must have
  const std::string none = t.file("none");
  fs::create_directories(none);
  const std::string e = error_of([&] { st::read_checkpoint_dir_config(none, release_params()); });
  CHECK(e.find(none + "/config.json") != std::string::npos);
  CHECK(e.find("cannot open") != std::string::npos);
}

TEST_CASE("hf config: the writer's HF form is the inverse of the reader's mapping") {
  const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json");
  st::GenerationInfo gen;
  gen.bos_token_id = 0;
  gen.eos_token_ids = {1, 7};
  gen.pad_token_id = 2;
  const nlohmann::ordered_json hf = st::hf_config_json(g.config, "fp8", "fp4", gen, 1);
  CHECK(hf.at("model_type") == "deepseek_v41");
  CHECK(hf.at("text_config").at("hidden_size") == g.config.dim);
  CHECK(hf.at("text_config").at("num_nextn_predict_layers") == 1);
  CHECK(hf.at("text_config").at("compress_ratios").size() == static_cast<size_t>(g.config.n_layers + 1));
  CHECK(hf.at("quantization_config").at("scale_fmt") == "ue8m0");
  const st::MappedConfig back = st::map_config(nlohmann::json::parse(hf.dump()), "written");
  const st::MappedConfig args = st::map_config(nlohmann::json::parse(st::config_json(g.config, "fp8", "fp4", 1).dump()), "args");
  CHECK_NOTHROW(st::check_agreement(back, args));
  // every ModelArgs field the ModelArgs form states comes back from the HF form, same value
  // (an iterator, not a structured binding: doctest's macros capture `k` in a lambda, which clang 14
  // (the sanitizer leg) refuses for a binding)
  for (auto it = args.args.begin(); it != args.args.end(); ++it) {
    const std::string k = it.key();
    if (k == "candidate_source_layer" && it.value().get<long>() < 0) continue;  // left out when off
    CHECK_MESSAGE(back.args.contains(k), k);
  }
  CHECK(back.generation.eos_token_ids == std::vector<long>{1, 7});
}

TEST_CASE("hf config: a release-layout checkpoint of the tiny fp8 golden reads back and runs the golden bit for bit") {
  TempDir t;
  const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json");
  WeightSet ws = golden::regenerate_weights(g);
  // a DSpark draft tensor: written, indexed, not loaded
  ws.put("mtp.0.norm.weight", HostTensor::from_f32({g.config.dim}, std::vector<float>(g.config.dim, 1.0f)));
  st::ReleaseFiles extra;
  extra.tokenizer_json = "{\"version\": \"1.0\"}";
  extra.tokenizer_config_json = "{\"add_bos_token\": false}";
  extra.other["encoding/README.txt"] = "chat prompts";
  const std::string ck = t.file("release");
  const auto paths = st::write_release_checkpoint(g.config, ws, ck, extra, 3);
  REQUIRE(paths.size() == 3);
  for (const char* f : {"config.json", "inference/config.json", "tokenizer.json", "tokenizer_config.json",
                        "encoding/README.txt", "model.safetensors.index.json", "model-00003-of-00003.safetensors"})
    CHECK_MESSAGE(fs::exists(ck + "/" + f), f);
  CHECK(read_text(ck + "/tokenizer.json") == extra.tokenizer_json);
  CHECK(read_text(ck + "/tokenizer_config.json") == extra.tokenizer_config_json);
  for (const auto& e : fs::directory_iterator(t.path))  // no temporary directory left behind
    CHECK_MESSAGE(e.path().filename().string().find(".tmp-") == std::string::npos, e.path());
  const nlohmann::json hf = nlohmann::json::parse(read_text(ck + "/config.json"));
  CHECK(hf.at("text_config").at("num_nextn_predict_layers") == 1);
  CHECK(hf.at("quantization_config").at("quant_method") == "fp8");
  CHECK(hf.at("quantization_config").at("expert_dtype") == "fp4");
  CHECK(hf.at("eos_token_id") == 1);

  std::vector<std::string> log;
  SafetensorsWeights w(ck, g.config.max_seq_len, g.config.engram, [&](const std::string& s) { log.push_back(s); });
  CHECK(w.config_files().size() == 2);
  CHECK(w.generation().eos_token_ids == std::vector<long>{1});
  CHECK(w.generation().bos_token_id == 0);
  CHECK(all_notes(log).find("MTP: 1 layers without dspark_block_size (mtp.* not loaded)") != std::string::npos);
  CHECK(w.shards().find("mtp.0.norm.weight") != nullptr);
  CHECK(!w.has("mtp.0.norm.weight"));
  const ModelConfig& c = w.config();
  check_same_config(c, g.config);
  // each of the two written files alone gives it too
  for (const char* f : {"/config.json", "/inference/config.json"})
    check_same_config(st::read_checkpoint_config(ck + f, {g.config.max_seq_len, g.config.engram}), g.config);
  // every tensor as written, in the library's formats
  long compared = 0;
  for (const auto& entry : ws.all()) {
    const std::string& name = entry.first;
    const HostTensor& want = entry.second;
    if (name.rfind("mtp.", 0) == 0) continue;
    const HostTensor got = w.load(name, want.shape);
    if (name.find("engram.embed.weight") != std::string::npos && want.format == WeightFormat::kF32) {
      const std::vector<float> v = want.to_f32();  // e4m3 code values -> codes
      std::vector<uint8_t> codes(v.size());
      for (size_t i = 0; i < v.size(); ++i) codes[i] = e4m3_encode(v[i]);
      CHECK_MESSAGE(got.payload == codes, name);
    } else if (name.size() > 6 && name.compare(name.size() - 6, 6, ".scale") == 0 && want.format == WeightFormat::kF32) {
      CHECK_MESSAGE(got.to_f32() == want.to_f32(), name);  // written as F8_E8M0, read back as 2^k
    } else {
      CHECK_MESSAGE(got.format == want.format, name);
      CHECK_MESSAGE(got.payload == want.payload, name);
      CHECK_MESSAGE(got.scales == want.scales, name);
    }
    ++compared;
  }
  CHECK(compared > 100);
  // the golden, from the release-layout checkpoint (as ds41-golden --checkpoint DIR runs it)
  Model<HostBackend> model(c, w);
  long passed = 0, failed = 0;
  for (const auto& rep : golden::run(g, model))
    for (const auto& r : rep.results) (r.pass ? passed : failed)++;
  CHECK(failed == 0);
  CHECK(passed == 1006);

  // a second write into the now non-empty directory is refused and changes nothing
  const std::string e = error_of([&] { st::write_release_checkpoint(g.config, ws, ck, extra, 2); });
  CHECK(e.find("exists and is not an empty directory") != std::string::npos);
  CHECK(fs::exists(ck + "/model-00003-of-00003.safetensors"));
  // an unencodable tensor: nothing is written
  WeightSet bad = ws;
  bad.put("layers.0.attn.wq_a.scale", HostTensor::from_f32({1, 2}, {3.0f, 1.0f}));
  const std::string ck2 = t.file("never");
  const std::string e2 = error_of([&] { st::write_release_checkpoint(g.config, bad, ck2, extra, 2); });
  CHECK(!e2.empty());
  CHECK(!fs::exists(ck2));
}

}  // namespace test_hf_config
