// ds41/io/gguf_names.hpp — the tables between the reference's state_dict names (what the
// library asks a WeightSource for) and the GGUF tensor names of the three published DeepSeek-V4.1
// dialects (docs/GGUF.md "Dialects"): llama.cpp's deepseek41 (PR #28696, vcruz305's files; what
// ds41 writes by default), antirez's ds4 (DwarfStar) and mxxm-t's. Each dialect is one DialectSpec:
// the suffixes it spells differently from llama.cpp, the name of its engram table, and the
// tensors it carries that ds41 accepts and ignores.
//
// Three reference tensors have no GGUF tensor of their own: a routed expert's w1/w2/w3 is one
// slice of the merged blk.N.ffn_{gate,down,up}_exps (every dialect stores experts stacked on the
// outermost dimension: ggml dims [K, N, E]), and an engram table's codes and scales are the two
// halves of each row of the table (DS41_FP8_ROW, or I8 row264).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "../core/fp_exact_begin.hpp"
namespace ds41::gguf {

/// What part of a GGUF tensor a reference tensor is.
enum class Part { kWhole, kExpertSlice, kEngramCodes, kEngramScales };

struct NameRef {
  std::string gguf;  // GGUF tensor name
  Part part = Part::kWhole;
  int expert = -1;  // kExpertSlice: which expert
};

/// Reference suffix (after "layers.N.") ↔ llama.cpp suffix (after "blk.N.").
struct LayerName {
  const char* ref;
  const char* gguf;
};
inline constexpr LayerName kLayerNames[] = {
    {"hc_attn_fn", "hc_attn_fn.weight"},
    {"hc_attn_base", "hc_attn_base.weight"},
    {"hc_attn_scale", "hc_attn_scale.weight"},
    {"hc_ffn_fn", "hc_ffn_fn.weight"},
    {"hc_ffn_base", "hc_ffn_base.weight"},
    {"hc_ffn_scale", "hc_ffn_scale.weight"},
    {"attn_norm.weight", "attn_norm.weight"},
    {"ffn_norm.weight", "ffn_norm.weight"},
    {"attn.attn_sink", "attn_sinks.weight"},
    {"attn.wq_a.weight", "attn_q_a.weight"},
    {"attn.q_norm.weight", "attn_q_a_norm.weight"},
    {"attn.wq_b.weight", "attn_q_b.weight"},
    {"attn.wkv.weight", "attn_kv.weight"},
    {"attn.kv_norm.weight", "attn_kv_a_norm.weight"},
    {"attn.wo_a.weight", "attn_output_a.weight"},
    {"attn.wo_b.weight", "attn_output_b.weight"},
    {"attn.compressor.wkv.weight", "attn_compressor_kv.weight"},
    {"attn.compressor.wgate.weight", "attn_compressor_gate.weight"},
    {"attn.compressor.norm.weight", "attn_compressor_norm.weight"},
    {"attn.indexer.wq_b.weight", "indexer.attn_q_b.weight"},
    {"attn.indexer.weights_proj.weight", "indexer.proj.weight"},
    {"attn.indexer.wk.weight", "indexer.attn_k.weight"},
    {"attn.indexer.k_norm.weight", "indexer.k_norm.weight"},
    {"ffn.gate.weight", "ffn_gate_inp.weight"},
    {"ffn.gate.bias", "exp_probs_b.bias"},
    {"ffn.shared_experts.w1.weight", "ffn_gate_shexp.weight"},
    {"ffn.shared_experts.w2.weight", "ffn_down_shexp.weight"},
    {"ffn.shared_experts.w3.weight", "ffn_up_shexp.weight"},
    {"engram.wkv.weight", "engram_wkv.weight"},
    {"engram.q_weight", "engram_q.weight"},
    {"engram.k_weight", "engram_k.weight"},
};
inline constexpr LayerName kTopNames[] = {
    {"embed.weight", "token_embd.weight"},
    {"norm.weight", "output_norm.weight"},
    {"head.weight", "output.weight"},
};
/// Routed experts: reference wN → merged GGUF tensor.
inline const char* expert_tensor(int w) { return w == 1 ? "ffn_gate_exps.weight" : w == 2 ? "ffn_down_exps.weight" : "ffn_up_exps.weight"; }
inline std::string blk(int layer, const char* suffix) { return "blk." + std::to_string(layer) + "." + suffix; }

// ------------------------------------------------------------------------------------ dialects
/// The published metadata and tensor-name dialects (detect_dialect in gguf_config.hpp).
enum class Dialect {
  kLlamaCpp,  // llama.cpp's deepseek41 (PR #28696 / vcruz305), plus ds41's own keys: what ds41 writes
  kDs4,       // antirez's ds4 (DwarfStar): HF config names, deepseek41.config JSON, row264 engram
  kMxxm,      // mxxm-t's: llama.cpp keys with its own engram keys and a few tensor spellings
};

struct DialectSpec {
  Dialect id;
  const char* name;  // as --dialect takes it
  const char* what;  // for messages and docs
  std::vector<LayerName> renames;        // reference suffix -> this dialect's suffix, where it differs
  const char* engram_table;              // the engram table's suffix
  std::vector<const char*> ignored;      // layer suffixes present in published files that ds41 ignores
};

inline const std::vector<DialectSpec>& dialects() {
  static const std::vector<DialectSpec> d = {
      {Dialect::kLlamaCpp, "llama.cpp", "llama.cpp deepseek41 (PR #28696, vcruz305's files)", {}, "engram_embd.weight",
       {"exp_probs_b_vl.bias"}},
      {Dialect::kDs4, "ds4", "antirez's ds4 (DwarfStar)",
       {{"engram.wkv.weight", "engram_kv.weight"},
        {"engram.q_weight", "engram_q_norm.weight"},
        {"engram.k_weight", "engram_k_norm.weight"}},
       "engram_embd.weight", {"exp_probs_b_vl.bias"}},
      {Dialect::kMxxm, "mxxm", "mxxm-t's DeepSeek-V4.1-Flash-GGUF",
       {{"attn.indexer.wk.weight", "indexer_compressor_kv.weight"},
        {"attn.indexer.k_norm.weight", "indexer_compressor_norm.weight"}},
       "engram_embed.weight", {"exp_probs_b_vl.bias"}},
  };
  return d;
}
inline const DialectSpec& dialect_spec(Dialect d) {
  for (const DialectSpec& s : dialects())
    if (s.id == d) return s;
  return dialects()[0];
}
inline const char* dialect_name(Dialect d) { return dialect_spec(d).name; }
/// "llama.cpp", "ds4" or "mxxm" -> the dialect; nothing for another name.
inline std::optional<Dialect> dialect_from_name(const std::string& n) {
  for (const DialectSpec& s : dialects())
    if (n == s.name) return s.id;
  return std::nullopt;
}
/// The dialect's GGUF suffix for a reference layer suffix (llama.cpp's unless renamed).
inline const char* layer_suffix(Dialect d, const LayerName& n) {
  for (const LayerName& r : dialect_spec(d).renames)
    if (std::string(r.ref) == n.ref) return r.gguf;
  return n.gguf;
}
inline std::string engram_table(Dialect d, int layer) { return blk(layer, dialect_spec(d).engram_table); }
/// Whether `gguf_name` is a tensor of the dialect's published files that ds41 accepts and ignores
/// (the vision-token router bias ffn.gate.bias_vl, which text-only decoding never uses).
inline bool ignored_tensor(Dialect d, const std::string& gguf_name) {
  for (const char* s : dialect_spec(d).ignored) {
    const std::string suf = std::string(".") + s;
    if (gguf_name.rfind("blk.", 0) == 0 && gguf_name.size() > suf.size() &&
        gguf_name.compare(gguf_name.size() - suf.size(), suf.size(), suf) == 0)
      return true;
  }
  return false;
}

/// The GGUF location of a reference tensor in dialect `d`, or nothing when the name is not one the
/// model uses.
inline std::optional<NameRef> to_gguf(const std::string& ref, Dialect d = Dialect::kLlamaCpp) {
  for (const LayerName& n : kTopNames)
    if (ref == n.ref) return NameRef{n.gguf};
  if (ref.rfind("layers.", 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long layer = std::strtol(ref.c_str() + 7, &end, 10);
  if (end == ref.c_str() + 7 || *end != '.' || layer < 0) return std::nullopt;
  const std::string rest(end + 1);
  const int L = static_cast<int>(layer);
  for (const LayerName& n : kLayerNames)
    if (rest == n.ref) return NameRef{blk(L, layer_suffix(d, n))};
  if (rest == "engram.embed.weight") return NameRef{engram_table(d, L), Part::kEngramCodes};
  if (rest == "engram.embed.scale") return NameRef{engram_table(d, L), Part::kEngramScales};
  const std::string ex = "ffn.experts.";
  if (rest.rfind(ex, 0) == 0) {
    const char* p = rest.c_str() + ex.size();
    const long e = std::strtol(p, &end, 10);
    if (end == p || e < 0) return std::nullopt;
    const std::string w(end);
    for (int k = 1; k <= 3; ++k)
      if (w == ".w" + std::to_string(k) + ".weight")
        return NameRef{blk(L, expert_tensor(k)), Part::kExpertSlice, static_cast<int>(e)};
  }
  return std::nullopt;
}

}  // namespace ds41::gguf
#include "../core/fp_exact_end.hpp"
