// ds41/model/row_reader_table.hpp — RowReaderTable, the engram Table policy for tables too large
// to hold: each row is read with pread when a token's hash names it, through a small LRU row
// cache. The table is never loaded whole. Rows come from the weights' RowSource
// (WeightSource::row_source, row_source.hpp) as f32 values (RowSource::read_values), which io/
// implements: a GGUF shard (a DS41_FP8_ROW row, or an I8 row264 row, is self-contained: codes then
// e8m0 scales; an MXFP4 row is read as the fp8 row of its values, gguf::mxfp4_engram_rows; a Q8_0,
// K-quant or IQ2_XXS row as ggml's values of its blocks, gguf::engram_value_rows) or a safetensors
// checkpoint (the row of engram.embed.weight and the row of engram.embed.scale).
//
//   ds41::Model<B, Experts, ds41::RowReaderTable<B>> model(w.config(), w /* Gguf- or SafetensorsWeights */, ...);
#pragma once
#include <cstring>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include "config.hpp"
#include "row_source.hpp"
#include "weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

struct RowCacheCounters {
  uint64_t hits = 0, misses = 0, bytes_read = 0;
};

template <class B>
class RowReaderTable {
 public:
  static constexpr long kDefaultCacheRows = 4096;

  RowReaderTable() = default;
  RowReaderTable(const WeightSource& w, const std::string& p, long rows, int head_dim,
                 long cache_rows = kDefaultCacheRows)
      : rows_(rows), hd_(head_dim), cache_rows_(cache_rows) {
    src_ = w.row_source(p, rows, head_dim);
    DS41_CHECK(src_, "engram table '", p, "embed.weight': RowReaderTable reads rows from files; these weights "
               "cannot be read by rows (their WeightSource has no row_source(): use a GgufWeights or a "
               "SafetensorsWeights, or ResidentTable)");
    counters_ = std::make_shared<RowCacheCounters>();
  }
  long rows() const { return rows_; }
  const RowCacheCounters& counters() const { return *counters_; }

  /// out[i, :] = bf16(value) for ids[i] (ids and out on the backend; value = code · scale for fp8
  /// rows), as ResidentTable.
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
  /// Row r's values rounded to bf16, from the cache or the file.
  const std::vector<float>& fetch(long r) const {
    DS41_CHECK(r >= 0 && r < rows_, "engram: row ", r, " outside the table [0, ", rows_, ")");
    if (auto it = where_.find(r); it != where_.end()) {
      order_.splice(order_.end(), order_, it->second);
      ++counters_->hits;
      return it->second->second;
    }
    ++counters_->misses;
    std::vector<float> v(hd_);
    counters_->bytes_read += src_->read_values(r, hd_, v.data());
    for (float& x : v) x = bf16_round(x);  // the reference's lookup gives bf16 rows
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
