// ds41/io/safetensors_sources.hpp — the checkpoint's streaming sources: SafetensorsExpertSource
// (where each routed expert's six tensors lie in the shards, ExpertCache's ExpertSource),
// SafetensorsRowSource (an engram table read row by row, RowReaderTable's RowSource), and
// SafetensorsWeights' expert_source() / row_source(), which hand them to model/ (model/ knows the
// interfaces alone: model/expert_source.hpp, row_source.hpp).
//
// safetensors_weights.hpp includes this header at its end (the overrides are defined here, out
// of the class, because the sources need SafetensorsWeights complete), so including either gives
// both.
#pragma once
#include <array>
#include <memory>
#include <string>
#include <vector>
#include "../model/expert_source.hpp"
#include "../model/row_source.hpp"
#include "safetensors_weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

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

/// Safetensors: expert e of layer l is layers.l.ffn.experts.e.w{1,2,3}.weight, each with its
/// .scale when quantised (fp4: I8 + F8_E8M0; fp8: F8_E4M3 + F8_E8M0; bf16: the weight alone);
/// DSpark's stage s, where the checkpoint has the head, is layer n_layers + s: mtp.s.ffn.experts.*.
class SafetensorsExpertSource : public ExpertSource {
 public:
  SafetensorsExpertSource(const SafetensorsWeights& w) : shards_(w.shared_shards()) {
    const ModelConfig& c = w.config();
    map_ = ExpertSliceMap(c.n_routed_experts);
    const long shape[3][2] = {{c.moe_inter_dim, c.dim}, {c.dim, c.moe_inter_dim}, {c.moe_inter_dim, c.dim}};
    // the backbone's layers, then DSpark's stages as layers n_layers + s (mtp.s.ffn.experts.*, the
    // draft's own expert count) where the model has the draft head
    const int S = dspark_stages(c, w);
    for (int l = 0; l < c.n_layers + S; ++l) {
      const bool stage = l >= c.n_layers;
      const int E = stage ? c.dspark_experts() : c.n_routed_experts;
      const std::string prefix = stage ? "mtp." + std::to_string(l - c.n_layers) + "." : "layers." + std::to_string(l) + ".";
      std::vector<ExpertSliceMap::Expert> layer(E);
      std::vector<std::array<SafetensorsWeights::Parts, 3>> parts(E);
      for (int e = 0; e < E; ++e)
        for (int k = 0; k < 3; ++k) {
          const std::string name = prefix + "ffn.experts." + std::to_string(e) + ".w" + std::to_string(k + 1) + ".weight";
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

/// An engram table's rows in a checkpoint: the row of engram.embed.weight (F8_E4M3 codes) and
/// the row of engram.embed.scale (F8_E8M0), two preads.
class SafetensorsRowSource : public RowSource {
 public:
  SafetensorsRowSource(const SafetensorsWeights& sw, const std::string& p, long rows, int head_dim)
      : shards_(sw.shared_shards()), hd_(head_dim) {
    const SafetensorsWeights::Parts c = sw.parts(p + "embed.weight"), s = sw.parts(p + "embed.scale");
    where_ = sw.where(*c.weight);
    DS41_CHECK(c.kind == SafetensorsWeights::Kind::kEngramCodes, where_, " has dtype ",
               safetensors::dtype_name(c.weight->dtype), ", a row-read engram table needs F8_E4M3");
    DS41_CHECK(s.kind == SafetensorsWeights::Kind::kScale, sw.where(*s.weight), " has dtype ",
               safetensors::dtype_name(s.weight->dtype), ", a row-read engram table needs F8_E8M0 scales");
    const std::vector<long> want{rows, head_dim}, want_s{rows, head_dim / 32};
    DS41_CHECK(c.shape == want, where_, ": shape ", shape_str({c.shape.begin(), c.shape.end()}),
               ", but config.json implies ", shape_str({want.begin(), want.end()}));
    DS41_CHECK(s.shape == want_s, sw.where(*s.weight), ": shape ", shape_str({s.shape.begin(), s.shape.end()}),
               ", but config.json implies ", shape_str({want_s.begin(), want_s.end()}));
    codes_ = *c.weight;
    scales_ = *s.weight;
  }
  uint64_t read_row(long r, uint8_t* codes, uint8_t* scales) const override {
    const uint64_t nb = static_cast<uint64_t>(hd_ / 32);
    shards_->read(codes_.shard, codes, hd_, codes_.offset + static_cast<uint64_t>(r) * hd_, "engram row codes");
    shards_->read(scales_.shard, scales, nb, scales_.offset + static_cast<uint64_t>(r) * nb, "engram row scales");
    for (uint64_t b = 0; b < nb; ++b)
      DS41_CHECK(scales[b] != 0xFF, "safetensors ", shards_->shard(scales_.shard).path(), ": tensor '", scales_.name,
                 "': scale ", static_cast<uint64_t>(r) * nb + b, " (row ", r, ") is the F8_E8M0 NaN byte 0xFF");
    return hd_ + nb;
  }
  std::string where() const override { return where_; }

 private:
  std::shared_ptr<const safetensors::SafetensorsShards> shards_;
  int hd_ = 0;
  safetensors::TensorInfo codes_, scales_;
  std::string where_;
};

inline std::shared_ptr<const ExpertSource> SafetensorsWeights::expert_source() const {
  return std::make_shared<SafetensorsExpertSource>(*this);
}
inline std::shared_ptr<const RowSource> SafetensorsWeights::row_source(const std::string& prefix, long rows,
                                                                        int head_dim) const {
  return std::make_shared<SafetensorsRowSource>(*this, prefix, rows, head_dim);
}

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
