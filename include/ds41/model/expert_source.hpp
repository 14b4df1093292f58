// ds41/model/expert_source.hpp — where a checkpoint's routed experts lie on disk, and how one
// expert's raw bytes become its three matrices.
//
//   ExpertSliceMap  where expert e of layer l lives: the byte ranges of its matrices (and scales)
//   ExpertSource    a file format's slice map, shard paths and conversion: GgufExpertSource (each
//                   of w1/w2/w3 one slice of the merged blk.l.ffn_{gate,down,up}_exps) and
//                   SafetensorsExpertSource (six tensors: three weights, three scales)
// The reads themselves are the expert cache's (expert_cache.hpp).
#pragma once
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>
#include "../io/gguf_weights.hpp"
#include "../io/safetensors_weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// Where every routed expert's bytes live: per (layer, expert) the byte ranges ("slices") that
/// hold its three matrices (and their scales), read back to back into one staging buffer.
class ExpertSliceMap {
 public:
  struct Slice {
    int shard = 0;
    uint64_t offset = 0, bytes = 0;
  };
  struct Expert {
    std::vector<Slice> parts;  // GGUF: w1, w2, w3; safetensors: w1, w1 scale, w2, w2 scale, w3, w3 scale
    uint64_t bytes = 0;
  };

  ExpertSliceMap() = default;
  explicit ExpertSliceMap(int experts) : experts_(experts) {}
  void add_layer(std::vector<Expert> layer) { layers_.push_back(std::move(layer)); }
  const Expert& at(int layer, int e) const { return layers_.at(layer).at(e); }
  int layers() const { return static_cast<int>(layers_.size()); }
  int experts() const { return experts_; }
  uint64_t max_expert_bytes() const {
    uint64_t m = 0;
    for (const auto& l : layers_)
      for (const Expert& e : l) m = std::max(m, e.bytes);
    return m;
  }

 private:
  int experts_ = 0;
  std::vector<std::vector<Expert>> layers_;
};

/// What ExpertCache streams from: the slice map of a model's files, the files' paths (the cache
/// reads them itself), and the conversion of one expert's staged slices (parts[i]: the bytes of
/// slices().at(layer, e).parts[i]) into three HostTensors. Implementations: GgufExpertSource
/// (merged [E, rows, cols] tensors) and SafetensorsExpertSource (six tensors per expert).
/// decode() runs on the calling thread.
class ExpertSource {
 public:
  virtual ~ExpertSource() = default;
  virtual const ExpertSliceMap& slices() const = 0;
  virtual std::vector<std::string> shard_paths() const = 0;
  virtual std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const = 0;
  /// The host backends' fast path: the three matrices as row-major views of the staged bytes
  /// themselves (no copy), their block scales decoded into `scales`. False (the default, and for
  /// formats that need converting) sends the caller to decode(); either way the same bits result.
  virtual bool views(int layer, int e, const uint8_t* const* parts, std::array<MatrixView, 3>& out,
                     std::array<std::vector<float>, 3>& scales) const {
    (void)layer, (void)e, (void)parts, (void)out, (void)scales;
    return false;
  }
};

/// `parts` (safetensors::Parts of an fp4 or fp8 weight and its F8_E8M0 scale) as a row-major view
/// of `w`, the scales decoded from `s` into `scales` (decode_parts' values, without copying the
/// codes). False for every other kind.
inline bool safetensors_view(const safetensors::SafetensorsShards& sh, const safetensors::Parts& p, const uint8_t* w,
                             const uint8_t* s, MatrixView& out, std::vector<float>& scales) {
  using safetensors::Kind;
  if ((p.kind != Kind::kFp4 && p.kind != Kind::kFp8) || !p.scale || p.shape.size() != 2) return false;
  const size_t n = p.scale->bytes;
  scales.resize(n);
  for (size_t i = 0; i < n; ++i) {
    if (s[i] == 0xFF) {  // decode_parts' error, named the same way
      safetensors::e8m0_scales(s, n, safetensors::where(sh, *p.scale));
      return false;
    }
    scales[i] = e8m0_to_f32(s[i]);
  }
  out = MatrixView{};
  out.format = p.kind == Kind::kFp8 ? WeightFormat::kFp8Block32 : WeightFormat::kFp4Block32;
  out.rows = static_cast<int>(p.shape[0]);
  out.cols = static_cast<int>(p.shape[1]);
  out.data = w;
  out.scales = scales.data();
  return true;
}

/// GGUF: llama.cpp stores a layer's routed experts as three merged [E, rows, cols] tensors, so
/// each of w1/w2/w3 is one contiguous slice (shard, offset, bytes, type) of blk.l.ffn_{gate,down,up}_exps.
class GgufExpertSource : public ExpertSource {
 public:
  GgufExpertSource(const GgufWeights& w) : shards_(w.shared_shards()) {
    const gguf::GgufShards& s = *shards_;
    const ModelConfig& c = w.config();
    map_ = ExpertSliceMap(c.n_routed_experts);
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<ExpertSliceMap::Expert> layer(c.n_routed_experts);
      for (int k = 0; k < 3; ++k) {
        const std::string name = gguf::blk(l, gguf::expert_tensor(k + 1));
        const gguf::TensorInfo* t = s.find(name);
        DS41_CHECK(t, "gguf ", s.path(), ": missing tensor '", name, "'");
        const std::vector<long> shape = t->shape();
        DS41_CHECK(shape.size() == 3 && shape[0] == c.n_routed_experts, "gguf ", s.path(), ": tensor '", name,
                   "' has shape ", shape_str({shape.begin(), shape.end()}), ", expected [", c.n_routed_experts, ", ...]");
        const std::string where = "gguf " + s.shard(t->shard).path() + ": tensor '" + name + "'";
        DS41_CHECK(gguf::readable_tensor_type(t->type) && t->type != gguf::TensorType::kDs41Fp8Row, where,
                   " has type ", gguf::tensor_type_name(t->type), ", which ds41 does not read as routed experts");
        types_[k].push_back(t->type);
        where_[k].push_back(where);
        shapes_[k].push_back({shape[1], shape[2]});
        for (int e = 0; e < c.n_routed_experts; ++e) {
          ExpertSliceMap::Slice sl;
          sl.shard = t->shard;
          sl.bytes = t->bytes / shape[0];
          sl.offset = t->offset + sl.bytes * e;
          layer[e].parts.push_back(sl);
          layer[e].bytes += sl.bytes;
        }
      }
      map_.add_layer(std::move(layer));
    }
  }
  const ExpertSliceMap& slices() const override { return map_; }
  std::vector<std::string> shard_paths() const override {
    std::vector<std::string> p;
    for (int i = 0; i < shards_->shard_count(); ++i) p.push_back(shards_->shard(i).path());
    return p;
  }
  std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const override {
    const ExpertSliceMap::Expert& ex = map_.at(layer, e);
    std::array<HostTensor, 3> out;
    for (int i = 0; i < 3; ++i)
      out[i] = gguf::decode_tensor(types_[i][layer], shapes_[i][layer], parts[i], ex.parts[i].bytes, gguf::Part::kWhole,
                                   where_[i][layer] + ", expert " + std::to_string(e) + " of layer " +
                                       std::to_string(layer));
    return out;
  }

 private:
  std::shared_ptr<const gguf::GgufShards> shards_;
  ExpertSliceMap map_;
  std::vector<gguf::TensorType> types_[3];  // per matrix, per layer
  std::vector<std::vector<long>> shapes_[3];
  std::vector<std::string> where_[3];  // "gguf FILE: tensor 'NAME'", for messages
};

/// Safetensors: expert e of layer l is layers.l.ffn.experts.e.w{1,2,3}.weight, each with its
/// .scale when quantised (fp4: I8 + F8_E8M0; fp8: F8_E4M3 + F8_E8M0; bf16: the weight alone).
class SafetensorsExpertSource : public ExpertSource {
 public:
  SafetensorsExpertSource(const SafetensorsWeights& w) : shards_(w.shared_shards()) {
    const ModelConfig& c = w.config();
    map_ = ExpertSliceMap(c.n_routed_experts);
    const long shape[3][2] = {{c.moe_inter_dim, c.dim}, {c.dim, c.moe_inter_dim}, {c.moe_inter_dim, c.dim}};
    for (int l = 0; l < c.n_layers; ++l) {
      std::vector<ExpertSliceMap::Expert> layer(c.n_routed_experts);
      std::vector<std::array<SafetensorsWeights::Parts, 3>> parts(c.n_routed_experts);
      for (int e = 0; e < c.n_routed_experts; ++e)
        for (int k = 0; k < 3; ++k) {
          const std::string name = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + ".w" +
                                   std::to_string(k + 1) + ".weight";
          SafetensorsWeights::Parts p = w.parts(name);
          const std::vector<long> want{shape[k][0], shape[k][1]};
          DS41_CHECK(p.shape == want, w.where(*p.weight), ": shape ", shape_str({p.shape.begin(), p.shape.end()}),
                     ", but config.json implies ", shape_str({want.begin(), want.end()}));
          for (const safetensors::TensorInfo* t : {p.weight, p.scale}) {
            if (!t) continue;
            layer[e].parts.push_back({t->shard, t->offset, t->bytes});
            layer[e].bytes += t->bytes;
          }
          parts[e][k] = std::move(p);
        }
      map_.add_layer(std::move(layer));
      parts_.push_back(std::move(parts));
    }
  }
  const ExpertSliceMap& slices() const override { return map_; }
  std::vector<std::string> shard_paths() const override {
    std::vector<std::string> p;
    for (int i = 0; i < shards_->shard_count(); ++i) p.push_back(shards_->shard(i).path());
    return p;
  }
  std::array<HostTensor, 3> decode(int layer, int e, const uint8_t* const* parts) const override {
    std::array<HostTensor, 3> out;
    int at = 0;
    for (int k = 0; k < 3; ++k) {
      const SafetensorsWeights::Parts& p = parts_.at(layer).at(e)[k];
      const uint8_t* wb = parts[at++];
      const uint8_t* sb = p.scale ? parts[at++] : nullptr;
      out[k] = safetensors::decode_parts(*shards_, p, wb, sb);
    }
    return out;
  }
  bool views(int layer, int e, const uint8_t* const* parts, std::array<MatrixView, 3>& out,
             std::array<std::vector<float>, 3>& scales) const override {
    int at = 0;
    for (int k = 0; k < 3; ++k) {
      const SafetensorsWeights::Parts& p = parts_.at(layer).at(e)[k];
      const uint8_t* wb = parts[at++];
      const uint8_t* sb = p.scale ? parts[at++] : nullptr;
      if (!safetensors_view(*shards_, p, wb, sb, out[k], scales[k])) return false;
    }
    return true;
  }

 private:
  std::shared_ptr<const safetensors::SafetensorsShards> shards_;
  ExpertSliceMap map_;
  std::vector<std::vector<std::array<SafetensorsWeights::Parts, 3>>> parts_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
