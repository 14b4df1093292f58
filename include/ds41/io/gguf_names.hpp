// ds41/io/gguf_names.hpp — the one table between the reference's state_dict names (what the
// library asks a WeightSource for) and llama.cpp's deepseek41 GGUF tensor names.
//
// Three reference tensors have no GGUF tensor of their own: a routed expert's w1/w2/w3 is one
// slice of the merged blk.N.ffn_{gate,down,up}_exps (llama.cpp stores experts stacked on the
// outermost dimension), and an engram table's codes and scales are the two halves of each row of
// blk.N.engram_embd.weight (type DS41_FP8_ROW).
#pragma once
#include <cstdlib>
#include <optional>
#include <string>

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

/// The GGUF location of a reference tensor, or nothing when the name is not one the model uses.
inline std::optional<NameRef> to_gguf(const std::string& ref) {
  for (const LayerName& n : kTopNames)
    if (ref == n.ref) return NameRef{n.gguf};
  if (ref.rfind("layers.", 0) != 0) return std::nullopt;
  char* end = nullptr;
  const long layer = std::strtol(ref.c_str() + 7, &end, 10);
  if (end == ref.c_str() + 7 || *end != '.' || layer < 0) return std::nullopt;
  const std::string rest(end + 1);
  const int L = static_cast<int>(layer);
  for (const LayerName& n : kLayerNames)
    if (rest == n.ref) return NameRef{blk(L, n.gguf)};
  if (rest == "engram.embed.weight") return NameRef{blk(L, "engram_embd.weight"), Part::kEngramCodes};
  if (rest == "engram.embed.scale") return NameRef{blk(L, "engram_embd.weight"), Part::kEngramScales};
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
