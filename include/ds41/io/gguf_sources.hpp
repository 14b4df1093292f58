// ds41/io/gguf_sources.hpp — GGUF's streaming sources: GgufExpertSource (where each routed
// expert lies in the shards, ExpertCache's ExpertSource) and GgufRowSource (an engram table read
// row by row, RowReaderTable's RowSource), and GgufWeights' expert_source() / row_source(), which
// hand them to model/ (model/ knows the interfaces alone: model/expert_source.hpp, row_source.hpp).
//
// gguf_weights.hpp includes this header at its end (the overrides are defined here, out of the
// class, because the sources need GgufWeights complete), so including either gives both.
#pragma once
#include <array>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include "../model/expert_source.hpp"
#include "../model/row_source.hpp"
#include "gguf_weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// GGUF: llama.cpp stores a layer's routed experts as three merged [E, rows, cols] tensors, so
/// each of w1/w2/w3 is one contiguous slice (shard, offset, bytes, type) of blk.l.ffn_{gate,down,up}_exps.
/// With a DSpark draft file (GgufWeights' draft()) that carries the head, its stages follow as
/// layers n_layers + s: the draft file's own merged tensors (dflash blk.s.*, ds4 mtp.s.*), each
/// stacking the draft's expert count, its shards numbered after the main file's.
class GgufExpertSource : public ExpertSource {
 public:
  GgufExpertSource(const GgufWeights& w) : shards_(w.shared_shards()) {
    const ModelConfig& c = w.config();
    map_ = ExpertSliceMap(c.n_routed_experts);
    for (int l = 0; l < c.n_layers; ++l)
      add_layer(*shards_, 0, "gguf ", c.n_routed_experts, [&](int k) { return gguf::blk(l, gguf::expert_tensor(k)); });
    const int S = dspark_stages(c, w);
    if (S == 0) return;
    const gguf::GgufDraft* d = w.draft();
    DS41_CHECK(d, "gguf ", shards_->path(), ": the DSpark stages' experts are in a draft file, and none was given");
    draft_ = d->shared_shards();
    for (int s = 0; s < S; ++s)
      add_layer(*draft_, shards_->shard_count(), "gguf draft ", c.dspark_experts(),
                [&](int k) { return gguf::draft_stage_prefix(d->family(), s) + gguf::expert_tensor(k); });
  }
  const ExpertSliceMap& slices() const override { return map_; }
  std::vector<std::string> shard_paths() const override {
    std::vector<std::string> p;
    for (const auto* sh : {shards_.get(), draft_.get()})
      for (int i = 0; sh && i < sh->shard_count(); ++i) p.push_back(sh->shard(i).path());
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
  /// Kept block types (ggml_linear_type: F16 and every block type but MXFP4 and I8): the staged
  /// bytes themselves, which the host packs straight into the arena slot (no HostTensor copy). A block with a non-finite scale is
  /// refused here, as decode() refuses it. Other types: false (decode()).
  bool views(int layer, int e, const uint8_t* const* parts, std::array<MatrixView, 3>& out,
             std::array<std::vector<float>, 3>& scales) const override {
    for (int i = 0; i < 3; ++i)
      if (!ggml_linear_type(static_cast<GgmlType>(types_[i][layer]))) return false;
    for (int i = 0; i < 3; ++i) {
      const GgmlType g = static_cast<GgmlType>(types_[i][layer]);
      const long rows = shapes_[i][layer][0], cols = shapes_[i][layer][1];
      DS41_CHECK(cols % ggml_block_elems(g) == 0, where_[i][layer], ": rows of ", cols, " are not whole ",
                 gguf::tensor_type_name(types_[i][layer]), " blocks");
      if (g != GgmlType::kF16) {
        const long bad = ggml_first_nonfinite_block(g, parts[i], rows * (cols / ggml_block_elems(g)));
        DS41_CHECK(bad < 0, where_[i][layer], ", expert ", e, " of layer ", layer, ": ",
                   gguf::tensor_type_name(types_[i][layer]), " block ", bad,
                   " has non-finite values (a NaN or infinite f16 scale)");
      }
      MatrixView v;
      v.format = WeightFormat::kGgmlBlocks;
      v.ggml_type = g;
      v.rows = static_cast<int>(rows);
      v.cols = static_cast<int>(cols);
      v.data = parts[i];
      out[i] = v;
      scales[i].clear();
    }
    return true;
  }

 private:
  /// The next layer of the map: w1/w2/w3 from the merged tensors name(1..3) of `s`, whose shards
  /// are numbered from `base` in shard_paths(), stacking E experts.
  template <class Name>
  void add_layer(const gguf::GgufShards& s, int base, const char* file, int E, const Name& name) {
    const int layer = map_.layers();
    std::vector<ExpertSliceMap::Expert> experts(E);
    for (int k = 0; k < 3; ++k) {
      const std::string n = name(k + 1);
      const gguf::TensorInfo* t = s.find(n);
      DS41_CHECK(t, file, s.path(), ": missing tensor '", n, "'");
      const std::vector<long> shape = t->shape();
      DS41_CHECK(shape.size() == 3 && shape[0] == E, file, s.path(), ": tensor '", n, "' has shape ",
                 shape_str({shape.begin(), shape.end()}), ", expected [", E, ", ...] (the routed experts of layer ",
                 layer, ")");
      const std::string where = file + s.shard(t->shard).path() + ": tensor '" + n + "'";
      DS41_CHECK(gguf::readable_tensor_type(t->type) && t->type != gguf::TensorType::kDs41Fp8Row, where, " has type ",
                 gguf::tensor_type_name(t->type), ", which ds41 does not read as routed experts");
      types_[k].push_back(t->type);
      where_[k].push_back(where);
      shapes_[k].push_back({shape[1], shape[2]});
      for (int e = 0; e < E; ++e) {
        ExpertSliceMap::Slice sl;
        sl.shard = base + t->shard;
        sl.bytes = t->bytes / shape[0];
        sl.offset = t->offset + sl.bytes * e;
        experts[e].parts.push_back(sl);
        experts[e].bytes += sl.bytes;
      }
    }
    map_.add_layer(std::move(experts));
  }

  std::shared_ptr<const gguf::GgufShards> shards_;
  std::shared_ptr<const gguf::GgufShards> draft_;  // the draft file's, when the stages stream
  ExpertSliceMap map_;
  std::vector<gguf::TensorType> types_[3];  // per matrix, per layer
  std::vector<std::vector<long>> shapes_[3];
  std::vector<std::string> where_[3];  // "gguf FILE: tensor 'NAME'", for messages
};

/// An engram table's rows in a GGUF shard, one pread a row: a DS41_FP8_ROW (or I8 row264) row is
/// its codes then its e8m0 scales; an MXFP4 row is read as the fp8 row of its values; a Q8_0,
/// K-quant or IQ2_XXS row (gguf::engram_value_type) is ggml's values of its blocks (read_values).
class GgufRowSource : public RowSource {
 public:
  GgufRowSource(const GgufWeights& gw, const std::string& p, long rows, int head_dim) : hd_(head_dim) {
    auto [ref, t] = gw.locate(p + "embed.weight");
    where_ = "gguf " + gw.shards().shard(t->shard).path() + ": tensor '" + t->name + "'";
    DS41_CHECK(gguf::engram_row_type(t->type), where_, " has type ", gguf::tensor_type_name(t->type),
               ", a row-read engram table needs ", gguf::kEngramRowTypes);
    const std::vector<long> shape = t->shape();
    const long row_elems = t->type == gguf::TensorType::kI8 ? head_dim + head_dim / 32 : head_dim;
    DS41_CHECK(shape == (std::vector<long>{rows, row_elems}), "gguf ", gw.shards().path(), ": tensor '", t->name,
               "' (", gguf::tensor_type_name(t->type), ") has shape ", shape_str({shape.begin(), shape.end()}),
               ", expected [", rows, ", ", row_elems, "]");
    if (gguf::engram_value_type(t->type)) gguf::check_engram_value_row(t->type, head_dim, where_);
    shards_ = gw.shared_shards();
    shard_ = t->shard;
    offset_ = t->offset;
    type_ = t->type;
    row_bytes_ = gguf::engram_row_bytes(t->type, head_dim);
  }
  uint64_t read_row(long r, uint8_t* codes, uint8_t* scales) const override {
    DS41_CHECK(!gguf::engram_value_type(type_), where_, ": ", gguf::tensor_type_name(type_),
               " engram rows hold values, not e4m3 codes and scales (read_values reads them)");
    const std::vector<uint8_t> raw = raw_row(r);
    if (type_ == gguf::TensorType::kMXFP4) {  // mxxm-t's rows: as the fp8 row of ggml's values
      const std::vector<uint8_t> fp8 = gguf::mxfp4_engram_rows(raw.data(), 1, hd_, where_ + " row " + std::to_string(r));
      std::memcpy(codes, fp8.data(), hd_);
      std::memcpy(scales, fp8.data() + hd_, hd_ / 32);
      return row_bytes_;
    }
    std::memcpy(codes, raw.data(), hd_);
    std::memcpy(scales, raw.data() + hd_, row_bytes_ - hd_);
    return row_bytes_;
  }
  uint64_t read_values(long r, int hd, float* v) const override {
    if (!gguf::engram_value_type(type_)) return RowSource::read_values(r, hd, v);
    DS41_CHECK(hd == hd_, where_, ": rows of ", hd_, " values, asked for ", hd);
    const std::vector<uint8_t> raw = raw_row(r);
    const std::vector<float> vals = gguf::engram_value_rows(type_, raw.data(), 1, hd_, r, where_);
    std::memcpy(v, vals.data(), static_cast<size_t>(hd_) * 4);
    return row_bytes_;
  }
  std::string where() const override { return where_; }

 private:
  std::vector<uint8_t> raw_row(long r) const {
    std::vector<uint8_t> raw(row_bytes_);
    shards_->read(shard_, raw.data(), row_bytes_, offset_ + static_cast<uint64_t>(r) * row_bytes_, "engram row");
    return raw;
  }

  std::shared_ptr<const gguf::GgufShards> shards_;
  int hd_ = 0, shard_ = 0;
  gguf::TensorType type_ = gguf::TensorType::kDs41Fp8Row;
  uint64_t offset_ = 0, row_bytes_ = 0;
  std::string where_;
};

inline std::shared_ptr<const ExpertSource> GgufWeights::expert_source() const {
  return std::make_shared<GgufExpertSource>(*this);
}
inline std::shared_ptr<const RowSource> GgufWeights::row_source(const std::string& prefix, long rows,
                                                                 int head_dim) const {
  return std::make_shared<GgufRowSource>(*this, prefix, rows, head_dim);
}

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
