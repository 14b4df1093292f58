// ds41/io/safetensors_weights.hpp — the official DeepSeek-V4.1-Flash checkpoint directory as a
// WeightSource: config.json (HF or ModelArgs form) and inference/config.json (ModelArgs form),
// which must agree → ModelConfig (read_checkpoint_dir_config, hf_config.hpp), and SafetensorsWeights, which
// reads each tensor with pread from its shard when a component asks for it and converts it to
// the library's formats (docs/SAFETENSORS.md):
//
//   F8_E4M3 X.weight + F8_E8M0 X.scale [ceil(N/32), ceil(K/32)]  → kFp8Block32 [N, K]
//   I8 X.weight [N, K/2] (packed e2m1) + F8_E8M0 X.scale [N, K/32] → kFp4Block32 [N, K]
//   F8_E4M3 attn.wo_a.weight + scale                              → kBF16 code·2^k (as convert.py)
//   F8_E4M3 engram.embed.weight                                   → kFp8Block32 codes (no scales)
//   F8_E8M0 X.scale asked for directly (engram.embed.scale)       → kF32 2^(byte-127)
//   BF16 → kBF16, F32 → kF32, F16 → kF32 (exact)
//
// Names are model.py's state_dict names, the names the components ask for, the DSpark stages'
// mtp.* among them. Vision tensors are indexed but never loaded (one progress note says so).
#pragma once
#include <cmath>
#include <cstdio>
#include <map>
#include <unistd.h>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "../core/numeric.hpp"
#include "../model/config.hpp"
#include "../model/weights.hpp"
#include "hf_config.hpp"
#include "safetensors_reader.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {
namespace safetensors {

/// Options of a checkpoint load that config.json cannot carry.
struct CheckpointParams {
  long max_seq_len = 0;  // a runtime field of ModelArgs, never in config.json
  /// Engram hash parameters (the reference derives them from the tokenizer); required when
  /// config.json names engram layers.
  std::optional<EngramHashParams> engram;
};

/// ModelArgs-form fields (`j`, as map_config gives them) → ModelConfig. Absent fields take
/// model.py's ModelArgs defaults (config files omit fields equal to them). Every field's type is
/// checked and the result validated; errors name `file` and the key as the file writes it
/// (`key_of`: ModelArgs name → key, e.g. dim → text_config.hidden_size). `notes` receives what is
/// skipped.
inline ModelConfig model_config_from_args(const nlohmann::json& j, const std::string& file, const CheckpointParams& params,
                                          std::vector<std::string>* notes = nullptr,
                                          const std::map<std::string, std::string>* key_of = nullptr) {
  using json = nlohmann::json;
  const std::string where = "safetensors " + file;
  DS41_CHECK(j.is_object(), where, ": not a JSON object");
  auto find = [&](const char* k) -> const json* {
    auto it = j.find(k);
    return it == j.end() ? nullptr : &*it;
  };
  // the key as the file spells it, for messages
  auto K = [&](const char* k) -> std::string {
    if (key_of) {
      auto it = key_of->find(k);
      if (it != key_of->end()) return it->second;
    }
    return k;
  };
  auto integer = [&](const char* k, long def, long lo = 0, long hi = 1L << 40) -> long {
    const json* v = find(k);
    if (!v) return def;
    DS41_CHECK(v->is_number_integer() && !v->is_boolean(), where, ": key '", K(k), "' = ", v->dump(),
               " is not an integer");
    DS41_CHECK(v->is_number_unsigned() ? v->get<uint64_t>() <= static_cast<uint64_t>(hi)
                                       : v->get<int64_t>() >= lo && v->get<int64_t>() <= hi,
               where, ": key '", K(k), "' = ", v->dump(), " is outside [", lo, ", ", hi, "]");
    const long x = v->get<long>();
    DS41_CHECK(x >= lo, where, ": key '", K(k), "' = ", x, " is outside [", lo, ", ", hi, "]");
    return x;
  };
  auto real = [&](const char* k, double def) -> double {
    const json* v = find(k);
    if (!v) return def;
    DS41_CHECK(v->is_number() && !v->is_boolean(), where, ": key '", K(k), "' = ", v->dump(), " is not a number");
    const double x = v->get<double>();
    DS41_CHECK(std::isfinite(x), where, ": key '", K(k), "' = ", v->dump(), " is not finite");
    return x;
  };
  auto boolean = [&](const char* k, bool def) -> bool {
    const json* v = find(k);
    if (!v) return def;
    DS41_CHECK(v->is_boolean(), where, ": key '", K(k), "' = ", v->dump(), " is not true or false");
    return v->get<bool>();
  };
  auto ints = [&](const char* k, std::vector<long> def, long lo = 0) -> std::vector<long> {
    const json* v = find(k);
    if (!v) return def;
    DS41_CHECK(v->is_array() && v->size() <= (1u << 20), where, ": key '", K(k), "' = ", v->dump(),
               " is not a list of integers");
    std::vector<long> out;
    for (const json& x : *v) {
      DS41_CHECK(x.is_number_integer() && !x.is_boolean(), where, ": key '", K(k), "' has a non-integer entry ", x.dump());
      DS41_CHECK(!x.is_number_unsigned() || x.get<uint64_t>() <= (1ull << 40), where, ": key '", K(k), "' entry ",
                 x.dump(), " is too large");
      DS41_CHECK(x.get<int64_t>() >= lo && x.get<int64_t>() <= (1L << 40), where, ": key '", K(k), "' entry ", x.dump(),
                 " is out of range");
      out.push_back(x.get<long>());
    }
    return out;
  };
  auto to_int = [](const std::vector<long>& v) { return std::vector<int>(v.begin(), v.end()); };
  auto I = [&](const char* k, long def, long lo = 0) { return static_cast<int>(integer(k, def, lo, 1L << 30)); };

  // dtype / expert_dtype: what the loader converts is decided per tensor by its stored dtype, but
  // only the pairs model.py builds are accepted
  if (const json* v = find("dtype"))
    DS41_CHECK(v->is_string() && (*v == "fp8" || *v == "bf16"), where, ": key '", K("dtype"), "' = ", v->dump(),
               ", expected \"fp8\" or \"bf16\"");
  if (const json* v = find("expert_dtype"))
    DS41_CHECK(v->is_null() || (v->is_string() && *v == "fp4"), where, ": key '", K("expert_dtype"), "' = ", v->dump(),
               ", expected \"fp4\" or null");

  ModelConfig c;
  c.max_seq_len = params.max_seq_len;
  c.vocab_size = integer("vocab_size", 129280, 1);
  c.dim = I("dim", 1024, 1);
  c.moe_inter_dim = I("moe_inter_dim", 1024, 1);
  c.n_layers = I("n_layers", 5, 1);
  const int n_mtp = I("n_mtp_layers", 1);
  c.n_heads = I("n_heads", 16, 1);
  c.n_routed_experts = I("n_routed_experts", 8, 1);
  c.n_shared_experts = I("n_shared_experts", 1);
  c.n_activated_experts = I("n_activated_experts", 2, 1);
  {
    const json* v = find("score_func");
    const std::string s = v ? (v->is_string() ? v->get<std::string>() : "?") : "sqrtsoftplus";
    DS41_CHECK(s == "softmax" || s == "sigmoid" || s == "sqrtsoftplus", where, ": key '", K("score_func"), "' = ",
               v ? v->dump() : s, ", expected \"softmax\", \"sigmoid\" or \"sqrtsoftplus\"");
    c.score_func = s == "softmax" ? ScoreFunc::kSoftmax : s == "sigmoid" ? ScoreFunc::kSigmoid : ScoreFunc::kSqrtSoftplus;
  }
  c.gate_temp = real("gate_temp", 1.0);
  c.norm_topk_prob = boolean("norm_topk_prob", true);
  c.route_scale = real("route_scale", 1.0);
  c.swiglu_limit = real("swiglu_limit", 0.0);
  c.q_lora_rank = I("q_lora_rank", 256, 1);
  c.head_dim = I("head_dim", 128, 1);
  c.rope_head_dim = I("rope_head_dim", 32, 1);
  c.norm_eps = real("norm_eps", 1e-20);
  c.o_groups = I("o_groups", 8, 1);
  c.o_lora_rank = I("o_lora_rank", 256, 1);
  c.window_size = I("window_size", 128, 1);
  c.compress_ratios = to_int(ints("compress_ratios", {0, 2, 2, 1, 1, 0}));
  c.kv_source_layers = to_int(ints("kv_source_layers", {1, 3}));
  c.index_source_layers = to_int(ints("index_source_layers", {1, 3}));
  c.compress_rope_theta = real("compress_rope_theta", 40000.0);
  c.original_seq_len = integer("original_seq_len", 0);
  c.rope_theta = real("rope_theta", 10000.0);
  c.rope_factor = real("rope_factor", 40);
  c.beta_fast = real("beta_fast", 32);
  c.beta_slow = real("beta_slow", 1);
  c.index_n_heads = I("index_n_heads", 16);
  c.index_head_dim = I("index_head_dim", 64);
  c.index_topk = I("index_topk", 64);
  c.candidate_source_layer = I("candidate_source_layer", -1, -1);
  c.candidate_topk_blocks = I("candidate_topk_blocks", 0);
  c.candidate_block_size = I("candidate_block_size", 0);
  c.hc_mult = I("hc_mult", 4, 1);
  c.hc_sinkhorn_iters = I("hc_sinkhorn_iters", 20, 1);
  c.hc_eps = real("hc_eps", 1e-6);
  c.engram_layer_ids = to_int(ints("engram_layer_ids", {}));
  c.engram_num_embeddings = ints("engram_num_embeddings", {});
  c.engram_max_ngram_size = I("engram_max_ngram_size", 1);
  c.engram_vocab_size = integer("engram_vocab_size", 0);  // the hash primes' search start (engram.py)
  c.engram_n_heads = I("engram_n_heads", 0);
  c.engram_head_dim = I("engram_head_dim", 0);
  c.engram_pad_id = integer("engram_pad_id", 2);
  c.engram_compressed_vocab_size = integer("engram_compressed_vocab_size", 0);
  if (find("vision_n_layers")) {
    const long vl = integer("vision_n_layers", 0);
    if (vl > 0 && notes) notes->push_back("vision: " + std::to_string(vl) + " ViT layers skipped (text only)");
  }
  DS41_CHECK(static_cast<long>(c.compress_ratios.size()) == c.n_layers + n_mtp, where, ": key '", K("compress_ratios"),
             "' has ", c.compress_ratios.size(), " entries, expected n_layers + n_mtp_layers = ", c.n_layers + n_mtp,
             " (the DSpark draft layers have ratios too)");
  // DSpark (ModelArgs' dspark_* fields, M:131-136): a block size of 0 means no draft head
  c.n_mtp_layers = n_mtp;
  c.dspark_block_size = I("dspark_block_size", 0);
  c.dspark_noise_token_id = integer("dspark_noise_token_id", 0);
  c.dspark_target_layer_ids = to_int(ints("dspark_target_layer_ids", {}));
  c.dspark_markov_rank = I("dspark_markov_rank", 256);
  c.dspark_n_routed_experts = I("dspark_n_routed_experts", 0);
  c.dspark_n_activated_experts = I("dspark_n_activated_experts", 0);
  if (c.has_dspark()) {
    for (int s = 0; s < n_mtp; ++s)  // DSparkAttention asserts ratio 0 (M:1034)
      DS41_CHECK(c.compress_ratios[c.n_layers + s] == 0, where, ": key '", K("compress_ratios"), "' gives DSpark stage ",
                 s, " ratio ", c.compress_ratios[c.n_layers + s], "; the stages are window-only (0)");
    if (notes)
      notes->push_back("DSpark: " + std::to_string(n_mtp) + " stages (mtp.*), block " +
                       std::to_string(c.dspark_block_size) + ", " + std::to_string(c.dspark_target_layer_ids.size()) +
                       " target layers");
  } else if (n_mtp > 0 && notes) {
    notes->push_back("MTP: " + std::to_string(n_mtp) + " layers without dspark_block_size (mtp.* not loaded)");
  }
  c.compress_ratios.resize(c.n_layers);  // the stages' ratios (0) are ModelConfig::ratio's default
  if (!c.engram_layer_ids.empty()) {
    DS41_CHECK(params.engram.has_value(), where, ": engram layers ", shape_str({c.engram_layer_ids.begin(), c.engram_layer_ids.end()}),
               " need the engram hash parameters (token map, primes, offsets, multipliers: they come from the "
               "tokenizer, not config.json); none were given (e.g. ds41-decode --golden FILE)");
    c.engram = *params.engram;
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
  return c;
}

/// One config file (either form, hf_config.hpp) → ModelConfig.
inline ModelConfig read_checkpoint_config(const std::string& path, const CheckpointParams& params,
                                          std::vector<std::string>* notes = nullptr) {
  const MappedConfig m = map_config(SafetensorsShards::read_json(path), path);
  if (notes)
    for (std::string& n : config_notes(m)) notes->push_back(std::move(n));
  return model_config_from_args(m.args, path, params, notes, &m.key_of);
}

/// What a checkpoint directory's config files give.
struct CheckpointConfig {
  ModelConfig model;
  GenerationInfo generation;       // bos/eos/pad ids: the HF form's (empty with the ModelArgs form alone)
  std::vector<std::string> files;  // the config files read
};

/// DIR/config.json (either form) and DIR/inference/config.json (ModelArgs form), whichever exist;
/// with both, every field they both state must agree (check_agreement) and the model is built from
/// their union. Each file is first checked alone, so a type error names its own file.
inline CheckpointConfig read_checkpoint_dir_config(const std::string& dir, const CheckpointParams& params,
                                                   std::vector<std::string>* notes = nullptr) {
  auto file = [&](const std::string& name) { return dir.empty() || dir.back() == '/' ? dir + name : dir + "/" + name; };
  auto exists = [](const std::string& p) { return ::access(p.c_str(), F_OK) == 0; };
  std::vector<MappedConfig> m;
  for (const std::string& p : {file("config.json"), file("inference/config.json")})
    if (exists(p)) m.push_back(map_config(SafetensorsShards::read_json(p), p));
  // neither: the error of the file a checkpoint must have ("cannot open DIR/config.json")
  if (m.empty()) m.push_back(map_config(SafetensorsShards::read_json(file("config.json")), file("config.json")));
  CheckpointConfig out;
  for (const MappedConfig& x : m) {
    out.files.push_back(x.path);
    if (notes)
      for (std::string& n : config_notes(x)) notes->push_back(std::move(n));
    if (x.hf_form) out.generation = x.generation;
  }
  if (m.size() == 1) {
    out.model = model_config_from_args(m[0].args, m[0].path, params, notes, &m[0].key_of);
  } else {
    for (const MappedConfig& x : m) (void)model_config_from_args(x.args, x.path, params, nullptr, &x.key_of);
    check_agreement(m[0], m[1]);
    std::map<std::string, std::string> key_of = m[1].key_of;
    for (const auto& [k, v] : m[0].key_of) key_of[k] = v;
    out.model = model_config_from_args(merged_args(m[0], m[1]), m[0].path + " and " + m[1].path, params, notes, &key_of);
  }
  const auto& mpe = out.generation.max_position_embeddings;
  if (mpe && params.max_seq_len > *mpe && notes)
    notes->push_back("config: max_seq_len " + std::to_string(params.max_seq_len) +
                     " is beyond the model's max_position_embeddings " + std::to_string(*mpe));
  return out;
}

/// The config file a checkpoint's engram spec is read from: DIR/inference/config.json (the
/// ModelArgs form engram.py's caller reads), else DIR/config.json.
inline std::string checkpoint_args_file(const std::string& dir) {
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  return ::access((base + "inference/config.json").c_str(), F_OK) == 0 ? base + "inference/config.json"
                                                                          : base + "config.json";
}

/// Whether a checkpoint's config (either form, either file) names engram layers: the hash
/// parameters are then needed (from a golden, or derived from the tokenizer: text/engram_params.hpp).
inline bool checkpoint_has_engram(const std::string& dir) {
  const std::string base = dir.empty() || dir.back() == '/' ? dir : dir + "/";
  for (const std::string& p : {base + "inference/config.json", base + "config.json"}) {
    if (::access(p.c_str(), F_OK) != 0) continue;
    const nlohmann::json args = map_config(SafetensorsShards::read_json(p), p).args;
    if (args.contains("engram_layer_ids") && args["engram_layer_ids"].is_array() && !args["engram_layer_ids"].empty())
      return true;
  }
  return false;
}

/// Names that belong to parts of the released checkpoint this library does not model, or does
/// not load for this configuration: the DSpark stages mtp.* load when it has a draft head
/// (`dspark`: ModelConfig::has_dspark(); model/dspark.hpp).
inline bool skipped_name(const std::string& n, bool dspark) {
  if (!dspark && n.rfind("mtp.", 0) == 0) return true;
  for (const char* p : {"vision.", "aligner.", "image_start", "image_end", "image_newline"})
    if (n.rfind(p, 0) == 0) return true;
  return false;
}

inline bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

/// IEEE half → float (exact): core/numeric.hpp's.
inline float half_to_f32(uint16_t h) { return f16_to_f32(h); }

/// Power-of-two scales from F8_E8M0 bytes; 0xFF (NaN) is an error naming the tensor and the index.
inline std::vector<float> e8m0_scales(const uint8_t* p, size_t n, const std::string& what) {
  std::vector<float> s(n);
  for (size_t i = 0; i < n; ++i) {
    DS41_CHECK(p[i] != 0xFF, what, ": scale ", i, " is the F8_E8M0 NaN byte 0xFF");
    s[i] = e8m0_to_f32(p[i]);
  }
  return s;
}

/// How a reference tensor is stored: its weight tensor and, for quantised weights, its scale.
enum class Kind { kPlain, kFp8, kFp4, kFp8ToBf16, kEngramCodes, kScale };
struct Parts {
  Kind kind = Kind::kPlain;
  const TensorInfo* weight = nullptr;
  const TensorInfo* scale = nullptr;  // kFp8, kFp4, kFp8ToBf16
  std::vector<long> shape;            // the logical shape the HostTensor will have
};

/// "safetensors FILE: tensor 'NAME'" for messages.
inline std::string where(const SafetensorsShards& sh, const TensorInfo& t) {
  return "safetensors " + sh.shard(t.shard).path() + ": tensor '" + t.name + "'";
}

/// The stored bytes of a tensor (w) and its scale (s) → HostTensor (the table at the top).
inline HostTensor decode_parts(const SafetensorsShards& sh, const Parts& p, const uint8_t* w, const uint8_t* s) {
  const std::string what = where(sh, *p.weight);
  HostTensor t;
  t.shape = p.shape;
  const size_t n = p.weight->bytes;
  switch (p.kind) {
    case Kind::kPlain:
      if (p.weight->dtype == Dtype::kF16) {
        std::vector<float> v(n / 2);
        for (size_t i = 0; i < v.size(); ++i) v[i] = half_to_f32(static_cast<uint16_t>(w[2 * i] | w[2 * i + 1] << 8));
        return HostTensor::from_f32(p.shape, v);
      }
      t.format = p.weight->dtype == Dtype::kBF16 ? WeightFormat::kBF16 : WeightFormat::kF32;
      t.payload.assign(w, w + n);
      return t;
    case Kind::kScale: return HostTensor::from_f32(p.shape, e8m0_scales(w, n, what));
    case Kind::kEngramCodes:
      t.format = WeightFormat::kFp8Block32;  // codes only: EngramT reads the scales from ".scale"
      t.payload.assign(w, w + n);
      return t;
    case Kind::kFp8:
    case Kind::kFp4:
      t.format = p.kind == Kind::kFp8 ? WeightFormat::kFp8Block32 : WeightFormat::kFp4Block32;
      t.payload.assign(w, w + n);
      t.scales = e8m0_scales(s, p.scale->bytes, where(sh, *p.scale));
      return t;
    case Kind::kFp8ToBf16: {  // convert.py: bf16(code.float() * scale) per 32x32 block, exact
      const std::vector<float> sc = e8m0_scales(s, p.scale->bytes, where(sh, *p.scale));
      const long N = p.shape[0], K = p.shape[1], kb = (K + 31) / 32;
      std::vector<float> v(static_cast<size_t>(N * K));
      for (long r = 0; r < N; ++r)
        for (long k = 0; k < K; ++k) v[r * K + k] = bf16_round(e4m3_decode(w[r * K + k]) * sc[(r / 32) * kb + k / 32]);
      return HostTensor::from_bf16_values(p.shape, v);
    }
  }
  fail(what, ": unknown kind");
}

}  // namespace safetensors

/// The checkpoint directory as a WeightSource. Tensors are read when asked for, one at a time.
class SafetensorsWeights : public WeightSource {
 public:
  using Progress = safetensors::SafetensorsShards::Progress;
  using TensorInfo = safetensors::TensorInfo;
  using Dtype = safetensors::Dtype;

  using Kind = safetensors::Kind;
  using Parts = safetensors::Parts;

  SafetensorsWeights(const std::string& dir, const safetensors::CheckpointParams& params, const Progress& progress = {})
      : shards_(std::make_shared<safetensors::SafetensorsShards>(dir, progress)), progress_(progress) {
    std::vector<std::string> notes;
    safetensors::CheckpointConfig cc = safetensors::read_checkpoint_dir_config(dir, params, &notes);
    cfg_ = std::move(cc.model);
    generation_ = std::move(cc.generation);
    config_files_ = std::move(cc.files);
    long skipped = 0;
    for (const auto& [name, t] : shards_->tensors()) {
      if (skipped_name(name)) ++skipped;
      else total_bytes_ += t.bytes;
    }
    if (skipped) notes.push_back(std::to_string(skipped) + " mtp/vision tensors are not loaded");
    if (progress_)
      for (const std::string& n : notes) progress_("note: " + n);
  }
  SafetensorsWeights(const std::string& dir, long max_seq_len, std::optional<EngramHashParams> engram = {},
                     const Progress& progress = {})
      : SafetensorsWeights(dir, safetensors::CheckpointParams{max_seq_len, std::move(engram)}, progress) {}

  const ModelConfig& config() const { return cfg_; }
  /// Whether `name` is indexed but not loaded (vision; mtp.* without a DSpark configuration).
  bool skipped_name(const std::string& name) const { return safetensors::skipped_name(name, cfg_.has_dspark()); }
  /// bos/eos/pad ids and max_position_embeddings from the HF-form config.json (empty when the
  /// directory has only the ModelArgs form, which states none).
  const safetensors::GenerationInfo& generation() const { return generation_; }
  /// The config files read: DIR/config.json and/or DIR/inference/config.json.
  const std::vector<std::string>& config_files() const { return config_files_; }
  const safetensors::SafetensorsShards& shards() const { return *shards_; }
  std::shared_ptr<const safetensors::SafetensorsShards> shared_shards() const { return shards_; }
  /// Bytes and tensors read by load() so far.
  uint64_t bytes_loaded() const { return bytes_loaded_; }
  long tensors_loaded() const { return tensors_loaded_; }

  bool has(const std::string& name) const override {
    if (skipped_name(name)) return false;
    return shards_->find(name) != nullptr;
  }

  /// Where and how `name` is stored; throws naming the tensor (and file) when something is missing.
  Parts parts(const std::string& name) const {
    using safetensors::ends_with;
    const std::string dir = shards_->dir();
    DS41_CHECK(!skipped_name(name), "safetensors ", dir, ": tensor '", name,
               "' belongs to the MTP/vision part, which is not loaded");
    const TensorInfo* t = shards_->find(name);
    DS41_CHECK(t, "safetensors ", dir, ": missing tensor '", name, "'");
    const std::string what = where(*t);
    Parts p;
    p.weight = t;
    p.shape = t->shape;
    auto scale_of = [&]() -> const TensorInfo* {
      DS41_CHECK(ends_with(name, ".weight"), what, ": ", safetensors::dtype_name(t->dtype),
                 " needs a scale, but the name does not end in '.weight'");
      const std::string sn = name.substr(0, name.size() - 6) + "scale";
      const TensorInfo* s = shards_->find(sn);
      DS41_CHECK(s, what, ": ", safetensors::dtype_name(t->dtype), " weight without its scale tensor '", sn, "'");
      DS41_CHECK(s->dtype == Dtype::kF8_E8M0, where(*s), ": dtype ", safetensors::dtype_name(s->dtype),
                 ", expected F8_E8M0");
      return s;
    };
    auto want_scale_shape = [&](const std::vector<long>& want) {
      DS41_CHECK(p.scale->shape == want, where(*p.scale), ": shape ", shape_str({p.scale->shape.begin(), p.scale->shape.end()}),
                 ", expected ", shape_str({want.begin(), want.end()}), " for weight ",
                 shape_str({p.shape.begin(), p.shape.end()}));
    };
    switch (t->dtype) {
      case Dtype::kBF16:
      case Dtype::kF32:
      case Dtype::kF16: p.kind = Kind::kPlain; return p;
      case Dtype::kF8_E8M0: p.kind = Kind::kScale; return p;
      case Dtype::kF8_E4M3: {
        if (ends_with(name, "engram.embed.weight")) {
          DS41_CHECK(t->shape.size() == 2, what, ": engram table is not a matrix");
          p.kind = Kind::kEngramCodes;
          return p;
        }
        DS41_CHECK(t->shape.size() == 2, what, ": F8_E4M3 weight is not a matrix");
        p.kind = ends_with(name, "attn.wo_a.weight") ? Kind::kFp8ToBf16 : Kind::kFp8;
        p.scale = scale_of();
        want_scale_shape({(p.shape[0] + 31) / 32, (p.shape[1] + 31) / 32});
        return p;
      }
      case Dtype::kI8: {
        DS41_CHECK(t->shape.size() == 2, what, ": I8 (packed fp4) weight is not a matrix");
        p.kind = Kind::kFp4;
        p.shape[1] *= 2;
        DS41_CHECK(p.shape[1] % 32 == 0, what, ": packed fp4 weight has ", p.shape[1],
                   " logical columns, not a multiple of 32");
        p.scale = scale_of();
        want_scale_shape({p.shape[0], p.shape[1] / 32});
        return p;
      }
      default: fail(what, ": dtype ", safetensors::dtype_name(t->dtype), " is not one ds41 loads");
    }
  }

  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    const Parts p = parts(name);
    DS41_CHECK(p.shape == shape, where(*p.weight), ": shape ", shape_str({p.shape.begin(), p.shape.end()}),
               p.kind == Kind::kFp4 ? " (packed fp4, logical)" : "", ", but config.json implies ",
               shape_str({shape.begin(), shape.end()}));
    std::vector<uint8_t> w(p.weight->bytes), s(p.scale ? p.scale->bytes : 0);
    shards_->read(p.weight->shard, w.data(), w.size(), p.weight->offset, "data of tensor '" + name + "'");
    if (p.scale) shards_->read(p.scale->shard, s.data(), s.size(), p.scale->offset, "data of tensor '" + p.scale->name + "'");
    count(w.size() + s.size());
    return decode(p, w.data(), s.data());
  }

  /// The stored bytes of a tensor (and its scale) → HostTensor, as load() converts them.
  HostTensor decode(const Parts& p, const uint8_t* w, const uint8_t* s) const {
    return safetensors::decode_parts(*shards_, p, w, s);
  }
  /// "safetensors FILE: tensor 'NAME'" for messages.
  std::string where(const TensorInfo& t) const { return safetensors::where(*shards_, t); }
  /// The routed experts' six tensors each (SafetensorsExpertSource) and the engram tables' rows
  /// (SafetensorsRowSource), for StreamedExperts and RowReaderTable: safetensors_sources.hpp.
  std::shared_ptr<const ExpertSource> expert_source() const override;
  std::shared_ptr<const RowSource> row_source(const std::string& prefix, long rows, int head_dim) const override;

 private:
  static std::string human(uint64_t b) {
    char buf[32];
    if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1ull << 30));
    else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(b) / (1ull << 20));
    else std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
    return buf;
  }
  /// One progress line each time the bytes read pass another tenth of the checkpoint (streamed
  /// experts are read by the expert cache, not here, so a streamed load ends below 100%).
  void count(uint64_t bytes) const {
    ++tensors_loaded_;
    bytes_loaded_ += bytes;
    if (!progress_ || total_bytes_ == 0) return;
    const uint64_t step = std::max<uint64_t>(total_bytes_ / 10, 1);
    if (bytes_loaded_ / step != (bytes_loaded_ - bytes) / step)
      progress_("loaded " + std::to_string(tensors_loaded_) + " tensors, " + human(bytes_loaded_) + " (" +
                std::to_string(bytes_loaded_ * 100 / total_bytes_) + "% of the checkpoint's " + human(total_bytes_) + ")");
  }

  std::shared_ptr<safetensors::SafetensorsShards> shards_;
  Progress progress_;
  ModelConfig cfg_;
  safetensors::GenerationInfo generation_;
  std::vector<std::string> config_files_;
  uint64_t total_bytes_ = 0;
  mutable uint64_t bytes_loaded_ = 0;
  mutable long tensors_loaded_ = 0;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
// the streaming sources, and the two overrides above (they need this class complete)
#include "safetensors_sources.hpp"
