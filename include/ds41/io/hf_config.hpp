// ds41/io/hf_config.hpp — the two config forms of DeepSeek's release, mapped onto one:
//
//   DIR/config.json            the Hugging Face form (model_type deepseek_v41, the text model's keys
//                              under text_config with HF names, rope_scaling, quantization_config,
//                              vision_config, bos/eos/pad ids)
//   DIR/inference/config.json  the ModelArgs form (the field names of the reference model.py)
//
// Both are mapped to ModelArgs names (`MappedConfig::args`), remembering for every field the key
// the file wrote it under, so that a disagreement between the files can name both keys. The
// mapping table is here once and used both ways (`map_config` reads, `args_to_hf` writes);
// docs/SAFETENSORS.md has it as a table. Keys ds41 does not model are collected and reported in
// one note per file, never dropped silently and never fatal; a few that would change the
// arithmetic (quantization_config, rope_scaling's type, num_key_value_heads, ...) are checked.
#pragma once
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::safetensors {

/// What a decoder needs beyond ModelConfig; only the HF form states it (the ModelArgs form has no
/// token ids). max_position_embeddings is informational: the KV caches are sized by the load's
/// max_seq_len (a runtime field of ModelArgs, set by the caller as generate.py does).
struct GenerationInfo {
  std::optional<long> bos_token_id;
  std::vector<long> eos_token_ids;  // HF allows one id or a list
  std::optional<long> pad_token_id;
  std::optional<long> max_position_embeddings;
  bool is_eos(long id) const { return std::find(eos_token_ids.begin(), eos_token_ids.end(), id) != eos_token_ids.end(); }
};

/// One config file mapped to ModelArgs field names.
struct MappedConfig {
  std::string path;
  bool hf_form = false;
  nlohmann::json args = nlohmann::json::object();  // ModelArgs name -> value
  std::map<std::string, std::string> key_of;       // ModelArgs name -> the key as the file writes it
  GenerationInfo generation;
  std::vector<std::string> not_modelled;  // keys read past: a part of the release ds41 does not model
  std::vector<std::string> unknown;       // keys neither form defines
};

/// An HF name and its ModelArgs name.
struct KeyPair {
  const char* hf;
  const char* args;
};

/// text_config keys (HF) -> ModelArgs fields. Same-named fields are listed too, so that this is the
/// whole correspondence (the writer emits exactly these).
inline const std::vector<KeyPair>& hf_text_keys() {
  static const std::vector<KeyPair> k = {
      {"vocab_size", "vocab_size"},
      {"hidden_size", "dim"},
      {"moe_intermediate_size", "moe_inter_dim"},
      {"num_hidden_layers", "n_layers"},
      {"num_nextn_predict_layers", "n_mtp_layers"},
      {"num_attention_heads", "n_heads"},
      {"n_routed_experts", "n_routed_experts"},
      {"n_shared_experts", "n_shared_experts"},
      {"num_experts_per_tok", "n_activated_experts"},
      {"scoring_func", "score_func"},
      {"gate_temp", "gate_temp"},
      {"norm_topk_prob", "norm_topk_prob"},
      {"routed_scaling_factor", "route_scale"},
      {"swiglu_limit", "swiglu_limit"},
      {"q_lora_rank", "q_lora_rank"},
      {"head_dim", "head_dim"},
      {"qk_rope_head_dim", "rope_head_dim"},
      {"rms_norm_eps", "norm_eps"},
      {"o_groups", "o_groups"},
      {"o_lora_rank", "o_lora_rank"},
      {"sliding_window", "window_size"},
      {"compress_ratios", "compress_ratios"},
      {"kv_source_layer_ids", "kv_source_layers"},
      {"index_source_layer_ids", "index_source_layers"},
      {"compress_rope_theta", "compress_rope_theta"},
      {"rope_theta", "rope_theta"},
      {"index_n_heads", "index_n_heads"},
      {"index_head_dim", "index_head_dim"},
      {"index_topk", "index_topk"},
      {"candidate_source_layer_id", "candidate_source_layer"},
      {"candidate_topk_blocks", "candidate_topk_blocks"},
      {"candidate_block_size", "candidate_block_size"},
      {"hc_mult", "hc_mult"},
      {"hc_sinkhorn_iters", "hc_sinkhorn_iters"},
      {"hc_eps", "hc_eps"},
      {"engram_layer_ids", "engram_layer_ids"},
      {"engram_num_embeddings", "engram_num_embeddings"},
      {"engram_max_ngram_size", "engram_max_ngram_size"},
      {"engram_vocab_size", "engram_vocab_size"},
      {"engram_n_heads", "engram_n_heads"},
      {"engram_head_dim", "engram_head_dim"},
      {"engram_pad_token_id", "engram_pad_id"},
      {"engram_compressed_vocab_size", "engram_compressed_vocab_size"},
      {"dspark_block_size", "dspark_block_size"},
      {"dspark_noise_token_id", "dspark_noise_token_id"},
      {"dspark_target_layer_ids", "dspark_target_layer_ids"},
      {"dspark_markov_rank", "dspark_markov_rank"},
      {"dspark_n_routed_experts", "dspark_n_routed_experts"},
      {"dspark_num_experts_per_tok", "dspark_n_activated_experts"},
  };
  return k;
}
/// rope_scaling keys (type yarn) -> ModelArgs fields.
inline const std::vector<KeyPair>& hf_rope_keys() {
  static const std::vector<KeyPair> k = {{"factor", "rope_factor"},
                                         {"original_max_position_embeddings", "original_seq_len"},
                                         {"beta_fast", "beta_fast"},
                                         {"beta_slow", "beta_slow"}};
  return k;
}
/// vision_config keys -> ModelArgs vision_* fields.
inline const std::vector<KeyPair>& hf_vision_keys() {
  static const std::vector<KeyPair> k = {
      {"num_hidden_layers", "vision_n_layers"},     {"hidden_size", "vision_dim"},
      {"num_attention_heads", "vision_n_heads"},    {"intermediate_size", "vision_inter_dim"},
      {"patch_size", "vision_patch_size"},          {"rope_theta", "vision_rope_theta"},
      {"downsample_ratio", "vision_downsample_ratio"}, {"max_image_tokens", "vision_max_n_token"},
      {"min_pixels", "vision_min_pixels"},          {"max_wh_ratio", "vision_max_wh_ratio"}};
  return k;
}

/// Every field of model.py's ModelArgs (the keys the ModelArgs form may hold).
inline const std::set<std::string>& model_args_fields() {
  static const std::set<std::string> s = [] {
    std::set<std::string> f = {"max_batch_size", "max_seq_len", "temperature", "dtype", "expert_dtype",
                               "image_token_id"};
    for (const auto* t : {&hf_text_keys(), &hf_rope_keys(), &hf_vision_keys()})
      for (const KeyPair& p : *t) f.insert(p.args);
    return f;
  }();
  return s;
}

/// ModelArgs fields ds41 reads past: runtime fields, and parts it does not model (vision, the
/// image token). DSpark's dspark_* fields it models (model/dspark.hpp).
inline bool not_modelled_arg(const std::string& k) {
  return k == "max_batch_size" || k == "max_seq_len" || k == "temperature" || k == "image_token_id" ||
         k.rfind("vision_", 0) == 0;
}

/// The HF form is recognised by `text_config` or `model_type` (the ModelArgs form has neither).
inline bool is_hf_form(const nlohmann::json& j) {
  return j.is_object() && (j.contains("text_config") || j.contains("model_type"));
}

namespace detail {

inline std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

/// A token id (integer >= 0), or a list of them for eos_token_id.
inline std::vector<long> token_ids(const MappedConfig& m, const std::string& key, const nlohmann::json& v, bool list_ok) {
  auto one = [&](const nlohmann::json& x) {
    DS41_CHECK(x.is_number_integer() && !x.is_boolean() && x.get<int64_t>() >= 0 && x.get<int64_t>() < (1LL << 40),
               "config: ", m.path, " ", key, " = ", v.dump(), " is not a token id");
    return x.get<long>();
  };
  if (v.is_array() && list_ok) {
    std::vector<long> out;
    for (const auto& x : v) out.push_back(one(x));
    return out;
  }
  return {one(v)};
}

/// Values equal as the reference would read them: numbers by value (10000 == 10000.0), lists
/// element by element.
inline bool same_value(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.is_number() && b.is_number() && !a.is_boolean() && !b.is_boolean()) {
    if (a.is_number_integer() && b.is_number_integer()) {
      if (a.is_number_unsigned() || b.is_number_unsigned()) {
        if (a.get<int64_t>() < 0 || b.get<int64_t>() < 0) return false;
        return a.get<uint64_t>() == b.get<uint64_t>();
      }
      return a.get<int64_t>() == b.get<int64_t>();
    }
    return a.get<double>() == b.get<double>();
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!same_value(a[i], b[i])) return false;
    return true;
  }
  return a == b;
}

/// Puts ModelArgs field `k` from file key `from`; a file naming one field twice (two spellings)
/// must give it one value.
inline void put(MappedConfig& m, const std::string& k, const nlohmann::json& v, const std::string& from) {
  auto it = m.key_of.find(k);
  if (it != m.key_of.end()) {
    DS41_CHECK(same_value(m.args[k], v), "config: ", m.path, " ", it->second, " = ", m.args[k].dump(), " disagrees with ",
               from, " = ", v.dump(), " (both are ModelArgs '", k, "')");
    return;
  }
  m.args[k] = v;
  m.key_of[k] = from;
}

inline const char* args_name(const std::vector<KeyPair>& table, const std::string& hf) {
  for (const KeyPair& p : table)
    if (hf == p.hf) return p.args;
  return nullptr;
}

/// quantization_config: the release's block-scaled fp8 (e4m3 weights, one ue8m0 scale per 32x32
/// block, activations quantised per block when used) is the only scheme ds41 reads.
inline void map_quantization(MappedConfig& m, const nlohmann::json& q) {
  const std::string at = "config: " + m.path + " quantization_config";
  DS41_CHECK(q.is_object(), at, " = ", q.dump(), " is not an object");
  auto need = [&](const char* k, const nlohmann::json& want) {
    auto it = q.find(k);
    DS41_CHECK(it != q.end(), at, " has no '", k, "'; ds41 reads ", want.dump(), " (the release's fp8 scheme)");
    DS41_CHECK(same_value(*it, want), at, ".", k, " = ", it->dump(), ", ds41 reads only ", want.dump(),
               " (the release's fp8 scheme: e4m3 weights, a ue8m0 scale per 32x32 block)");
  };
  need("quant_method", "fp8");
  need("weight_block_size", nlohmann::json::array({32, 32}));
  need("scale_fmt", "ue8m0");
  put(m, "dtype", "fp8", "quantization_config.quant_method");
  for (const auto& [k, v] : q.items()) {
    if (k == "quant_method" || k == "weight_block_size" || k == "scale_fmt") continue;
    if (k == "activation_scheme") {
      DS41_CHECK(v == "dynamic", at, ".activation_scheme = ", v.dump(),
                 ", ds41 quantises activations per block as they come (\"dynamic\")");
    } else if (k == "expert_dtype") {
      DS41_CHECK(v.is_null() || v == "fp4", at, ".expert_dtype = ", v.dump(), ", expected \"fp4\" or null");
      put(m, "expert_dtype", v, "quantization_config.expert_dtype");
    } else {
      m.unknown.push_back("quantization_config." + k);
    }
  }
}

/// rope_scaling: YaRN's four numbers, or null / absent: no YaRN, which in ModelArgs is
/// original_seq_len = 0 (model.py's precompute_freqs_cis then never reads factor or beta_*).
inline void map_rope_scaling(MappedConfig& m, const nlohmann::json* rs, const std::string& prefix) {
  const std::string key = prefix + "rope_scaling";
  if (!rs || rs->is_null()) {
    put(m, "original_seq_len", 0, key + (rs ? " (null)" : " (absent)") + " -> original_seq_len");
    return;
  }
  DS41_CHECK(rs->is_object(), "config: ", m.path, " ", key, " = ", rs->dump(), " is not an object or null");
  const nlohmann::json* type = rs->contains("rope_type") ? &rs->at("rope_type") : rs->contains("type") ? &rs->at("type") : nullptr;
  DS41_CHECK(type && *type == "yarn", "config: ", m.path, " ", key, ".rope_type = ", type ? type->dump() : "(absent)",
             ", ds41 implements only \"yarn\" (model.py's precompute_freqs_cis)");
  for (const auto& [k, v] : rs->items()) {
    if (k == "rope_type" || k == "type") continue;
    if (const char* a = args_name(hf_rope_keys(), k)) put(m, a, v, key + "." + k);
    else m.unknown.push_back(key + "." + k);
  }
  DS41_CHECK(m.args.contains("original_seq_len"), "config: ", m.path, " ", key,
             " has no original_max_position_embeddings (YaRN needs the training context)");
}

/// Keys of the HF text config that ModelArgs has no field for: the architecture's constants are
/// checked (a different value would be a different model), the rest read past.
inline void map_hf_only_text_key(MappedConfig& m, const std::string& key, const std::string& shown, const nlohmann::json& v) {
  auto must = [&](const nlohmann::json& want, const char* why) {
    DS41_CHECK(same_value(v, want), "config: ", m.path, " ", shown, " = ", v.dump(), ", ds41 models ", want.dump(), " (",
               why, ")");
  };
  if (key == "num_key_value_heads") must(1, "one latent KV shared by all heads");
  else if (key == "hidden_act") must("silu", "SwiGLU experts");
  else if (key == "attention_bias") must(false, "no bias in any Linear");
  else if (key == "tie_word_embeddings") must(false, "embed.weight and head.weight are separate tensors");
  else if (key == "model_type") must("deepseek_v41_text", "DeepSeek-V4.1's text model");
  else if (key == "max_position_embeddings") {
    m.generation.max_position_embeddings = token_ids(m, shown, v, false)[0];
    m.not_modelled.push_back(shown);
    return;
  } else if (key == "attention_dropout" || key == "initializer_range" || key == "use_cache" || key == "topk_method") {
    m.not_modelled.push_back(shown);
    return;
  } else {
    m.unknown.push_back(shown);
    return;
  }
}

inline void map_hf_text(MappedConfig& m, const nlohmann::json& t, const std::string& prefix) {
  for (const auto& [k, v] : t.items()) {
    const std::string shown = prefix + k;
    if (k == "rope_scaling") continue;  // below, also when absent
    if (const char* a = args_name(hf_text_keys(), k)) {
      put(m, a, v, shown);
    } else if (model_args_fields().count(k)) {
      put(m, k, v, shown);  // a ModelArgs spelling inside the HF form: accepted, ports read both
    } else {
      map_hf_only_text_key(m, k, shown, v);
    }
  }
  map_rope_scaling(m, t.contains("rope_scaling") ? &t.at("rope_scaling") : nullptr, prefix);
}

}  // namespace detail

/// A parsed config.json (either form) mapped to ModelArgs names. Errors name `path` and the key.
inline MappedConfig map_config(const nlohmann::json& j, const std::string& path) {
  using namespace detail;
  MappedConfig m;
  m.path = path;
  DS41_CHECK(j.is_object(), "config: ", path, ": not a JSON object");
  if (!is_hf_form(j)) {
    for (const auto& [k, v] : j.items()) {
      if (!model_args_fields().count(k)) m.unknown.push_back(k);
      else put(m, k, v, k);
    }
    for (const auto& [k, from] : m.key_of)
      if (not_modelled_arg(k)) m.not_modelled.push_back(from);
    return m;
  }
  m.hf_form = true;
  const bool nested = j.contains("text_config");
  if (nested)
    DS41_CHECK(j["text_config"].is_object(), "config: ", path, " text_config = ", j["text_config"].dump(),
               " is not an object");
  nlohmann::json flat_text = nlohmann::json::object();  // an HF config without text_config has the text keys on top
  for (const auto& [k, v] : j.items()) {
    if (k == "model_type") {
      DS41_CHECK(v == "deepseek_v41", "config: ", path, " model_type = ", v.dump(),
                 ", expected \"deepseek_v41\" (DeepSeek-V4.1's Hugging Face form)");
    } else if (k == "bos_token_id") {
      m.generation.bos_token_id = token_ids(m, k, v, false)[0];
    } else if (k == "eos_token_id") {
      m.generation.eos_token_ids = token_ids(m, k, v, true);
    } else if (k == "pad_token_id") {
      m.generation.pad_token_id = token_ids(m, k, v, false)[0];
    } else if (k == "quantization_config") {
      map_quantization(m, v);
    } else if (k == "image_token_id") {
      put(m, "image_token_id", v, k);
    } else if (k == "vision_config") {
      if (v.is_null()) continue;
      DS41_CHECK(v.is_object(), "config: ", path, " vision_config = ", v.dump(), " is not an object");
      for (const auto& [vk, vv] : v.items()) {
        if (const char* a = args_name(hf_vision_keys(), vk)) put(m, a, vv, "vision_config." + vk);
        else if (vk != "model_type") m.unknown.push_back("vision_config." + vk);
      }
    } else if (k == "architectures" || k == "transformers_version" || k == "dtype" || k == "torch_dtype" ||
               k == "auto_map") {
      m.not_modelled.push_back(k);  // HF loader metadata (dtype here is torch's, not ModelArgs')
    } else if (k == "text_config") {
      map_hf_text(m, v, "text_config.");
    } else if (nested) {
      m.unknown.push_back(k);
    } else {
      flat_text[k] = v;
    }
  }
  if (!nested) map_hf_text(m, flat_text, "");
  // fields ModelArgs has but ds41 does not model: reported once, with the names the file uses
  for (const auto& [k, from] : m.key_of)
    if (not_modelled_arg(k) && from.rfind("vision_config.", 0) != 0) m.not_modelled.push_back(from);
  if (j.contains("vision_config") && !j["vision_config"].is_null()) m.not_modelled.push_back("vision_config");
  return m;
}

/// The load notes of one mapped file: what was read past, and what neither form defines.
inline std::vector<std::string> config_notes(const MappedConfig& m) {
  std::vector<std::string> n;
  if (!m.not_modelled.empty())
    n.push_back("config " + m.path + ": not modelled by ds41, read past: " + detail::joined(m.not_modelled));
  if (!m.unknown.empty()) n.push_back("config " + m.path + ": unknown keys, ignored: " + detail::joined(m.unknown));
  return n;
}

/// Every field both files state must have one value (after mapping to ModelArgs names; the units
/// are the same in both forms). The error names both files and both keys.
inline void check_agreement(const MappedConfig& a, const MappedConfig& b) {
  for (const auto& [k, va] : a.args.items()) {
    auto it = b.args.find(k);
    if (it == b.args.end()) continue;
    DS41_CHECK(detail::same_value(va, *it), "config: ", a.path, " ", a.key_of.at(k), " = ", va.dump(), " disagrees with ",
               b.path, " ", b.key_of.at(k), " = ", it->dump());
  }
}

/// The union of two agreeing mapped configs (a's keys first).
inline nlohmann::json merged_args(const MappedConfig& a, const MappedConfig& b) {
  nlohmann::json j = a.args;
  for (const auto& [k, v] : b.args.items())
    if (!j.contains(k)) j[k] = v;
  return j;
}

/// The inverse of map_config for the HF form: ModelArgs-form fields -> DeepSeek's config.json
/// layout (top level, quantization_config, text_config, vision_config). `original_seq_len` 0
/// becomes rope_scaling null; a negative candidate_source_layer (off) is left out, as the release
/// leaves it out when off.
inline nlohmann::ordered_json args_to_hf(const nlohmann::json& args, const GenerationInfo& gen) {
  using nlohmann::ordered_json;
  ordered_json j;
  j["architectures"] = {"DeepseekV41ForCausalLM"};
  j["model_type"] = "deepseek_v41";
  j["dtype"] = "bfloat16";
  if (gen.bos_token_id) j["bos_token_id"] = *gen.bos_token_id;
  if (gen.eos_token_ids.size() == 1) j["eos_token_id"] = gen.eos_token_ids[0];
  else if (!gen.eos_token_ids.empty()) j["eos_token_id"] = gen.eos_token_ids;
  if (gen.pad_token_id) j["pad_token_id"] = *gen.pad_token_id;
  if (args.contains("image_token_id")) j["image_token_id"] = args["image_token_id"];
  if (args.value("dtype", "") == "fp8") {
    ordered_json q;
    q["quant_method"] = "fp8";
    q["activation_scheme"] = "dynamic";
    q["weight_block_size"] = {32, 32};
    q["scale_fmt"] = "ue8m0";
    if (args.contains("expert_dtype")) q["expert_dtype"] = args["expert_dtype"];
    j["quantization_config"] = q;
  }
  ordered_json t;
  t["model_type"] = "deepseek_v41_text";
  for (const KeyPair& p : hf_text_keys()) {
    if (!args.contains(p.args)) continue;
    const nlohmann::json& v = args[p.args];
    if (std::string(p.args) == "candidate_source_layer" && v.is_number_integer() && v.get<long>() < 0) continue;
    t[p.hf] = v;
  }
  t["num_key_value_heads"] = 1;
  t["hidden_act"] = "silu";
  t["tie_word_embeddings"] = false;
  if (gen.max_position_embeddings) t["max_position_embeddings"] = *gen.max_position_embeddings;
  if (args.value("original_seq_len", 0L) > 0) {
    ordered_json rs;
    rs["rope_type"] = "yarn";
    for (const KeyPair& p : hf_rope_keys())
      if (args.contains(p.args)) rs[p.hf] = args[p.args];
    t["rope_scaling"] = rs;
  } else {
    t["rope_scaling"] = nullptr;
  }
  j["text_config"] = t;
  ordered_json v = ordered_json::object();
  v["model_type"] = "deepseek_v41_vision";
  for (const KeyPair& p : hf_vision_keys())
    if (args.contains(p.args)) v[p.hf] = args[p.args];
  j["vision_config"] = v;
  return j;
}

}  // namespace ds41::safetensors
#include "../core/fp_exact_end.hpp"
