// ds41/io/gguf_weights.hpp — GgufWeights, the file-backed WeightSource (each tensor read with
// pread from its shard when a component asks for it, converted to the library's formats), and
// write_model, which writes any model (config + WeightSource) as GGUF shards; a DSpark draft file
// beside the main file (gguf_draft.hpp) is served through the same GgufWeights, and write_draft
// writes one.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "gguf_draft.hpp"
#include "gguf_model.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

class GgufWeights : public WeightSource {
 public:
  using Progress = gguf::GgufShards::Progress;

  explicit GgufWeights(const std::string& first_shard, const Progress& progress = {})
      : shards_(std::make_shared<gguf::GgufShards>(first_shard, progress)),
        dialect_(gguf::detect_dialect(*shards_)),
        cfg_(gguf::read_config(*shards_, dialect_)) {}
  /// The main model and a DSpark draft file (gguf_draft.hpp: llama.cpp's dflash or ds4's support
  /// GGUF) as one source: config() has the draft's DSpark fields, mtp.* names are read from the
  /// draft file. An empty `draft` is the main file alone.
  GgufWeights(const std::string& first_shard, const Progress& progress, const std::string& draft)
      : GgufWeights(first_shard, progress) {
    if (draft.empty()) return;
    draft_ = std::make_shared<const gguf::GgufDraft>(draft, cfg_, progress);
    cfg_ = draft_->config();
  }

  const ModelConfig& config() const { return cfg_; }
  /// The metadata and tensor-name dialect of the file (detected from its metadata).
  gguf::Dialect dialect() const { return dialect_; }
  const gguf::GgufShards& shards() const { return *shards_; }
  std::shared_ptr<const gguf::GgufShards> shared_shards() const { return shards_; }
  /// The DSpark draft file, when one was given.
  const gguf::GgufDraft* draft() const { return draft_.get(); }
  /// The routed experts as slices of the merged tensors (GgufExpertSource) and the engram tables'
  /// rows (GgufRowSource), for StreamedExperts and RowReaderTable: gguf_sources.hpp.
  std::shared_ptr<const ExpertSource> expert_source() const override;
  std::shared_ptr<const RowSource> row_source(const std::string& prefix, long rows, int head_dim) const override;

  /// The GGUF tensor behind a reference name, with the part of it the name is; throws when absent.
  std::pair<gguf::NameRef, const gguf::TensorInfo*> locate(const std::string& name) const {
    auto ref = gguf::to_gguf(name, dialect_);
    DS41_CHECK(ref, "gguf ", shards_->path(), ": no GGUF tensor corresponds to reference tensor '", name, "'");
    const gguf::TensorInfo* t = shards_->find(ref->gguf);
    DS41_CHECK(t, "gguf ", shards_->path(), ": missing tensor '", ref->gguf, "' (reference '", name, "')");
    return {*ref, t};
  }

  bool has(const std::string& name) const override {
    if (draft_ && name.rfind("mtp.", 0) == 0) return draft_->has(name);
    auto ref = gguf::to_gguf(name, dialect_);
    if (!ref) return false;
    const gguf::TensorInfo* t = shards_->find(ref->gguf);
    // a table of values (Q8_0, K-quant rows) has no scales: EngramT reads it as values
    if (ref->part == gguf::Part::kEngramScales && t && gguf::engram_value_type(t->type)) return false;
    return gguf::holds(*ref, t);
  }

  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    if (draft_ && name.rfind("mtp.", 0) == 0) return draft_->load(name, shape);
    auto [ref, t] = locate(name);
    const std::string what = "gguf " + shards_->shard(t->shard).path() + ": tensor '" + t->name + "'";
    const gguf::TensorSlice slice = gguf::slice_of(ref, *t, what);  // one expert of a merged tensor, or all
    std::vector<long> have = slice.shape;
    const uint64_t offset = slice.offset, bytes = slice.bytes;
    if (ref.part == gguf::Part::kEngramCodes || ref.part == gguf::Part::kEngramScales) {
      DS41_CHECK(gguf::engram_row_type(t->type), what, ": engram table has type ", gguf::tensor_type_name(t->type),
                 ", expected ", gguf::kEngramRowTypes);
      DS41_CHECK(have.size() == 2, what, " of shape ", shape_str({have.begin(), have.end()}), " is not a table");
      if (gguf::engram_value_type(t->type)) gguf::check_engram_value_row(t->type, have[1], what);
      DS41_CHECK(gguf::engram_row_dim(t->type, have[1]) > 0, what, " of shape ", shape_str({have.begin(), have.end()}),
                 " is not a table of engram rows");
      have[1] = gguf::engram_row_dim(t->type, have[1]);  // the row's K (I8 rows hold K + K/32 bytes)
      if (ref.part == gguf::Part::kEngramScales) have[1] /= 32;
    }
    check_shape(name, have, shape);
    std::vector<uint8_t> raw(bytes);
    shards_->read(t->shard, raw.data(), bytes, offset, "tensor data");
    std::vector<long> tshape = ref.part == gguf::Part::kEngramScales ? std::vector<long>{shape[0], shape[1] * 32} : shape;
    return gguf::decode_tensor(t->type, tshape, raw.data(), bytes, ref.part, what);
  }

 private:
  std::shared_ptr<gguf::GgufShards> shards_;
  gguf::Dialect dialect_;
  ModelConfig cfg_;
  std::shared_ptr<const gguf::GgufDraft> draft_;
};

namespace gguf {

/// The Linear weights (reference names, without "layers.L.") that published V4.1 GGUFs quantize
/// besides the routed experts (GGUF-PUBLISHED.md: antirez's Q8_0 set — attention projections,
/// shared experts, output — plus mxxm-t's indexer.attn_q_b and engram_wkv). The router, the
/// compressor, the indexer's proj and wk, the embedding, hc_*_fn, norms, sinks and biases are kept
/// wide in every published file and are never converted.
inline bool dense_quantized_weight(const std::string& ref) {
  static const char* const names[] = {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
                                      "attn.wo_b.weight", "attn.indexer.wq_b.weight", "ffn.shared_experts.w1.weight",
                                      "ffn.shared_experts.w2.weight", "ffn.shared_experts.w3.weight",
                                      "engram.wkv.weight", "head.weight"};
  for (const char* n : names) {
    const std::string suffix(n);
    if (ref == suffix) return true;
    if (ref.size() > suffix.size() && ref.compare(ref.size() - suffix.size(), suffix.size(), suffix) == 0 &&
        ref.compare(0, 7, "layers.") == 0 && ref[ref.size() - suffix.size() - 1] == '.')
      return true;
  }
  return false;
}

/// How write_model stores the tensors. Without a type, each tensor keeps its own encoding
/// (encode_tensor: f32, bf16, fp4 → MXFP4, fp8 → DS41_FP8_BLOCK32).
struct WriteOptions {
  int shards = 2;
  uint64_t alignment = kDefaultAlignment;
  std::optional<TensorType> experts;  // routed experts (ffn_{gate,up,down}_exps)
  std::optional<TensorType> dense;    // the weights dense_quantized_weight names
  /// Engram tables as I8 [K + K/32, rows] (row264, antirez's form: a ggml type, so gguf-py,
  /// llama.cpp's parser and gguf-dump open the file); false: ds41's own DS41_FP8_ROW id, the same
  /// bytes, which no other reader knows.
  bool engram_i8 = true;
  /// Engram tables as blocks of this type (a block type: rows of ggml's values; MXFP4)
  /// quantized from their values (code · scale, or a values table's own), as vcruz305's rungs write
  /// them; before engram_i8. A table whose rows are not whole blocks keeps its fp8 rows (listed in
  /// `kept`); a values table (no scales) cannot, and is refused. Without it a values table is refused.
  std::optional<TensorType> engram_type;
  /// Metadata keys and tensor names (docs/GGUF.md "Dialects"). ds4 always writes its engram
  /// tables as I8 row264; mxxm-t's own tables are MXFP4 rows, which ds41 reads (as fp8 rows) but
  /// does not write: its engram_embed is written as I8 row264 (DS41_FP8_ROW without engram_i8).
  Dialect dialect = Dialect::kLlamaCpp;
  /// Metadata keys (full names) left out of the file, to write it as another converter would: e.g.
  /// gguf::ds41_only_keys(), which vcruz305's files lack and the reader derives (gguf_derive.hpp).
  std::vector<std::string> omit_keys;
};
struct WriteResult {
  std::vector<std::string> paths;  // first shard first
  long converted = 0;              // tensors written in a type of the options
  std::vector<std::string> kept;   // "NAME: why", tensors a type was asked for but that keep their encoding
};

/// The types the writer converts a tensor to (--type, --dense-type): every block type ds41 reads
/// but I8 (gguf_quantize.hpp), and F32, F16, BF16.
inline bool writable_tensor_type(TensorType t) {
  return quantizable_block_type(t) || t == TensorType::kF32 || t == TensorType::kF16 || t == TensorType::kBF16;
}

/// A tensor's GGUF bytes for write_model / write_draft: in `want` when asked and possible, else
/// in its own encoding (a tensor whose rows are not whole blocks of `want` is noted in `kept`).
inline std::pair<TensorType, std::vector<uint8_t>> encode_for_write(const HostTensor& t, const std::optional<TensorType>& want,
                                                                    const std::string& ref, std::vector<std::string>* kept) {
  const std::string what = "gguf writer: tensor '" + ref + "'";
  if (!want) return encode_tensor(t, what);
  const GgmlTypeInfo* info = ggml_info(*want);
  DS41_CHECK(writable_tensor_type(*want), "gguf writer: cannot write type ", tensor_type_name(*want));
  auto own = encode_tensor(t, what);
  if (own.first == *want) return own;
  if (t.shape.size() != 2 || t.shape[1] % info->block_elems != 0) {
    if (kept)
      kept->push_back(ref + ": rows of " + std::to_string(t.shape.back()) + " are not whole " + tensor_type_name(*want) +
                      " blocks of " + std::to_string(info->block_elems) + ", kept " + tensor_type_name(own.first));
    return own;
  }
  return std::pair<TensorType, std::vector<uint8_t>>{*want, encode_values(t.to_f32(), *want)};
}

/// An engram table (fp8 codes with their scales `sc`, or values without) written as blocks of
/// `type` (engram_value_type or MXFP4) of its values; false when its rows are not whole blocks and
/// it keeps its fp8 rows (noted in `kept`; a values table has none to keep: refused).
inline bool write_engram_blocks(GgufWriter& out, const std::string& name, const HostTensor& codes,
                                const std::optional<HostTensor>& sc, TensorType type, const std::string& what,
                                std::vector<std::string>& kept) {
  DS41_CHECK(engram_value_type(type) || type == TensorType::kMXFP4, what, ": cannot write engram tables as ",
             tensor_type_name(type), " (", tensor_type_names([](TensorType t) { return engram_value_type(t) || t == TensorType::kMXFP4; }), ")");
  DS41_CHECK(codes.shape.size() == 2, what, ": not a matrix");
  const long rows = codes.shape[0], K = codes.shape[1], be = ggml_info(type)->block_elems;
  if (K % be != 0) {
    DS41_CHECK(sc.has_value(), what, ": engram rows of ", K, " values are not whole ", tensor_type_name(type),
               " blocks of ", be);
    kept.push_back(name + ": rows of " + std::to_string(K) + " are not whole " + tensor_type_name(type) + " blocks of " +
                   std::to_string(be) + ", kept fp8 rows");
    return false;
  }
  std::vector<float> v;
  if (!sc) {
    v = codes.to_f32();
  } else {  // code · scale, exact: an e4m3 value times a power of two
    DS41_CHECK(codes.format == WeightFormat::kF32 || codes.format == WeightFormat::kFp8Block32, what,
               ": engram table has format ", format_name(codes.format));
    const std::vector<float> s = sc->to_f32();
    DS41_CHECK(K % 32 == 0 && static_cast<long>(s.size()) == rows * (K / 32), what, ": engram scales do not match the table");
    v = codes.format == WeightFormat::kF32 ? codes.to_f32() : std::vector<float>(static_cast<size_t>(rows * K));
    for (long i = 0; i < rows * K; ++i) {
      const float c = codes.format == WeightFormat::kF32 ? v[i] : e4m3_decode(codes.payload[i]);
      v[i] = c * s[i / 32];
    }
  }
  out.add_tensor(name, {rows, K}, type, encode_values(v, type));
  return true;
}

/// Write a model's parameters (every tensor the config implies, taken from `w` by reference name)
/// and its config as GGUF files PREFIX-0000k-of-0000n.gguf. A tensor given a type whose block does
/// not divide its rows (K-quants need K % 256 == 0) keeps its own encoding (listed in `kept`, as
/// llama-quantize falls back on such tensors).
inline WriteResult write_model(const ModelConfig& c, const WeightSource& w, const std::string& prefix,
                               const WriteOptions& opt) {
  WriteResult res;
  GgufWriter out(opt.alignment);
  write_config(out, c, opt.dialect);
  for (const std::string& k : opt.omit_keys) out.erase(k);
  const bool engram_i8 = opt.engram_i8 || opt.dialect == Dialect::kDs4;
  auto shape_of = [&](const std::string& n) {
    // shapes are not known here without the components: ask the source for the tensor with its
    // own shape (WeightSet knows it); load() checks shape equality, so pass what it holds
    const auto* ws = dynamic_cast<const WeightSet*>(&w);
    DS41_CHECK(ws, "gguf writer: write_model needs a WeightSet source");
    auto it = ws->all().find(n);
    DS41_CHECK(it != ws->all().end(), "gguf writer: missing tensor '", n, "'");
    return it->second.shape;
  };
  // t in `want` when asked and possible, else its own encoding
  auto encode = [&](const HostTensor& t, const std::optional<TensorType>& want, const std::string& ref, bool note) {
    return encode_for_write(t, want, ref, note ? &res.kept : nullptr);
  };
  auto put = [&](const std::string& ref) {
    if (!w.has(ref)) return;
    const HostTensor t = w.load(ref, shape_of(ref));
    const bool dense = opt.dense && dense_quantized_weight(ref);
    auto [type, bytes] = encode(t, dense ? opt.dense : std::nullopt, ref, true);
    if (dense && type == *opt.dense) ++res.converted;
    out.add_tensor(to_gguf(ref, opt.dialect)->gguf, t.shape, type, std::move(bytes));
  };
  for (const LayerName& n : kTopNames)
    if (std::string(n.ref) == "embed.weight") put(n.ref);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const LayerName& n : kLayerNames) put(p + n.ref);
    for (int k = 1; k <= 3; ++k) {  // routed experts merged into one [E, rows, cols] tensor
      std::vector<uint8_t> merged;
      std::vector<long> shape;
      TensorType type = TensorType::kF32;
      for (int e = 0; e < c.n_routed_experts; ++e) {
        const std::string ref = p + "ffn.experts." + std::to_string(e) + ".w" + std::to_string(k) + ".weight";
        const HostTensor t = w.load(ref, shape_of(ref));
        auto [ty, bytes] = encode(t, opt.experts, blk(l, expert_tensor(k)), e == 0);
        DS41_CHECK(e == 0 || (ty == type && t.shape == shape), "gguf writer: expert ", e, " of layer ", l,
                   " differs in type or shape from expert 0");
        type = ty;
        shape = t.shape;
        merged.insert(merged.end(), bytes.begin(), bytes.end());
      }
      if (opt.experts && type == *opt.experts) ++res.converted;
      shape.insert(shape.begin(), c.n_routed_experts);
      out.add_tensor(blk(l, expert_tensor(k)), shape, type, std::move(merged));
    }
    if (c.engram_slot(l) >= 0) {
      const std::string what = "gguf writer: engram table of layer " + std::to_string(l);
      const HostTensor codes = w.load(p + "engram.embed.weight", shape_of(p + "engram.embed.weight"));
      std::optional<HostTensor> sc;  // none: a table of values (EngramT reads it so)
      if (w.has(p + "engram.embed.scale")) sc = w.load(p + "engram.embed.scale", shape_of(p + "engram.embed.scale"));
      if (opt.engram_type && write_engram_blocks(out, engram_table(opt.dialect, l), codes, sc, *opt.engram_type,
                                                 what, res.kept)) {
        ++res.converted;
        continue;
      }
      DS41_CHECK(sc.has_value(), what, ": a table of values (no embed.scale) is written as blocks of a type: give "
                 "WriteOptions::engram_type (--engram-type)");
      std::vector<long> shape = codes.shape;
      if (engram_i8) shape[1] += shape[1] / 32;  // the same bytes as I8 elements
      out.add_tensor(engram_table(opt.dialect, l), shape, engram_i8 ? TensorType::kI8 : TensorType::kDs41Fp8Row,
                     encode_engram_rows(codes, *sc, what));
    }
  }
  for (const LayerName& n : kTopNames)
    if (std::string(n.ref) != "embed.weight") put(n.ref);
  res.paths = out.write_shards(prefix, opt.shards);
  return res;
}

/// The metadata of a draft file of family f for `c` (gguf_draft.hpp reads it back).
inline void write_draft_config(GgufWriter& out, const ModelConfig& c, DraftFamily f) {
  const int S = c.n_mtp_layers;
  if (f == DraftFamily::kDs4) {
    auto u32 = [&](const char* k, long v) { out.set(std::string("dspark.") + k, Value::u32(static_cast<uint32_t>(v))); };
    out.set("general.architecture", Value::string(kDs4DraftArch));
    out.set("dspark.target_architecture", Value::string(kArch));
    u32("stage_count", S);
    u32("block_size", c.dspark_block_size);
    u32("noise_token_id", c.dspark_noise_token_id);
    u32("markov_rank", c.dspark_markov_rank);
    u32("expert_count", c.dspark_experts());
    u32("expert_used_count", c.dspark_active_experts());
    out.set("dspark.target_layer_ids", Value::int_array(ValueType::kU32, c.dspark_target_layer_ids));
    return;
  }
  // llama.cpp's dflash: the draft keys, and the deepseek keys of the stages (as the V4.1 forks'
  // converters write them from DeepseekV4Model.set_gguf_parameters)
  const std::string p = "dflash.";
  auto u32 = [&](const char* k, long v) { out.set(p + k, Value::u32(static_cast<uint32_t>(v))); };
  auto f64 = [&](const char* k, double v) { out.set(p + k, Value::f64(v)); };
  out.set("general.architecture", Value::string("dflash"));
  u32("block_count", S);
  u32("block_size", c.dspark_block_size);
  out.set(p + "target_layers", Value::int_array(ValueType::kI32, c.dspark_target_layer_ids));
  out.set(p + "dsv41_semantics", Value::boolean(true));
  out.set("tokenizer.ggml.mask_token_id", Value::u32(static_cast<uint32_t>(c.dspark_noise_token_id)));
  u32("expert_count", c.dspark_experts());
  u32("expert_used_count", c.dspark_active_experts());
  u32("embedding_length", c.dim);
  u32("attention.head_count", c.n_heads);
  u32("attention.key_length", c.head_dim);
  u32("attention.value_length", c.head_dim);
  u32("attention.q_lora_rank", c.q_lora_rank);
  u32("attention.output_group_count", c.o_groups);
  u32("attention.output_lora_rank", c.o_lora_rank);
  u32("attention.sliding_window", c.window_size);
  out.set(p + "attention.compress_ratios", Value::int_array(ValueType::kI32, std::vector<int>(S, 0)));
  f64("attention.layer_norm_rms_epsilon", c.norm_eps);
  u32("rope.dimension_count", c.rope_head_dim);
  u32("expert_feed_forward_length", c.moe_inter_dim);
  u32("expert_shared_count", c.n_shared_experts);
  u32("expert_gating_func", gating_func_id(c.score_func));
  f64("expert_weights_scale", c.route_scale);
  out.set(p + "expert_weights_norm", Value::boolean(c.norm_topk_prob));
  out.set(p + "swiglu_clamp_exp", Value::array(ValueType::kF64, std::vector<Value>(S, Value::f64(c.swiglu_limit))));
  u32("hyper_connection.count", c.hc_mult);
  u32("hyper_connection.sinkhorn_iterations", c.hc_sinkhorn_iters);
  f64("hyper_connection.epsilon", c.hc_eps);
}

/// Write the DSpark draft head of a model (`c` with DSpark stages, the mtp.* tensors of `w`) as
/// one draft file of family f at `path` (docs/GGUF.md "DSpark draft files"). opt.experts applies to
/// the stages' routed experts (stacked per stage), opt.dense to the stages' dense_quantized_weight
/// matrices and main_proj; the Markov embedding (a table: bf16 or f32), the Markov and confidence
/// heads, norms, routers and hc keep their encoding.
inline WriteResult write_draft(const ModelConfig& c, const WeightSource& w, const std::string& path,
                               const WriteOptions& opt, DraftFamily f) {
  DS41_CHECK(c.has_dspark(), "gguf writer: the model has no DSpark draft head (n_mtp_layers ", c.n_mtp_layers,
             ", dspark_block_size ", c.dspark_block_size, ")");
  const auto* ws = dynamic_cast<const WeightSet*>(&w);
  DS41_CHECK(ws, "gguf writer: write_draft needs a WeightSet source");
  DS41_CHECK(ws->has("mtp.0.main_proj.weight"), "gguf writer: the weights carry no draft head (no mtp.* tensors)");
  const int S = c.n_mtp_layers;
  WriteResult res;
  GgufWriter out(opt.alignment);
  write_draft_config(out, c, f);
  auto shape_of = [&](const std::string& n) {
    auto it = ws->all().find(n);
    DS41_CHECK(it != ws->all().end(), "gguf writer: missing tensor '", n, "'");
    return it->second.shape;
  };
  auto put = [&](const std::string& ref, const std::optional<TensorType>& want) {
    if (!w.has(ref)) return;
    const HostTensor t = w.load(ref, shape_of(ref));
    auto [type, bytes] = encode_for_write(t, want, ref, &res.kept);
    if (want && type == *want) ++res.converted;
    out.add_tensor(to_draft_gguf(ref, f, S)->gguf, t.shape, type, std::move(bytes));
  };
  auto root = [&](int i) {
    const DraftRootName& r = kDraftRoots[i];
    return "mtp." + std::to_string(r.last_stage ? S - 1 : 0) + "." + r.ref;
  };
  put(root(0), opt.dense);                                                   // main_proj
  put(root(1), std::nullopt);                                                // main_norm
  for (int s = 0; s < S; ++s) {
    const std::string p = "mtp." + std::to_string(s) + ".";
    for (const LayerName& n : kLayerNames)
      put(p + n.ref, opt.dense && dense_quantized_weight(std::string("layers.0.") + n.ref) ? opt.dense : std::nullopt);
    for (int k = 1; k <= 3; ++k) {  // routed experts merged into one [E, rows, cols] tensor
      const std::string name = to_draft_gguf(p + "ffn.experts.0.w" + std::to_string(k) + ".weight", f, S)->gguf;
      std::vector<uint8_t> merged;
      std::vector<long> shape;
      TensorType type = TensorType::kF32;
      for (int e = 0; e < c.dspark_experts(); ++e) {
        const std::string ref = p + "ffn.experts." + std::to_string(e) + ".w" + std::to_string(k) + ".weight";
        const HostTensor t = w.load(ref, shape_of(ref));
        auto [ty, bytes] = encode_for_write(t, opt.experts, name, e == 0 ? &res.kept : nullptr);
        DS41_CHECK(e == 0 || (ty == type && t.shape == shape), "gguf writer: expert ", e, " of draft stage ", s,
                   " differs in type or shape from expert 0");
        type = ty;
        shape = t.shape;
        merged.insert(merged.end(), bytes.begin(), bytes.end());
      }
      if (opt.experts && type == *opt.experts) ++res.converted;
      shape.insert(shape.begin(), c.dspark_experts());
      out.add_tensor(name, shape, type, std::move(merged));
    }
  }
  for (int i = 2; i < 6; ++i) put(root(i), std::nullopt);  // norm, Markov embedding and head, confidence
  out.write_file(path);
  res.paths = {path};
  return res;
}

/// write_model with every tensor in its own encoding, as `shards` files. Returns their paths.
inline std::vector<std::string> write_model(const ModelConfig& c, const WeightSource& w, const std::string& prefix,
                                            int shards, uint64_t alignment = kDefaultAlignment) {
  WriteOptions o;
  o.shards = shards;
  o.alignment = alignment;
  return write_model(c, w, prefix, o).paths;
}

}  // namespace gguf
}  // namespace ds41
#include "../core/fp_exact_end.hpp"
// the streaming sources, and GgufWeights' two overrides (they need the class complete)
#include "gguf_sources.hpp"
