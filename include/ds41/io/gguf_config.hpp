// ds41/io/gguf_config.hpp — the deepseek41.* metadata of a GGUF model ↔ ModelConfig (and the
// engram hash parameters), in each published dialect: llama.cpp's architecture as in vcruz305's
// files, antirez's ds4 and mxxm-t's, recognised from the metadata (detect_dialect); and the GGUF
// tensor names ↔ the reference's in each (docs/GGUF.md "Dialects").
//
// Where llama.cpp has no key for a field the reference needs, a deepseek41.* key in the same style
// is used. Float fields are written as f64 so the reference's double values survive; f32 is read too.
#pragma once
#include <optional>
#include <string>
#include <vector>
#include "../model/config.hpp"
#include "gguf_derive.hpp"
#include "gguf_names.hpp"
#include "gguf_reader.hpp"
#include "gguf_writer.hpp"
#include "safetensors_weights.hpp"
#include "safetensors_writer.hpp"  // hf_config_json: ds4 keeps the HF-form config.json as a string

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

inline constexpr const char* kArch = "deepseek41";
inline std::string key(const char* k) { return std::string(kArch) + "." + k; }

// llama.cpp: LLAMA_EXPERT_GATING_FUNC_TYPE_{SOFTMAX=1, SIGMOID=2, SOFTMAX_WEIGHT=3, SQRTSOFTPLUS=4}
inline uint32_t gating_func_id(ScoreFunc f) { return f == ScoreFunc::kSoftmax ? 1 : f == ScoreFunc::kSigmoid ? 2 : 4; }

// ------------------------------------------------------------------------------------ metadata
/// The engram keys (after "deepseek41.") where the llama.cpp and mxxm-t dialects differ; nullptr
/// where a dialect has no such key. pad_compressed is the pad token's compressed id (llama.cpp's
/// engram.pad_id); pad_raw its tokenizer id (mxxm-t compresses it through the token map at load).
struct EngramKeys {
  const char* head_count;
  const char* key_length;
  const char* pad_compressed;
  const char* pad_raw;
  const char* num_embeddings;
};
inline EngramKeys engram_keys(Dialect d) {
  if (d == Dialect::kMxxm) return {"engram.n_heads", "engram.head_dim", nullptr, "engram.pad_token_id", "engram.num_embeddings"};
  return {"engram.head_count", "engram.key_length", "engram.pad_id", "engram.pad_token_id", nullptr};
}

inline void write_config_ds4(GgufWriter& w, const ModelConfig& c);

inline void write_config(GgufWriter& w, const ModelConfig& c, Dialect dialect = Dialect::kLlamaCpp) {
  if (dialect == Dialect::kDs4) return write_config_ds4(w, c);
  const EngramKeys ek = engram_keys(dialect);
  auto u32 = [&](const char* k, long v) { w.set(key(k), Value::u32(static_cast<uint32_t>(v))); };
  auto i32 = [&](const char* k, long v) { w.set(key(k), Value::i32(static_cast<int32_t>(v))); };
  auto f64 = [&](const char* k, double v) { w.set(key(k), Value::f64(v)); };
  auto i32s = [&](const char* k, const std::vector<int>& v) { w.set(key(k), Value::int_array(ValueType::kI32, v)); };
  w.set("general.architecture", Value::string(kArch));
  u32("context_length", c.max_seq_len);
  u32("vocab_size", c.vocab_size);
  u32("embedding_length", c.dim);
  u32("block_count", c.n_layers);
  u32("attention.head_count", c.n_heads);
  u32("expert_count", c.n_routed_experts);
  u32("expert_shared_count", c.n_shared_experts);
  u32("expert_used_count", c.n_activated_experts);
  u32("expert_feed_forward_length", c.moe_inter_dim);
  u32("expert_gating_func", gating_func_id(c.score_func));
  f64("expert_gating_temperature", c.gate_temp);
  w.set(key("expert_weights_norm"), Value::boolean(c.norm_topk_prob));
  f64("expert_weights_scale", c.route_scale);
  std::vector<Value> clamp(c.n_layers, Value::f64(c.swiglu_limit));  // llama.cpp: one per layer
  w.set(key("swiglu_clamp_exp"), Value::array(ValueType::kF64, clamp));
  u32("attention.q_lora_rank", c.q_lora_rank);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  u32("rope.dimension_count", c.rope_head_dim);
  f64("attention.layer_norm_rms_epsilon", c.norm_eps);
  u32("attention.output_group_count", c.o_groups);
  u32("attention.output_lora_rank", c.o_lora_rank);
  u32("attention.sliding_window", c.window_size);
  i32s("attention.compress_ratios", c.compress_ratios);
  i32s("attention.kv_source_layer_ids", c.kv_source_layers);
  i32s("attention.index_source_layer_ids", c.index_source_layers);
  f64("attention.compress_rope_freq_base", c.compress_rope_theta);
  u32("rope.scaling.original_context_length", c.original_seq_len);
  f64("rope.freq_base", c.rope_theta);
  f64("rope.scaling.factor", c.rope_factor);
  f64("rope.scaling.yarn_beta_fast", c.beta_fast);
  f64("rope.scaling.yarn_beta_slow", c.beta_slow);
  u32("attention.indexer.head_count", c.index_n_heads);
  u32("attention.indexer.key_length", c.index_head_dim);
  u32("attention.indexer.top_k", c.index_topk);
  i32("attention.candidate_source_layer_id", c.candidate_source_layer);
  u32("attention.candidate_top_k_blocks", c.candidate_topk_blocks);
  u32("attention.candidate_block_size", c.candidate_block_size);
  u32("hyper_connection.count", c.hc_mult);
  u32("hyper_connection.sinkhorn_iterations", c.hc_sinkhorn_iters);
  f64("hyper_connection.epsilon", c.hc_eps);
  i32s("engram.layer_ids", c.engram_layer_ids);
  u32(ek.head_count, c.engram_n_heads);
  u32(ek.key_length, c.engram_head_dim);
  u32("engram.max_ngram_size", c.engram_max_ngram_size);
  if (ek.pad_compressed) u32(ek.pad_compressed, c.engram.pad_id);  // compressed id, as llama.cpp expects
  u32(ek.pad_raw, c.engram_pad_id);
  if (ek.num_embeddings) {
    std::vector<Value> rows;
    for (long r : c.engram_num_embeddings) rows.push_back(Value::u64(static_cast<uint64_t>(r)));
    w.set(key(ek.num_embeddings), Value::array(ValueType::kU64, std::move(rows)));
  }
  u32("engram.compressed_vocab_size", c.engram_compressed_vocab_size);
  w.set(key("engram.token_map"), Value::int_array(ValueType::kI32, c.engram.token_map));
  auto u64s = [&](const char* k, const std::vector<int64_t>& v) {
    std::vector<Value> items;
    for (int64_t x : v) items.push_back(Value::u64(static_cast<uint64_t>(x)));
    w.set(key(k), Value::array(ValueType::kU64, std::move(items)));
  };
  u64s("engram.multipliers", c.engram.multipliers);
  u64s("engram.primes", c.engram.primes);
  u64s("engram.offsets", c.engram.offsets);
}

/// The candidate prefilter (attention.candidate_*). A file that states none of it (published
/// converters write none, and llama.cpp does not implement the prefilter: vcruz305's runtime caps
/// the context where it would engage) takes the release's values when its layout is the release's
/// (has_release_layout); any other such file is refused, naming the key.
template <class Note>
void read_candidates(const GgufShards& s, const MetaReader& m, ModelConfig& c, Note&& note) {
  const GgufFile& f = s.meta();
  const std::string src = key("attention.candidate_source_layer_id"), topk = key("attention.candidate_top_k_blocks"),
                    bs = key("attention.candidate_block_size");
  if (f.has(src)) {
    c.candidate_source_layer = static_cast<int>(m.integer(src));
    const bool on = c.candidate_source_layer >= 0;  // off: the sizes are unused (0 when absent)
    c.candidate_topk_blocks = f.has(topk) || on ? static_cast<int>(m.integer(topk)) : 0;
    c.candidate_block_size = f.has(bs) || on ? static_cast<int>(m.integer(bs)) : 0;
    return;
  }
  DS41_CHECK(!f.has(topk) && !f.has(bs), "gguf ", s.path(), ": missing key '", src, "' ('",
             f.has(topk) ? topk : bs, "' is present)");
  DS41_CHECK(has_release_layout(c), "gguf ", s.path(), ": missing key '", src, "' (and '", topk, "', '", bs,
             "'): the candidate prefilter cannot be derived: nothing in the file states it, and only a file with "
             "DeepSeek-V4.1-Flash's released layout (40 layers of dim 5120, its compress ratios and source layers) "
             "takes the release's values");
  const ReleaseCandidates r;
  c.candidate_source_layer = r.source_layer;
  c.candidate_topk_blocks = r.topk_blocks;
  c.candidate_block_size = r.block_size;
  const std::string from = ", the release's config (the file has the release's layout)";
  note("attention.candidate_source_layer_id", std::to_string(r.source_layer) + from);
  note("attention.candidate_top_k_blocks", std::to_string(r.topk_blocks) + from);
  note("attention.candidate_block_size", std::to_string(r.block_size) + from);
}

/// The engram pad token (c.engram.token_map already read). llama.cpp's engram.pad_id is the
/// compressed id, which is what the hash uses; ds41 also keeps the tokenizer id
/// (engram.pad_token_id, mxxm-t's only pad key, which it compresses through the map at load).
/// Where the tokenizer id is absent it is derived from the map (pad_token_of).
template <class Note>
void read_engram_pad(const GgufShards& s, const MetaReader& m, const EngramKeys& ek, ModelConfig& c, Note&& note) {
  const GgufFile& f = s.meta();
  const std::vector<int32_t>& map = c.engram.token_map;
  const std::string raw_key = key(ek.pad_raw);
  auto in_map = [&](long id) { return id >= 0 && id < static_cast<long>(map.size()); };
  if (!ek.pad_compressed) {  // mxxm-t: the tokenizer id, compressed through the map
    c.engram_pad_id = m.integer(raw_key);
    if (c.engram_layer_ids.empty()) return;
    DS41_CHECK(in_map(c.engram_pad_id), "gguf ", s.path(), ": key '", raw_key, "' = ", c.engram_pad_id,
               " is outside the token map (", map.size(), " entries)");
    c.engram.pad_id = map[static_cast<size_t>(c.engram_pad_id)];
    return;
  }
  c.engram.pad_id = m.integer(key(ek.pad_compressed));
  if (f.has(raw_key)) {
    c.engram_pad_id = m.integer(raw_key);
    DS41_CHECK(map.empty() || (in_map(c.engram_pad_id) && map[static_cast<size_t>(c.engram_pad_id)] == c.engram.pad_id),
               "gguf ", s.path(), ": key '", raw_key, "' = ", c.engram_pad_id, " does not map to the compressed pad '",
               key(ek.pad_compressed), "' = ", c.engram.pad_id, " through the token map");
  } else if (map.empty()) {
    c.engram_pad_id = 2;
    note(ek.pad_raw, "2, ModelArgs' default (no token map)");
  } else {
    const std::optional<long> p = pad_token_of(map, c.engram.pad_id);
    DS41_CHECK(p, "gguf ", s.path(), ": missing key '", raw_key, "', and no token maps to the compressed pad '",
               key(ek.pad_compressed), "' = ", c.engram.pad_id);
    c.engram_pad_id = *p;
    note(ek.pad_raw, std::to_string(*p) + ", a token engram.token_map maps to engram.pad_id");
  }
}

/// llama.cpp's and mxxm-t's metadata (the same keys but for engram_keys) → ModelConfig. The facts
/// ds41 keeps under keys of its own (ds41_only_keys) are derived when absent, as published files
/// lack them (gguf_derive.hpp); each one derived is appended to `derived` when given.
inline ModelConfig read_config_llama(const GgufShards& s, Dialect dialect, std::vector<DerivedFact>* derived = nullptr) {
  MetaReader m(s.meta());
  const EngramKeys ek = engram_keys(dialect);
  const GgufFile& f = s.meta();
  auto I = [&](const char* k) { return static_cast<int>(m.integer(key(k))); };
  auto D = [&](const char* k) { return m.real(key(k)); };
  auto ints = [&](const char* k) {
    std::vector<int> out;
    for (int64_t x : m.ints(key(k))) out.push_back(static_cast<int>(x));
    return out;
  };
  auto has = [&](const char* k) { return f.has(key(k)); };
  auto note = [&](const char* k, const std::string& from) {
    if (derived) derived->push_back({key(k), from});
  };
  ModelConfig c;
  c.max_seq_len = m.integer(key("context_length"));
  c.n_layers = I("block_count");
  if (has("vocab_size")) {
    c.vocab_size = m.integer(key("vocab_size"));
  } else {  // llama.cpp takes n_vocab from the vocabulary; the embedding's rows are the model's
    const TensorInfo* e = s.find("token_embd.weight");
    DS41_CHECK(e && e->dims.size() == 2, "gguf ", s.path(), ": missing key '", key("vocab_size"),
               "' and no 2-D token_embd.weight to take the vocabulary size from");
    c.vocab_size = static_cast<long>(e->shape()[0]);
    note("vocab_size", std::to_string(c.vocab_size) + ", the rows of token_embd.weight");
  }
  c.dim = I("embedding_length");
  c.n_heads = I("attention.head_count");
  c.n_routed_experts = I("expert_count");
  c.n_shared_experts = I("expert_shared_count");
  c.n_activated_experts = I("expert_used_count");
  c.moe_inter_dim = I("expert_feed_forward_length");
  const int gf = I("expert_gating_func");
  DS41_CHECK(gf == 1 || gf == 2 || gf == 4, "gguf ", s.path(), ": key '", key("expert_gating_func"), "' = ", gf,
             " is not softmax (1), sigmoid (2) or sqrtsoftplus (4)");
  c.score_func = gf == 1 ? ScoreFunc::kSoftmax : gf == 2 ? ScoreFunc::kSigmoid : ScoreFunc::kSqrtSoftplus;
  if (has("expert_gating_temperature")) {
    c.gate_temp = D("expert_gating_temperature");
  } else {  // llama.cpp scores without a temperature; the release states none (ModelArgs' default)
    c.gate_temp = 1.0;
    note("expert_gating_temperature", "1.0, ModelArgs' default (none stated; llama.cpp scores without one)");
  }
  c.norm_topk_prob = m.boolean(key("expert_weights_norm"));
  c.route_scale = D("expert_weights_scale");
  c.swiglu_limit = m.real_or_first(key("swiglu_clamp_exp"));
  c.q_lora_rank = I("attention.q_lora_rank");
  c.head_dim = I("attention.key_length");
  c.rope_head_dim = I("rope.dimension_count");
  c.norm_eps = D("attention.layer_norm_rms_epsilon");
  c.o_groups = I("attention.output_group_count");
  c.o_lora_rank = I("attention.output_lora_rank");
  c.window_size = I("attention.sliding_window");
  c.compress_ratios = ints("attention.compress_ratios");
  DS41_CHECK(c.n_layers >= 0 && c.n_layers <= (1 << 16), "gguf ", s.path(), ": key '", key("block_count"), "' = ",
             c.n_layers, " is out of range");
  const LayerRoles roles = roles_from_tensors(s, dialect, c.n_layers);
  auto role = [&](const char* k, const std::vector<int>& from_tensors, const char* what) {
    if (!has(k)) {
      note(k, int_list(from_tensors) + ", the layers carrying " + what);
      return from_tensors;
    }
    std::vector<int> stated = ints(k);
    DS41_CHECK(stated == from_tensors, "gguf ", s.path(), ": key '", key(k), "' = ", int_list(stated),
               " disagrees with the tensors: the layers carrying ", what, " are ", int_list(from_tensors));
    return stated;
  };
  c.kv_source_layers = role("attention.kv_source_layer_ids", roles.kv_sources,
                            to_gguf("layers.0.attn.compressor.wkv.weight", dialect)->gguf.substr(6).c_str());
  c.index_source_layers = role("attention.index_source_layer_ids", roles.index_sources,
                               to_gguf("layers.0.attn.indexer.wq_b.weight", dialect)->gguf.substr(6).c_str());
  c.compress_rope_theta = D("attention.compress_rope_freq_base");
  c.original_seq_len = m.integer(key("rope.scaling.original_context_length"));
  c.rope_theta = D("rope.freq_base");
  c.rope_factor = D("rope.scaling.factor");
  c.beta_fast = D("rope.scaling.yarn_beta_fast");
  c.beta_slow = D("rope.scaling.yarn_beta_slow");
  c.index_n_heads = I("attention.indexer.head_count");
  c.index_head_dim = I("attention.indexer.key_length");
  c.index_topk = I("attention.indexer.top_k");
  read_candidates(s, m, c, note);
  c.hc_mult = I("hyper_connection.count");
  c.hc_sinkhorn_iters = I("hyper_connection.sinkhorn_iterations");
  c.hc_eps = D("hyper_connection.epsilon");
  c.engram_layer_ids = ints("engram.layer_ids");
  c.engram_n_heads = I(ek.head_count);
  c.engram_head_dim = I(ek.key_length);
  c.engram_max_ngram_size = I("engram.max_ngram_size");
  for (int64_t t : m.ints(key("engram.token_map"))) c.engram.token_map.push_back(static_cast<int32_t>(t));
  read_engram_pad(s, m, ek, c, note);
  const std::optional<long> counted = compressed_vocab_of(c.engram.token_map);
  if (has("engram.compressed_vocab_size")) {
    c.engram_compressed_vocab_size = m.integer(key("engram.compressed_vocab_size"));
    // a map may cover fewer ids than the tokenizer compressed (the count is then larger than the
    // map's, and ids may be missing from it): only an id at or past the count contradicts it
    const auto [lo, hi] = std::minmax_element(c.engram.token_map.begin(), c.engram.token_map.end());
    DS41_CHECK(c.engram.token_map.empty() || (*lo >= 0 && *hi < c.engram_compressed_vocab_size), "gguf ", s.path(),
               ": key '", key("engram.compressed_vocab_size"), "' = ", c.engram_compressed_vocab_size,
               " disagrees with the token map, which holds the compressed ids ", *lo, " to ", *hi);
  } else {
    DS41_CHECK(counted, "gguf ", s.path(), ": missing key '", key("engram.compressed_vocab_size"),
               "', and the token map does not determine it (its compressed ids below the largest are not all used)");
    c.engram_compressed_vocab_size = *counted;
    note("engram.compressed_vocab_size", std::to_string(*counted) + ", the distinct compressed ids of engram.token_map");
  }
  c.engram.multipliers = m.ints(key("engram.multipliers"));
  c.engram.primes = m.ints(key("engram.primes"));
  c.engram.offsets = m.ints(key("engram.offsets"));
  for (int l : c.engram_layer_ids) {  // table sizes come from the tensors, as in llama.cpp
    const std::string n = engram_table(dialect, l);
    const TensorInfo* t = s.find(n);
    DS41_CHECK(t, "gguf ", s.path(), ": missing tensor '", n, "' for engram layer ", l);
    c.engram_num_embeddings.push_back(static_cast<long>(t->shape()[0]));
  }
  if (ek.num_embeddings && !c.engram_layer_ids.empty()) {
    std::vector<long> stated;
    for (int64_t r : m.ints(key(ek.num_embeddings))) stated.push_back(static_cast<long>(r));
    DS41_CHECK(stated == c.engram_num_embeddings, "gguf ", s.path(), ": key '", key(ek.num_embeddings),
               "' disagrees with the rows of the engram tables");
  }
  try {
    c.validate();
  } catch (const Error& e) {
    fail("gguf ", s.path(), ": ", e.what());
  }
  return c;
}


/// Where the ds4 dialect's explicit integer keys (HF text_config names) must agree with its
/// deepseek41.config JSON, which ds41 reads as the configuration.
struct Ds4IntKey {
  const char* key;
  long (*get)(const ModelConfig&);
};
inline const std::vector<Ds4IntKey>& ds4_int_keys() {
  static const std::vector<Ds4IntKey> k = {
      {"vocab_size", [](const ModelConfig& c) { return c.vocab_size; }},
      {"hidden_size", [](const ModelConfig& c) { return long{c.dim}; }},
      {"moe_intermediate_size", [](const ModelConfig& c) { return long{c.moe_inter_dim}; }},
      {"num_hidden_layers", [](const ModelConfig& c) { return long{c.n_layers}; }},
      {"num_attention_heads", [](const ModelConfig& c) { return long{c.n_heads}; }},
      {"head_dim", [](const ModelConfig& c) { return long{c.head_dim}; }},
      {"qk_rope_head_dim", [](const ModelConfig& c) { return long{c.rope_head_dim}; }},
      {"q_lora_rank", [](const ModelConfig& c) { return long{c.q_lora_rank}; }},
      {"o_lora_rank", [](const ModelConfig& c) { return long{c.o_lora_rank}; }},
      {"o_groups", [](const ModelConfig& c) { return long{c.o_groups}; }},
      {"n_routed_experts", [](const ModelConfig& c) { return long{c.n_routed_experts}; }},
      {"n_shared_experts", [](const ModelConfig& c) { return long{c.n_shared_experts}; }},
      {"num_experts_per_tok", [](const ModelConfig& c) { return long{c.n_activated_experts}; }},
      {"sliding_window", [](const ModelConfig& c) { return long{c.window_size}; }},
      {"index_n_heads", [](const ModelConfig& c) { return long{c.index_n_heads}; }},
      {"index_head_dim", [](const ModelConfig& c) { return long{c.index_head_dim}; }},
      {"index_topk", [](const ModelConfig& c) { return long{c.index_topk}; }},
      {"candidate_topk_blocks", [](const ModelConfig& c) { return long{c.candidate_topk_blocks}; }},
      {"candidate_block_size", [](const ModelConfig& c) { return long{c.candidate_block_size}; }},
      {"hc_mult", [](const ModelConfig& c) { return long{c.hc_mult}; }},
      {"hc_sinkhorn_iters", [](const ModelConfig& c) { return long{c.hc_sinkhorn_iters}; }},
  };
  return k;
}
/// The row encoding ds4 names for its I8 engram tables (DS41_FP8_ROW's bytes).
inline constexpr const char* kDs4EngramEncoding = "e4m3_e8m0_32_row264";

/// antirez's ds4 metadata → ModelConfig: the configuration is deepseek41.config (the release's
/// config.json as one JSON string, read like a checkpoint's config.json: exact doubles); the
/// explicit deepseek41.<HF name> keys that are present must agree with it; the engram hash
/// parameters come from deepseek41.engram.* (primes u32, no offsets: each layer's offsets are the
/// running sums of its primes, the first 0; pad_id is the compressed id).
inline ModelConfig read_config_ds4(const GgufShards& s) {
  MetaReader m(s.meta());
  const GgufFile& f = s.meta();
  const std::string where = s.path() + " key '" + key("config") + "'";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(m.str(key("config")));
  } catch (const nlohmann::json::exception& e) {
    fail("gguf ", where, " is not JSON: ", e.what());
  }
  const safetensors::MappedConfig mc = safetensors::map_config(j, where);
  safetensors::CheckpointParams p;
  if (f.has(key("max_position_embeddings"))) p.max_seq_len = static_cast<long>(m.integer(key("max_position_embeddings")));
  else if (mc.generation.max_position_embeddings) p.max_seq_len = *mc.generation.max_position_embeddings;
  DS41_CHECK(p.max_seq_len > 0, "gguf ", s.path(), ": missing key '", key("max_position_embeddings"),
             "' (and no max_position_embeddings in '", key("config"), "')");
  std::vector<int> layer_ids;
  if (f.has(key("engram.layer_ids"))) {
    if (f.has(key("engram.encoding"))) {
      const std::string enc = m.str(key("engram.encoding"));
      DS41_CHECK(enc == kDs4EngramEncoding, "gguf ", s.path(), ": key '", key("engram.encoding"), "' = \"", enc,
                 "\", ds41 reads \"", kDs4EngramEncoding, "\" rows");
    }
    for (int64_t l : m.ints(key("engram.layer_ids"))) layer_ids.push_back(static_cast<int>(l));
    EngramHashParams e;
    for (int64_t t : m.ints(key("engram.token_map"))) e.token_map.push_back(static_cast<int32_t>(t));
    e.pad_id = m.integer(key("engram.pad_id"));
    e.multipliers = m.ints(key("engram.multipliers"));
    e.primes = m.ints(key("engram.primes"));
    DS41_CHECK(!layer_ids.empty() && e.primes.size() % layer_ids.size() == 0, "gguf ", s.path(), ": key '",
               key("engram.primes"), "' has ", e.primes.size(), " entries, not a multiple of the ", layer_ids.size(),
               " engram layers");
    const size_t cols = e.primes.size() / layer_ids.size();
    for (size_t l = 0; l < layer_ids.size(); ++l) {
      int64_t run = 0;
      for (size_t col = 0; col < cols; ++col) {
        e.offsets.push_back(run);
        run += e.primes[l * cols + col];
      }
    }
    p.engram = std::move(e);
  }
  ModelConfig c = safetensors::model_config_from_args(mc.args, where, p, nullptr, &mc.key_of);
  for (const Ds4IntKey& k : ds4_int_keys())
    if (f.has(key(k.key)))
      DS41_CHECK(m.integer(key(k.key)) == k.get(c), "gguf ", s.path(), ": key '", key(k.key), "' = ",
                 m.integer(key(k.key)), " disagrees with '", key("config"), "' (", k.get(c), ")");
  auto same_ints = [&](const char* k, std::vector<long> want) {
    if (!f.has(key(k))) return;
    std::vector<int64_t> got = m.ints(key(k));
    if (std::string(k) == "compress_ratios" && want.size() > got.size()) want.resize(got.size());  // ds4 keeps the first n_layers
    DS41_CHECK(std::vector<long>(got.begin(), got.end()) == want, "gguf ", s.path(), ": key '", key(k),
               "' disagrees with '", key("config"), "'");
  };
  auto longs = [](const std::vector<int>& v) { return std::vector<long>(v.begin(), v.end()); };
  same_ints("compress_ratios", longs(c.compress_ratios));
  same_ints("kv_source_layer_ids", longs(c.kv_source_layers));
  same_ints("index_source_layer_ids", longs(c.index_source_layers));
  if (!layer_ids.empty()) {
    DS41_CHECK(layer_ids == c.engram_layer_ids, "gguf ", s.path(), ": key '", key("engram.layer_ids"),
               "' disagrees with '", key("config"), "'");
    same_ints("engram.rows", c.engram_num_embeddings);
    if (f.has(key("engram.compressed_vocab_size")))
      DS41_CHECK(m.integer(key("engram.compressed_vocab_size")) == c.engram_compressed_vocab_size, "gguf ", s.path(),
                 ": key '", key("engram.compressed_vocab_size"), "' disagrees with '", key("config"), "'");
    DS41_CHECK(c.engram_pad_id >= 0 && c.engram_pad_id < static_cast<long>(c.engram.token_map.size()) &&
                   c.engram.token_map[static_cast<size_t>(c.engram_pad_id)] == c.engram.pad_id,
               "gguf ", s.path(), ": key '", key("engram.pad_id"), "' = ", c.engram.pad_id,
               " is not the compressed id of the pad token ", c.engram_pad_id);
    for (size_t i = 0; i < layer_ids.size(); ++i) {
      const std::string n = engram_table(Dialect::kDs4, layer_ids[i]);
      const TensorInfo* t = s.find(n);
      DS41_CHECK(t, "gguf ", s.path(), ": missing tensor '", n, "' for engram layer ", layer_ids[i]);
      DS41_CHECK(t->shape()[0] == c.engram_num_embeddings[i], "gguf ", s.path(), ": tensor '", n, "' has ",
                 t->shape()[0], " rows, '", key("config"), "' states ", c.engram_num_embeddings[i]);
    }
  }
  return c;
}

/// ds4's metadata for `c`: general.architecture, deepseek41.config (the HF config.json form, as
/// the release writes it), the explicit HF-named keys (u32 integers, f32 floats, as ds4 writes
/// them: informational, the JSON is what is read), the engram keys (primes u32, no offsets).
inline void write_config_ds4(GgufWriter& w, const ModelConfig& c) {
  safetensors::GenerationInfo gen;
  gen.max_position_embeddings = c.max_seq_len;
  w.set("general.architecture", Value::string(kArch));
  w.set(key("config"), Value::string(safetensors::hf_config_json(c, "fp8", "fp4", gen).dump()));
  for (const Ds4IntKey& k : ds4_int_keys())
    if (k.get(c) >= 0) w.set(key(k.key), Value::u32(static_cast<uint32_t>(k.get(c))));
  w.set(key("max_position_embeddings"), Value::u32(static_cast<uint32_t>(c.max_seq_len)));
  w.set(key("rms_norm_eps"), Value::f32(static_cast<float>(c.norm_eps)));
  w.set(key("hc_eps"), Value::f32(static_cast<float>(c.hc_eps)));
  w.set(key("swiglu_limit"), Value::f32(static_cast<float>(c.swiglu_limit)));
  w.set(key("routed_scaling_factor"), Value::f32(static_cast<float>(c.route_scale)));
  w.set(key("scoring_func"), Value::string(c.score_func == ScoreFunc::kSoftmax   ? "softmax"
                                           : c.score_func == ScoreFunc::kSigmoid ? "sigmoid"
                                                                                 : "sqrtsoftplus"));
  w.set(key("norm_topk_prob"), Value::boolean(c.norm_topk_prob));
  auto u32s = [&](const char* k, const auto& v) {
    std::vector<Value> items;
    for (auto x : v) {
      DS41_CHECK(x >= 0 && static_cast<uint64_t>(x) <= UINT32_MAX, "gguf writer: key '", key(k), "' value ", x,
                 " does not fit u32 (the ds4 dialect's type)");
      items.push_back(Value::u32(static_cast<uint32_t>(x)));
    }
    w.set(key(k), Value::array(ValueType::kU32, std::move(items)));
  };
  std::vector<int> ratios(c.compress_ratios.begin(),
                          c.compress_ratios.begin() + std::min<size_t>(c.compress_ratios.size(), c.n_layers));
  u32s("compress_ratios", ratios);
  u32s("kv_source_layer_ids", c.kv_source_layers);
  u32s("index_source_layer_ids", c.index_source_layers);
  if (c.engram_layer_ids.empty()) return;
  w.set(key("engram.encoding"), Value::string(kDs4EngramEncoding));
  u32s("engram.layer_ids", c.engram_layer_ids);
  u32s("engram.rows", c.engram_num_embeddings);
  w.set(key("engram.compressed_vocab_size"), Value::u32(static_cast<uint32_t>(c.engram_compressed_vocab_size)));
  w.set(key("engram.pad_id"), Value::u32(static_cast<uint32_t>(c.engram.pad_id)));
  u32s("engram.token_map", c.engram.token_map);
  u32s("engram.primes", c.engram.primes);
  std::vector<Value> mult;
  for (int64_t x : c.engram.multipliers) mult.push_back(Value::u64(static_cast<uint64_t>(x)));
  w.set(key("engram.multipliers"), Value::array(ValueType::kU64, std::move(mult)));
}

/// The dialect of a DeepSeek-V4.1 GGUF, from its metadata (and, for mxxm-t's, its tensor
/// spellings): general.architecture must be deepseek41; ds4 writes deepseek41.config and the HF
/// names (deepseek41.hidden_size, ...) and deepseek41.engram.encoding; llama.cpp and mxxm-t write
/// llama.cpp's keys (deepseek41.block_count, ...), mxxm-t with deepseek41.engram.n_heads /
/// head_dim / num_embeddings and the tensors engram_embed, indexer_compressor_kv. Anything else
/// is refused, naming what was seen.
inline Dialect detect_dialect(const GgufShards& s) {
  const GgufFile& f = s.meta();
  const Value* a = f.find("general.architecture");
  const char* expect = "; ds41 reads DeepSeek-V4.1 GGUFs (\"deepseek41\") in the dialects llama.cpp, ds4 and mxxm";
  DS41_CHECK(a, "gguf ", s.path(), ": missing key 'general.architecture'", expect);
  DS41_CHECK(a->type == ValueType::kString, "gguf ", s.path(), ": 'general.architecture' has type ",
             value_type_name(a->type), ", expected string");
  DS41_CHECK(a->str == kArch, "gguf ", s.path(), ": 'general.architecture' = \"", a->str, "\", expected \"", kArch,
             "\"", expect);
  auto has = [&](const char* k) { return f.has(key(k)); };
  auto has_tensor = [&](const std::string& suffix) {
    for (const auto& [n, t] : s.tensors())
      if (n.size() > suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
    return false;
  };
  if (has("config") || has("engram.encoding") || has("hidden_size") || has("num_hidden_layers")) return Dialect::kDs4;
  if (has("block_count") || has("embedding_length") || has("context_length")) {
    if (has("engram.n_heads") || has("engram.head_dim") || has("engram.num_embeddings") ||
        has_tensor(".engram_embed.weight") || has_tensor(".indexer_compressor_kv.weight"))
      return Dialect::kMxxm;
    return Dialect::kLlamaCpp;
  }
  std::string seen;
  int n = 0;
  for (const std::string& k : f.keys())
    if (k.rfind(std::string(kArch) + ".", 0) == 0 && n++ < 12) seen += (seen.empty() ? "" : ", ") + k;
  fail("gguf ", s.path(), ": no DeepSeek-V4.1 GGUF dialect fits the metadata (general.architecture \"", kArch,
       "\", keys seen: ", seen.empty() ? std::string("none under deepseek41.") : seen,
       "); expected llama.cpp's deepseek41.block_count/embedding_length/context_length, or ds4's deepseek41.config/"
       "hidden_size/num_hidden_layers/engram.encoding");
}

/// The metadata of a DeepSeek-V4.1 GGUF in `dialect` → ModelConfig; errors name the file and key.
/// `derived`, when given, receives the facts filled in without their key (llama.cpp and mxxm
/// dialects: read_config_llama).
inline ModelConfig read_config(const GgufShards& s, Dialect dialect, std::vector<DerivedFact>* derived = nullptr) {
  ModelConfig c = dialect == Dialect::kDs4 ? read_config_ds4(s) : read_config_llama(s, dialect, derived);
  return c;
}
/// read_config in the dialect detect_dialect finds.
inline ModelConfig read_config(const GgufShards& s) { return read_config(s, detect_dialect(s)); }

/// The reference name a GGUF tensor of `dialect` holds (for a merged expert tensor, "layers.L.
/// ffn.experts.w{1,2,3}.weight"; for an engram table, "layers.L.engram.embed"), or nothing when
/// the name is not one of the dialect's (an ignored tensor, such as exp_probs_b_vl, included).
inline std::optional<std::string> from_gguf(const std::string& name, Dialect dialect) {
  for (const LayerName& n : kTopNames)
    if (name == n.gguf) return std::string(n.ref);
  if (name.rfind("blk.", 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long layer = std::strtol(name.c_str() + 4, &end, 10);
  if (end == name.c_str() + 4 || *end != '.' || layer < 0) return std::nullopt;
  const std::string rest(end + 1), p = "layers." + std::to_string(layer) + ".";
  for (const LayerName& n : kLayerNames)
    if (rest == layer_suffix(dialect, n)) return p + n.ref;
  for (int k = 1; k <= 3; ++k)
    if (rest == expert_tensor(k)) return p + "ffn.experts.w" + std::to_string(k) + ".weight";
  if (rest == dialect_spec(dialect).engram_table) return p + "engram.embed";
  return std::nullopt;
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
