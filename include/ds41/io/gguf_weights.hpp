// ds41/io/gguf_weights.hpp — GgufWeights, the file-backed WeightSource (each tensor read with
// pread from its shard when a component asks for it, converted to the library's formats), and
// write_model, which writes any model (config + WeightSource) as GGUF shards.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>
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

  const ModelConfig& config() const { return cfg_; }
  /// The metadata and tensor-name dialect of the file (detected from its metadata).
  gguf::Dialect dialect() const { return dialect_; }
  const gguf::GgufShards& shards() const { return *shards_; }
  std::shared_ptr<const gguf::GgufShards> shared_shards() const { return shards_; }

  /// The GGUF tensor behind a reference name, with the part of it the name is; throws when absent.
  std::pair<gguf::NameRef, const gguf::TensorInfo*> locate(const std::string& name) const {
    auto ref = gguf::to_gguf(name, dialect_);
    DS41_CHECK(ref, "gguf ", shards_->path(), ": no GGUF tensor corresponds to reference tensor '", name, "'");
    const gguf::TensorInfo* t = shards_->find(ref->gguf);
    DS41_CHECK(t, "gguf ", shards_->path(), ": missing tensor '", ref->gguf, "' (reference '", name, "')");
    return {*ref, t};
  }

  bool has(const std::string& name) const override {
    auto ref = gguf::to_gguf(name, dialect_);
    if (!ref) return false;
    const gguf::TensorInfo* t = shards_->find(ref->gguf);
    if (!t) return false;
    return ref->part != gguf::Part::kExpertSlice || (t->dims.size() == 3 && static_cast<uint64_t>(ref->expert) < t->dims[2]);
  }

  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    auto [ref, t] = locate(name);
    const std::string what = "gguf " + shards_->shard(t->shard).path() + ": tensor '" + t->name + "'";
    std::vector<long> have = t->shape();
    uint64_t offset = t->offset, bytes = t->bytes;
    if (ref.part == gguf::Part::kExpertSlice) {  // one expert of the merged [E, rows, cols] tensor
      DS41_CHECK(have.size() == 3 && ref.expert < have[0], what, " has shape ", shape_str({have.begin(), have.end()}),
                 ", no expert ", ref.expert);
      bytes = t->bytes / have[0];
      offset += bytes * ref.expert;
      have.erase(have.begin());
    } else if (ref.part == gguf::Part::kEngramCodes || ref.part == gguf::Part::kEngramScales) {
      DS41_CHECK(gguf::engram_row_type(t->type), what, ": engram table has type ", gguf::tensor_type_name(t->type),
                 ", expected DS41_FP8_ROW or I8 rows of e4m3 codes and e8m0 scales (row264)");
      DS41_CHECK(have.size() == 2 && gguf::engram_row_dim(t->type, have[1]) > 0, what, " of shape ",
                 shape_str({have.begin(), have.end()}), " is not a table of engram rows");
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
  bool engram_i8 = false;             // engram tables as I8 [K + K/32, rows] (row264) instead of DS41_FP8_ROW
  /// Metadata keys and tensor names (docs/GGUF.md "Dialects"). ds4 always writes its engram
  /// tables as I8 row264; mxxm-t's own tables are MXFP4 rows, which ds41 neither reads nor
  /// writes: its engram_embed is written as DS41_FP8_ROW (or I8 with engram_i8).
  Dialect dialect = Dialect::kLlamaCpp;
};
struct WriteResult {
  std::vector<std::string> paths;  // first shard first
  long converted = 0;              // tensors written in a type of the options
  std::vector<std::string> kept;   // "NAME: why", tensors a type was asked for but that keep their encoding
};

/// Write a model's parameters (every tensor the config implies, taken from `w` by reference name)
/// and its config as GGUF files PREFIX-0000k-of-0000n.gguf. A tensor given a type whose block does
/// not divide its rows (K-quants need K % 256 == 0) keeps its own encoding (listed in `kept`, as
/// llama-quantize falls back on such tensors).
inline WriteResult write_model(const ModelConfig& c, const WeightSource& w, const std::string& prefix,
                               const WriteOptions& opt) {
  WriteResult res;
  GgufWriter out(opt.alignment);
  write_config(out, c, opt.dialect);
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
    const std::string what = "gguf writer: tensor '" + ref + "'";
    if (!want) return encode_tensor(t, what);
    const GgmlTypeInfo* info = ggml_info(*want);
    DS41_CHECK(info && (quantizable_block_type(*want) || *want == TensorType::kQ8_0 || *want == TensorType::kF32 ||
                        *want == TensorType::kF16 || *want == TensorType::kBF16),
               "gguf writer: cannot write type ", tensor_type_name(*want));
    auto own = encode_tensor(t, what);
    if (own.first == *want) return own;
    if (t.shape.size() != 2 || t.shape[1] % info->block_elems != 0) {
      if (note)
        res.kept.push_back(ref + ": rows of " + std::to_string(t.shape.back()) + " are not whole " +
                           tensor_type_name(*want) + " blocks of " + std::to_string(info->block_elems) + ", kept " +
                           tensor_type_name(own.first));
      return own;
    }
    return std::pair<TensorType, std::vector<uint8_t>>{*want, encode_values(t.to_f32(), *want)};
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
      const HostTensor codes = w.load(p + "engram.embed.weight", shape_of(p + "engram.embed.weight"));
      const HostTensor sc = w.load(p + "engram.embed.scale", shape_of(p + "engram.embed.scale"));
      std::vector<long> shape = codes.shape;
      if (engram_i8) shape[1] += shape[1] / 32;  // the same bytes as I8 elements
      out.add_tensor(engram_table(opt.dialect, l), shape, engram_i8 ? TensorType::kI8 : TensorType::kDs41Fp8Row,
                     encode_engram_rows(codes, sc, "gguf writer: engram table of layer " + std::to_string(l)));
    }
  }
  for (const LayerName& n : kTopNames)
    if (std::string(n.ref) != "embed.weight") put(n.ref);
  res.paths = out.write_shards(prefix, opt.shards);
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
