// ds41/io/gguf_weights.hpp — GgufWeights, the file-backed WeightSource (each tensor read with
// pread from its shard when a component asks for it, converted to the library's formats), and
// write_model, which writes any model (config + WeightSource) as GGUF shards.
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "gguf_model.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

class GgufWeights : public WeightSource {
 public:
  using Progress = gguf::GgufShards::Progress;

  explicit GgufWeights(const std::string& first_shard, const Progress& progress = {})
      : shards_(std::make_shared<gguf::GgufShards>(first_shard, progress)), cfg_(gguf::read_config(*shards_)) {}

  const ModelConfig& config() const { return cfg_; }
  const gguf::GgufShards& shards() const { return *shards_; }
  std::shared_ptr<const gguf::GgufShards> shared_shards() const { return shards_; }

  /// The GGUF tensor behind a reference name, with the part of it the name is; throws when absent.
  std::pair<gguf::NameRef, const gguf::TensorInfo*> locate(const std::string& name) const {
    auto ref = gguf::to_gguf(name);
    DS41_CHECK(ref, "gguf ", shards_->path(), ": no GGUF tensor corresponds to reference tensor '", name, "'");
    const gguf::TensorInfo* t = shards_->find(ref->gguf);
    DS41_CHECK(t, "gguf ", shards_->path(), ": missing tensor '", ref->gguf, "' (reference '", name, "')");
    return {*ref, t};
  }

  bool has(const std::string& name) const override {
    auto ref = gguf::to_gguf(name);
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
    } else if (ref.part == gguf::Part::kEngramScales) {
      DS41_CHECK(have.size() == 2, what, " is not a table");
      have[1] /= 32;
    }
    check_shape(name, have, shape);
    std::vector<uint8_t> raw(bytes);
    shards_->read(t->shard, raw.data(), bytes, offset, "tensor data");
    std::vector<long> tshape = ref.part == gguf::Part::kEngramScales ? std::vector<long>{shape[0], shape[1] * 32} : shape;
    return gguf::decode_tensor(t->type, tshape, raw.data(), bytes, ref.part, what);
  }

 private:
  std::shared_ptr<gguf::GgufShards> shards_;
  ModelConfig cfg_;
};

namespace gguf {

/// Write a model's parameters (every tensor the config implies, taken from `w` by reference name)
/// and its config as GGUF `shards` files PREFIX-0000k-of-0000n.gguf. Returns their paths.
inline std::vector<std::string> write_model(const ModelConfig& c, const WeightSource& w, const std::string& prefix,
                                            int shards, uint64_t alignment = kDefaultAlignment) {
  GgufWriter out(alignment);
  write_config(out, c);
  auto shape_of = [&](const std::string& n) {
    // shapes are not known here without the components: ask the source for the tensor with its
    // own shape (WeightSet knows it); load() checks shape equality, so pass what it holds
    const auto* ws = dynamic_cast<const WeightSet*>(&w);
    DS41_CHECK(ws, "gguf writer: write_model needs a WeightSet source");
    auto it = ws->all().find(n);
    DS41_CHECK(it != ws->all().end(), "gguf writer: missing tensor '", n, "'");
    return it->second.shape;
  };
  auto put = [&](const std::string& ref) {
    if (!w.has(ref)) return;
    const HostTensor t = w.load(ref, shape_of(ref));
    auto [type, bytes] = encode_tensor(t, "gguf writer: tensor '" + ref + "'");
    out.add_tensor(to_gguf(ref)->gguf, t.shape, type, std::move(bytes));
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
        auto [ty, bytes] = encode_tensor(t, "gguf writer: tensor '" + ref + "'");
        DS41_CHECK(e == 0 || (ty == type && t.shape == shape), "gguf writer: expert ", e, " of layer ", l,
                   " differs in type or shape from expert 0");
        type = ty;
        shape = t.shape;
        merged.insert(merged.end(), bytes.begin(), bytes.end());
      }
      shape.insert(shape.begin(), c.n_routed_experts);
      out.add_tensor(blk(l, expert_tensor(k)), shape, type, std::move(merged));
    }
    if (c.engram_slot(l) >= 0) {
      const HostTensor codes = w.load(p + "engram.embed.weight", shape_of(p + "engram.embed.weight"));
      const HostTensor sc = w.load(p + "engram.embed.scale", shape_of(p + "engram.embed.scale"));
      out.add_tensor(blk(l, "engram_embd.weight"), codes.shape, TensorType::kDs41Fp8Row,
                     encode_engram_rows(codes, sc, "gguf writer: engram table of layer " + std::to_string(l)));
    }
  }
  for (const LayerName& n : kTopNames)
    if (std::string(n.ref) != "embed.weight") put(n.ref);
  return out.write_shards(prefix, shards);
}

}  // namespace gguf
}  // namespace ds41
#include "../core/fp_exact_end.hpp"
