// ds41/io/safetensors_writer.hpp — a model (ModelConfig + WeightSet) as an official-format
// checkpoint directory: config.json (ModelArgs field names), model.safetensors.index.json and N
// shards model-0000k-of-0000n.safetensors (write_checkpoint); or laid out as DeepSeek's release,
// HF-form config.json + inference/config.json + tokenizer files (write_release_checkpoint).
// For tests and benchmarks: the inverse of
// SafetensorsWeights' conversions (docs/SAFETENSORS.md):
//
//   kF32 → F32, kBF16 → BF16
//   kFp8Block32 X.weight → F8_E4M3 X.weight + F8_E8M0 X.scale [ceil(N/32), ceil(K/32)]
//   kFp4Block32 X.weight → I8 X.weight [N, K/2] + F8_E8M0 X.scale [N, K/32]
//   engram.embed.weight (kFp8Block32 codes, or e4m3 code values in kF32) → F8_E4M3
//   X.scale in kF32 (powers of two) → F8_E8M0
#pragma once
#include <cstring>
#include <cstdlib>
#include <map>
#include <stdlib.h>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>
#include "../core/numeric.hpp"
#include "../model/config.hpp"
#include "../model/weights.hpp"
#include "hf_config.hpp"
#include "safetensors_reader.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::safetensors {

struct EncodedTensor {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<long> shape;
  std::vector<uint8_t> bytes;
};

inline std::vector<uint8_t> e8m0_bytes(const std::vector<float>& s, const std::string& what) {
  std::vector<uint8_t> out(s.size());
  for (size_t i = 0; i < s.size(); ++i)
    DS41_CHECK(f32_to_e8m0(s[i], &out[i]), what, ": scale ", i, " = ", s[i], " is not a power of two (F8_E8M0)");
  return out;
}

/// One library tensor → its checkpoint tensor(s): the weight, and its scale when quantised.
inline std::vector<EncodedTensor> encode_tensor(const std::string& name, const HostTensor& t) {
  const std::string what = "safetensors writer: tensor '" + name + "'";
  auto ends = [&](const char* s) {
    const std::string x(s);
    return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
  };
  std::vector<EncodedTensor> out(1);
  EncodedTensor& w = out[0];
  w.name = name;
  w.shape = t.shape;
  if (ends("engram.embed.weight")) {
    w.dtype = Dtype::kF8_E4M3;
    if (t.format == WeightFormat::kF32) {
      for (float v : t.to_f32()) w.bytes.push_back(e4m3_encode(v));
    } else {
      DS41_CHECK(t.format == WeightFormat::kFp8Block32, what, ": engram table has format ", format_name(t.format));
      w.bytes = t.payload;
    }
    return out;
  }
  if (ends(".scale") && t.format == WeightFormat::kF32) {
    w.dtype = Dtype::kF8_E8M0;
    w.bytes = e8m0_bytes(t.to_f32(), what);
    return out;
  }
  const std::string base = ends(".weight") ? name.substr(0, name.size() - 6) : name + ".";
  if (t.format == WeightFormat::kF32 || t.format == WeightFormat::kBF16) {
    w.dtype = t.format == WeightFormat::kF32 ? Dtype::kF32 : Dtype::kBF16;
    w.bytes = t.payload;
    return out;
  }
  if (t.format == WeightFormat::kFp8Block32) {
    DS41_CHECK(t.shape.size() == 2 && ends(".weight"), what, ": fp8 weights are '.weight' matrices");
    w.dtype = Dtype::kF8_E4M3;
    w.bytes = t.payload;
    const long nb = (t.shape[0] + 31) / 32, kb = (t.shape[1] + 31) / 32;
    DS41_CHECK(static_cast<long>(t.scales.size()) == nb * kb, what, ": ", t.scales.size(), " scales, expected ", nb * kb);
    out.push_back({base + "scale", Dtype::kF8_E8M0, {nb, kb}, e8m0_bytes(t.scales, what)});
    return out;
  }
  if (t.format == WeightFormat::kFp4Block32) {
    DS41_CHECK(t.shape.size() == 2 && ends(".weight") && t.shape[1] % 32 == 0, what,
               ": fp4 weights are '.weight' matrices with a multiple of 32 columns");
    w.dtype = Dtype::kI8;
    w.shape[1] /= 2;
    w.bytes = t.payload;
    DS41_CHECK(static_cast<long>(t.scales.size()) == t.shape[0] * (t.shape[1] / 32), what, ": ", t.scales.size(),
               " scales, expected ", t.shape[0] * (t.shape[1] / 32));
    out.push_back({base + "scale", Dtype::kF8_E8M0, {t.shape[0], t.shape[1] / 32}, e8m0_bytes(t.scales, what)});
    return out;
  }
  // a format safetensors has no dtype for (a GGUF file's blocks): its values, exactly, as f32
  w.dtype = Dtype::kF32;
  w.bytes = HostTensor::from_f32(t.shape, t.to_f32()).payload;
  return out;
}

/// The bytes of one .safetensors file holding `tensors` in order (header padded to 8 bytes).
inline std::vector<uint8_t> file_bytes(const std::vector<const EncodedTensor*>& tensors,
                                       const nlohmann::ordered_json& metadata = {{"format", "pt"}}) {
  nlohmann::ordered_json h;
  h["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const EncodedTensor* t : tensors) {
    h[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {at, at + t->bytes.size()}}};
    at += t->bytes.size();
  }
  std::string text = h.dump();
  while (text.size() % 8) text += ' ';
  std::vector<uint8_t> out(8 + text.size() + at);
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  std::memcpy(out.data() + 8, text.data(), text.size());
  size_t pos = 8 + text.size();
  for (const EncodedTensor* t : tensors) {
    if (!t->bytes.empty()) std::memcpy(out.data() + pos, t->bytes.data(), t->bytes.size());
    pos += t->bytes.size();
  }
  return out;
}

/// config.json of `c`: every ModelArgs field ds41 models (vision off; `n_mtp_layers` DSpark draft
/// layers, whose compress ratios are `mtp_ratios`, 0 each when not given), plus `dtype` /
/// `expert_dtype` as given. The runtime fields are not written.
inline nlohmann::ordered_json config_json(const ModelConfig& c, const std::string& dtype, const std::string& expert_dtype,
                                          int n_mtp_layers = 0, std::vector<int> mtp_ratios = {}) {
  DS41_CHECK(n_mtp_layers >= 0 && (mtp_ratios.empty() || static_cast<int>(mtp_ratios.size()) == n_mtp_layers),
             "safetensors writer: ", mtp_ratios.size(), " MTP compress ratios for ", n_mtp_layers, " MTP layers");
  mtp_ratios.resize(n_mtp_layers, 0);
  nlohmann::ordered_json j;
  j["vocab_size"] = c.vocab_size;
  j["dim"] = c.dim;
  j["moe_inter_dim"] = c.moe_inter_dim;
  j["n_layers"] = c.n_layers;
  j["n_mtp_layers"] = n_mtp_layers;
  j["n_heads"] = c.n_heads;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["n_activated_experts"] = c.n_activated_experts;
  j["score_func"] = c.score_func == ScoreFunc::kSoftmax ? "softmax" : c.score_func == ScoreFunc::kSigmoid ? "sigmoid" : "sqrtsoftplus";
  j["gate_temp"] = c.gate_temp;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["route_scale"] = c.route_scale;
  j["swiglu_limit"] = c.swiglu_limit;
  j["q_lora_rank"] = c.q_lora_rank;
  j["head_dim"] = c.head_dim;
  j["rope_head_dim"] = c.rope_head_dim;
  j["norm_eps"] = c.norm_eps;
  j["o_groups"] = c.o_groups;
  j["o_lora_rank"] = c.o_lora_rank;
  j["window_size"] = c.window_size;
  std::vector<int> ratios(c.compress_ratios.begin(), c.compress_ratios.begin() + c.n_layers);
  ratios.insert(ratios.end(), mtp_ratios.begin(), mtp_ratios.end());
  j["compress_ratios"] = ratios;
  j["kv_source_layers"] = c.kv_source_layers;
  j["index_source_layers"] = c.index_source_layers;
  j["compress_rope_theta"] = c.compress_rope_theta;
  j["original_seq_len"] = c.original_seq_len;
  j["rope_theta"] = c.rope_theta;
  j["rope_factor"] = c.rope_factor;
  j["beta_fast"] = c.beta_fast;
  j["beta_slow"] = c.beta_slow;
  j["index_n_heads"] = c.index_n_heads;
  j["index_head_dim"] = c.index_head_dim;
  j["index_topk"] = c.index_topk;
  j["candidate_source_layer"] = c.candidate_source_layer;
  j["candidate_topk_blocks"] = c.candidate_topk_blocks;
  j["candidate_block_size"] = c.candidate_block_size;
  j["hc_mult"] = c.hc_mult;
  j["hc_sinkhorn_iters"] = c.hc_sinkhorn_iters;
  j["hc_eps"] = c.hc_eps;
  j["engram_layer_ids"] = c.engram_layer_ids;
  j["engram_num_embeddings"] = c.engram_num_embeddings;
  j["engram_max_ngram_size"] = c.engram_max_ngram_size;
  j["engram_n_heads"] = c.engram_n_heads;
  j["engram_head_dim"] = c.engram_head_dim;
  j["engram_pad_id"] = c.engram_pad_id;
  j["engram_compressed_vocab_size"] = c.engram_compressed_vocab_size;
  if (c.engram_vocab_size > 0) j["engram_vocab_size"] = c.engram_vocab_size;
  j["dtype"] = dtype;
  if (expert_dtype.empty()) j["expert_dtype"] = nullptr;
  else j["expert_dtype"] = expert_dtype;
  j["vision_n_layers"] = 0;
  return j;
}

/// A model's tensors encoded for the checkpoint, and what config.json says of them.
struct EncodedModel {
  std::vector<EncodedTensor> tensors;
  bool fp8 = false, fp4 = false;  // fp8 Linear weights (dtype "fp8"), fp4 experts (expert_dtype "fp4")
  int n_mtp_layers = 0;           // 1 + the largest N of the mtp.N.* tensors
};

/// Encodes every tensor of `w` before anything is written (so an unencodable tensor leaves no
/// files). A scale given both with its quantised weight and on its own (regenerate_weights gives
/// both) is written once; two different values under one name are an error.
inline EncodedModel encode_model(const WeightSet& w) {
  EncodedModel m;
  std::map<std::string, size_t> at;
  for (const auto& [name, t] : w.all()) {
    m.fp8 |= t.format == WeightFormat::kFp8Block32 && name.find("engram.embed") == std::string::npos;
    m.fp4 |= t.format == WeightFormat::kFp4Block32;
    // an engram table without its scale is a table of values (a GGUF Q8_0 or K-quant table, which
    // EngramT reads so): no e4m3 codes to write
    const size_t e = name.size() >= 19 ? name.size() - 19 : std::string::npos;
    DS41_CHECK(e == std::string::npos || name.compare(e, 19, "engram.embed.weight") != 0 ||
                   w.has(name.substr(0, name.size() - 6) + "scale"),
               "safetensors writer: tensor '", name, "' is an engram table of values (no engram.embed.scale): a "
               "checkpoint holds engram tables as e4m3 codes and e8m0 scales");
    if (name.rfind("mtp.", 0) == 0)
      m.n_mtp_layers = std::max(m.n_mtp_layers, 1 + static_cast<int>(std::strtol(name.c_str() + 4, nullptr, 10)));
    for (EncodedTensor& e : encode_tensor(name, t)) {
      auto it = at.find(e.name);
      if (it == at.end()) {
        at[e.name] = m.tensors.size();
        m.tensors.push_back(std::move(e));
        continue;
      }
      const EncodedTensor& o = m.tensors[it->second];
      DS41_CHECK(o.dtype == e.dtype && o.shape == e.shape && o.bytes == e.bytes, "safetensors writer: tensor '", e.name,
                 "' is given twice with different contents (once with its weight, once on its own)");
    }
  }
  return m;
}

inline void put_file(const std::string& path, const void* data, size_t n) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  out.close();
  DS41_CHECK(out.good(), "safetensors writer: cannot write ", path);
}

/// The shards of `m` and model.safetensors.index.json into `dir`: embed.weight in the first shard,
/// layers spread in order, everything else (norm, head, mtp.*) in the last. Returns the shard paths.
inline std::vector<std::string> write_shards(const ModelConfig& c, const EncodedModel& m, const std::string& dir,
                                             int shards) {
  namespace fs = std::filesystem;
  auto shard_of = [&](const std::string& name) {
    if (name.rfind("layers.", 0) == 0) {
      const long l = std::strtol(name.c_str() + 7, nullptr, 10);
      return static_cast<int>(std::min<long>(shards - 1, l * shards / std::max(1, c.n_layers)));
    }
    return name == "embed.weight" ? 0 : shards - 1;
  };
  auto shard_name = [&](int k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k + 1, shards);
    return std::string(buf);
  };
  std::vector<std::vector<const EncodedTensor*>> groups(shards);
  nlohmann::ordered_json index;
  uint64_t total = 0;
  for (const EncodedTensor& e : m.tensors) {
    groups[shard_of(e.name)].push_back(&e);
    total += e.bytes.size();
  }
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json map = nlohmann::ordered_json::object();
  for (int k = 0; k < shards; ++k)
    for (const EncodedTensor* e : groups[k]) map[e->name] = shard_name(k);
  index["weight_map"] = map;
  std::vector<std::string> paths;
  for (int k = 0; k < shards; ++k) {
    const std::vector<uint8_t> b = file_bytes(groups[k]);
    paths.push_back((fs::path(dir) / shard_name(k)).string());
    put_file(paths.back(), b.data(), b.size());
  }
  const std::string idx = index.dump(2);
  put_file((fs::path(dir) / "model.safetensors.index.json").string(), idx.data(), idx.size());
  return paths;
}

/// Writes `w` (every tensor it holds, by reference name) and `c` as checkpoint directory `dir`
/// (created if needed) with `shards` shard files and a ModelArgs-form config.json. Returns the
/// shard paths.
inline std::vector<std::string> write_checkpoint(const ModelConfig& c, const WeightSet& w, const std::string& dir,
                                                 int shards = 2) {
  namespace fs = std::filesystem;
  DS41_CHECK(shards >= 1 && shards <= 99999, "safetensors writer: shard count ", shards, " out of range");
  const EncodedModel m = encode_model(w);
  std::error_code ec;
  fs::create_directories(dir, ec);
  DS41_CHECK(!ec && fs::is_directory(dir), "safetensors writer: cannot create directory ", dir);
  std::vector<std::string> paths = write_shards(c, m, dir, shards);
  // n_mtp_layers 0 as before, whatever mtp.* tensors `w` holds (callers state their own)
  const std::string cfg = config_json(c, m.fp8 ? "fp8" : "bf16", m.fp4 ? "fp4" : "").dump(4);
  put_file((fs::path(dir) / "config.json").string(), cfg.data(), cfg.size());
  return paths;
}

// ------------------------------------------------------------------------ the release's layout

/// The Hugging Face form of `c` (hf_config.hpp's args_to_hf of config_json): text_config,
/// quantization_config when the weights are fp8, vision_config (off), and `gen`'s token ids.
inline nlohmann::ordered_json hf_config_json(const ModelConfig& c, const std::string& dtype, const std::string& expert_dtype,
                                             const GenerationInfo& gen, int n_mtp_layers = 0) {
  return args_to_hf(nlohmann::json::parse(config_json(c, dtype, expert_dtype, n_mtp_layers).dump()), gen);
}

/// Files of the release besides the config and the weights, written verbatim (the tokenizer's
/// two files; `other` for more, by path relative to the checkpoint directory), and the ids the HF
/// config states (the release's: bos 0, eos 1, pad 2).
struct ReleaseFiles {
  std::string tokenizer_json;         // tokenizer.json, written when not empty
  std::string tokenizer_config_json;  // tokenizer_config.json, written when not empty
  std::map<std::string, std::string> other;
  GenerationInfo generation = [] {
    GenerationInfo g;
    g.bos_token_id = 0;
    g.eos_token_ids = {1};
    g.pad_token_id = 2;
    return g;
  }();
};

/// Writes `w` and `c` laid out as DeepSeek's release: config.json (HF form), inference/config.json
/// (ModelArgs form), the files of `extra`, `shards` shards (mtp.* tensors included when `w` has
/// them) and model.safetensors.index.json. Atomic: everything is written into a sibling temporary
/// directory renamed to `dir` at the end, so a failure leaves no `dir` (which must not exist, or
/// be empty). Returns the shard paths.
inline std::vector<std::string> write_release_checkpoint(const ModelConfig& c, const WeightSet& w, const std::string& dir,
                                                         const ReleaseFiles& extra = {}, int shards = 2) {
  namespace fs = std::filesystem;
  const std::string what = "safetensors writer: " + dir;
  DS41_CHECK(shards >= 1 && shards <= 99999, what, ": shard count ", shards, " out of range");
  std::error_code ec;
  DS41_CHECK(!fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)), what,
             " exists and is not an empty directory");
  for (const auto& [rel, text] : extra.other) {
    const fs::path p(rel);
    bool up = false;
    for (const auto& part : p) up |= part == "..";
    DS41_CHECK(!rel.empty() && p.is_relative() && !up, what, ": extra file '", rel,
               "' is not a path inside the checkpoint directory");
  }
  const EncodedModel m = encode_model(w);  // before any file exists
  const std::string dtype = m.fp8 ? "fp8" : "bf16", expert = m.fp4 ? "fp4" : "";
  const std::string hf = hf_config_json(c, dtype, expert, extra.generation, m.n_mtp_layers).dump(2) + "\n";
  const std::string args = config_json(c, dtype, expert, m.n_mtp_layers).dump(4) + "\n";

  const fs::path target = fs::absolute(fs::path(dir));
  fs::create_directories(target.parent_path(), ec);
  std::string tmpl = (target.parent_path() / ("." + target.filename().string() + ".tmp-XXXXXX")).string();
  DS41_CHECK(::mkdtemp(tmpl.data()) != nullptr, what, ": cannot create a temporary directory next to it");
  const fs::path tmp = tmpl;
  try {
    std::vector<std::string> paths = write_shards(c, m, tmp.string(), shards);
    put_file((tmp / "config.json").string(), hf.data(), hf.size());
    fs::create_directories(tmp / "inference");
    put_file((tmp / "inference" / "config.json").string(), args.data(), args.size());
    if (!extra.tokenizer_json.empty())
      put_file((tmp / "tokenizer.json").string(), extra.tokenizer_json.data(), extra.tokenizer_json.size());
    if (!extra.tokenizer_config_json.empty())
      put_file((tmp / "tokenizer_config.json").string(), extra.tokenizer_config_json.data(),
               extra.tokenizer_config_json.size());
    for (const auto& [rel, text] : extra.other) {
      fs::create_directories((tmp / rel).parent_path());
      put_file((tmp / rel).string(), text.data(), text.size());
    }
    if (fs::exists(target)) fs::remove(target);  // empty (checked above): rename needs it gone or empty
    fs::rename(tmp, target, ec);
    DS41_CHECK(!ec, what, ": cannot move the written checkpoint into place (", ec.message(), ")");
    for (std::string& p : paths) p = (target / fs::path(p).filename()).string();
    return paths;
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace ds41::safetensors
#include "../core/fp_exact_end.hpp"
