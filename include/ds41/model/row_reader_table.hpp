// ds41/model/row_reader_table.hpp — RowReaderTable, the engram Table policy for tables too large
// to hold: each row is read with pread when a token's hash names it, through a small LRU row
// cache. The table is never loaded whole. Rows come from a RowSource: a GGUF shard (a DS41_FP8_ROW
// row, or an I8 row264 row, is self-contained: codes then e8m0 scales; an MXFP4 row is read as the
// fp8 row of its values, gguf::mxfp4_engram_rows) or a safetensors checkpoint (the row of
// engram.embed.weight and the row of engram.embed.scale).
//
//   ds41::Model<B, Experts, ds41::RowReaderTable<B>> model(w.config(), w /* Gguf- or SafetensorsWeights */, ...);
#pragma once
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include "../io/gguf_weights.hpp"
#include "../io/safetensors_weights.hpp"
#include "config.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

struct RowCacheCounters {
  uint64_t hits = 0, misses = 0, bytes_read = 0;
};

/// Where an engram table's rows live: read_row(r) fills row r's hd e4m3 codes and hd/32 e8m0
/// scale bytes and returns the bytes it read. GGUF: one DS41_FP8_ROW row (codes then scales, one
/// pread); safetensors: engram.embed.weight's row and engram.embed.scale's row (two preads).
class RowSource {
 public:
  virtual ~RowSource() = default;
  virtual uint64_t read_row(long r, uint8_t* codes, uint8_t* scales) const = 0;
  /// "FILE: tensor 'NAME'" of the table, for messages.
  virtual std::string where() const = 0;
};

class GgufRowSource : public RowSource {
 public:
  GgufRowSource(const GgufWeights& gw, const std::string& p, long rows, int head_dim) : hd_(head_dim) {
    auto [ref, t] = gw.locate(p + "embed.weight");
    where_ = "gguf " + gw.shards().shard(t->shard).path() + ": tensor '" + t->name + "'";
    DS41_CHECK(gguf::engram_row_type(t->type), where_, " has type ", gguf::tensor_type_name(t->type),
               ", a row-read engram table needs DS41_FP8_ROW, I8 (row264: e4m3 codes, then e8m0 scales) or MXFP4 rows");
    const std::vector<long> shape = t->shape();
    const long row_elems = t->type == gguf::TensorType::kI8 ? head_dim + head_dim / 32 : head_dim;
    DS41_CHECK(shape == (std::vector<long>{rows, row_elems}), "gguf ", gw.shards().path(), ": tensor '", t->name,
               "' (", gguf::tensor_type_name(t->type), ") has shape ", shape_str({shape.begin(), shape.end()}),
               ", expected [", rows, ", ", row_elems, "]");
    shards_ = gw.shared_shards();
    shard_ = t->shard;
    offset_ = t->offset;
    type_ = t->type;
    row_bytes_ = gguf::engram_row_bytes(t->type, head_dim);
  }
  uint64_t read_row(long r, uint8_t* codes, uint8_t* scales) const override {
    std::vector<uint8_t> raw(row_bytes_);
    shards_->read(shard_, raw.data(), row_bytes_, offset_ + static_cast<uint64_t>(r) * row_bytes_, "engram row");
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
  std::string where() const override { return where_; }

 private:
  std::shared_ptr<const gguf::GgufShards> shards_;
  int hd_ = 0, shard_ = 0;
  gguf::TensorType type_ = gguf::TensorType::kDs41Fp8Row;
  uint64_t offset_ = 0, row_bytes_ = 0;
  std::string where_;
};

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

template <class B>
class RowReaderTable {
 public:
  static constexpr long kDefaultCacheRows = 4096;

  RowReaderTable() = default;
  RowReaderTable(const WeightSource& w, const std::string& p, long rows, int head_dim,
                 long cache_rows = kDefaultCacheRows)
      : rows_(rows), hd_(head_dim), cache_rows_(cache_rows) {
    if (const auto* gw = dynamic_cast<const GgufWeights*>(&w))
      src_ = std::make_shared<GgufRowSource>(*gw, p, rows, head_dim);
    else if (const auto* sw = dynamic_cast<const SafetensorsWeights*>(&w))
      src_ = std::make_shared<SafetensorsRowSource>(*sw, p, rows, head_dim);
    else
      fail("engram table '", p, "embed.weight': RowReaderTable reads rows from GGUF or safetensors files; its "
           "weights must be a GgufWeights or a SafetensorsWeights");
    counters_ = std::make_shared<RowCacheCounters>();
  }
  long rows() const { return rows_; }
  const RowCacheCounters& counters() const { return *counters_; }

  /// out[i, :] = bf16(code · scale) for ids[i] (ids and out on the backend), as ResidentTable.
  void gather(const int32_t* ids, long n, float* out) const {
    std::vector<int32_t> h_ids(n);
    B::download(h_ids.data(), ids, n);
    std::vector<float> h_out(static_cast<size_t>(n) * hd_);
    for (long i = 0; i < n; ++i) {
      const std::vector<float>& row = fetch(h_ids[i]);
      std::copy(row.begin(), row.end(), h_out.begin() + i * hd_);
    }
    B::upload(out, h_out.data(), h_out.size());
  }

 private:
  /// Row r dequantised to bf16 values, from the cache or the file.
  const std::vector<float>& fetch(long r) const {
    DS41_CHECK(r >= 0 && r < rows_, "engram: row ", r, " outside the table [0, ", rows_, ")");
    if (auto it = where_.find(r); it != where_.end()) {
      order_.splice(order_.end(), order_, it->second);
      ++counters_->hits;
      return it->second->second;
    }
    ++counters_->misses;
    std::vector<uint8_t> raw(static_cast<size_t>(hd_) + hd_ / 32);
    counters_->bytes_read += src_->read_row(r, raw.data(), raw.data() + hd_);
    std::vector<float> v(hd_);
    const float* decode = e4m3_decode_table();  // e4m3_decode's bits, one lookup a code
    for (int d0 = 0; d0 < hd_; d0 += 32) {
      const float s = e8m0_to_f32(raw[hd_ + d0 / 32]);
      const int d1 = hd_ - d0 < 32 ? hd_ : d0 + 32;
      for (int d = d0; d < d1; ++d) v[d] = bf16_round(decode[raw[d]] * s);
    }
    if (static_cast<long>(order_.size()) >= cache_rows_ && !order_.empty()) {
      where_.erase(order_.front().first);
      order_.pop_front();
    }
    order_.emplace_back(r, std::move(v));
    where_[r] = std::prev(order_.end());
    return order_.back().second;
  }

  long rows_ = 0;
  int hd_ = 0;
  long cache_rows_ = kDefaultCacheRows;
  std::shared_ptr<const RowSource> src_;
  std::shared_ptr<RowCacheCounters> counters_;
  // the cache changes under gather(), which EngramT calls from a const forward
  mutable std::list<std::pair<long, std::vector<float>>> order_;
  mutable std::unordered_map<long, std::list<std::pair<long, std::vector<float>>>::iterator> where_;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
