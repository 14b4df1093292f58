// ds41/io/gguf_derive.hpp — the facts ds41 reads from keys of its own in the llama.cpp dialect that
// published files lack, derived from what those files do hold (docs/GGUF.md "Derived facts").
//
// vcruz305's DeepSeek-V4.1-Flash GGUFs come from llama.cpp PR #28696's converter
// (vcruz305/llama.cpp conversion/deepseek.py @ d53524b8, DeepseekV41Model.set_gguf_parameters),
// which writes no kv/index source layer ids, no candidate_* keys, no gating temperature, no
// compressed vocab size and no raw pad token id. llama.cpp's loader does without them:
// src/models/deepseek41.cpp (ggml-org/llama.cpp @ 16ffdb3a, load_arch_tensors) finds each layer's
// role from the tensors it carries ("only a source carries a compressor ... only an index source
// carries indexer_attn_q_b"), hashes with the compressed pad id and the token map alone, applies no
// gating temperature, and does not implement the candidate prefilter. ds41 derives each fact the
// same way where the file determines it; the candidate prefilter, which nothing in such a file
// states, comes from the release's config when the file's layout is the release's, and is refused
// otherwise. Explicit keys stay authoritative; where a derivation exists too, the two must agree.
// Nothing here needs the text layer: the token map in the file is enough.
#pragma once
#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <vector>
#include "../model/config.hpp"
#include "gguf_names.hpp"
#include "gguf_reader.hpp"

namespace ds41::gguf {

/// A configuration fact read_config filled in without its key: the key (full name) and the value
/// with what it was derived from ("[1, 3], the layers carrying ..."; for ds41-gguf info).
struct DerivedFact {
  std::string key;
  std::string from;
};

/// The llama.cpp-dialect keys that are ds41's own (written by ds41, absent from vcruz305's files).
inline const std::vector<std::string>& ds41_only_keys() {
  static const std::vector<std::string> k = {
      "deepseek41.attention.kv_source_layer_ids",   "deepseek41.attention.index_source_layer_ids",
      "deepseek41.attention.candidate_source_layer_id", "deepseek41.attention.candidate_top_k_blocks",
      "deepseek41.attention.candidate_block_size",  "deepseek41.expert_gating_temperature",
      "deepseek41.engram.compressed_vocab_size",    "deepseek41.engram.pad_token_id",
  };
  return k;
}

inline std::string int_list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

/// The layers in [0, n_layers) whose file holds the reference tensor layers.L.`ref_suffix`.
inline std::vector<int> layers_holding(const GgufShards& s, Dialect d, int n_layers, const std::string& ref_suffix) {
  std::vector<int> out;
  for (int l = 0; l < n_layers; ++l) {
    const auto ref = to_gguf("layers." + std::to_string(l) + "." + ref_suffix, d);
    if (ref && s.find(ref->gguf)) out.push_back(l);
  }
  return out;
}

/// Each layer's attention role from the tensors it carries, as llama.cpp's deepseek41 loader finds
/// them: a kv source carries the compressor (attn_compressor_kv), an index source the indexer's
/// query side (indexer.attn_q_b, indexer.proj), and a layer that is both owns the index keys
/// (indexer.attn_k, indexer.k_norm). A file whose tensors contradict that is refused, naming them.
struct LayerRoles {
  std::vector<int> kv_sources, index_sources;
};
inline LayerRoles roles_from_tensors(const GgufShards& s, Dialect d, int n_layers) {
  LayerRoles r;
  r.kv_sources = layers_holding(s, d, n_layers, "attn.compressor.wkv.weight");
  r.index_sources = layers_holding(s, d, n_layers, "attn.indexer.wq_b.weight");
  const std::vector<int> proj = layers_holding(s, d, n_layers, "attn.indexer.weights_proj.weight");
  const std::vector<int> keys = layers_holding(s, d, n_layers, "attn.indexer.wk.weight");
  std::vector<int> both;
  std::set_intersection(r.kv_sources.begin(), r.kv_sources.end(), r.index_sources.begin(), r.index_sources.end(),
                        std::back_inserter(both));
  DS41_CHECK(proj == r.index_sources, "gguf ", s.path(), ": the layers carrying the indexer's query (",
             to_gguf("layers.0.attn.indexer.wq_b.weight", d)->gguf.substr(6), ") ", int_list(r.index_sources),
             " and its weights (", to_gguf("layers.0.attn.indexer.weights_proj.weight", d)->gguf.substr(6), ") ",
             int_list(proj), " differ, so the index source layers are not determined");
  DS41_CHECK(keys == both, "gguf ", s.path(), ": the layers carrying the index keys (",
             to_gguf("layers.0.attn.indexer.wk.weight", d)->gguf.substr(6), ") ", int_list(keys),
             " are not the kv sources (compressor) that are index sources ", int_list(both));
  return r;
}

/// The compressed vocabulary's size from the token map: the number of distinct compressed ids.
/// The published converter maps every tokenizer id, so every compressed id occurs; a map whose ids
/// below its largest are not all used does not determine the count (nothing when so).
inline std::optional<long> compressed_vocab_of(const std::vector<int32_t>& map) {
  if (map.empty()) return 0L;
  const auto [lo, hi] = std::minmax_element(map.begin(), map.end());
  const int32_t top = *hi;
  // more ids than entries cannot all occur (and a corrupt id must not size the table below)
  if (*lo < 0 || static_cast<size_t>(top) >= map.size()) return std::nullopt;
  std::vector<bool> seen(static_cast<size_t>(top) + 1, false);
  long distinct = 0;
  for (int32_t v : map)
    if (!seen[static_cast<size_t>(v)]) seen[static_cast<size_t>(v)] = true, ++distinct;
  if (distinct != static_cast<long>(top) + 1) return std::nullopt;
  return distinct;
}

/// The pad token's tokenizer id from its compressed id: 2 (ModelArgs' engram_pad_id default, the
/// release's engram_pad_token_id and the id the published converter compresses) when it maps
/// there, else the smallest id that does. Every such id hashes alike: only the compressed id
/// enters the hash. Nothing when no id maps to it.
inline std::optional<long> pad_token_of(const std::vector<int32_t>& map, int64_t pad_compressed) {
  if (map.size() > 2 && map[2] == pad_compressed) return 2L;
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i] == pad_compressed) return static_cast<long>(i);
  return std::nullopt;
}

/// DeepSeek-V4.1-Flash's released configuration, the facts that identify its layout and the
/// candidate prefilter it states (config.json text_config / inference/config.json at revision
/// dba1be0a40aa45a94ad051997016db3960a90277; tests/data/release_config).
struct ReleaseCandidates {
  int source_layer = 20, topk_blocks = 2048, block_size = 8;
};
inline bool has_release_layout(const ModelConfig& c) {
  std::vector<int> ratios(40, 1);
  for (int l = 0; l < 40; ++l) ratios[static_cast<size_t>(l)] = l < 2 ? 0 : l < 20 ? 2 : 1;
  return c.n_layers == 40 && c.dim == 5120 && c.vocab_size == 129280 && c.n_heads == 64 && c.head_dim == 512 &&
         c.compress_ratios.size() >= 40 && std::vector<int>(c.compress_ratios.begin(), c.compress_ratios.begin() + 40) == ratios &&
         c.kv_source_layers == std::vector<int>{2, 8, 14, 20} &&
         c.index_source_layers == std::vector<int>{2, 8, 14, 20, 24, 28, 32, 36} && c.index_n_heads == 32 &&
         c.index_head_dim == 128 && c.index_topk == 512;
}

}  // namespace ds41::gguf
