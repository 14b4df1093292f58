// ds41/model/expert_source.hpp — where a checkpoint's routed experts lie on disk, and how one
// expert's raw bytes become its three matrices: the interface the expert cache streams through.
//
//   ExpertSliceMap  where expert e of layer l lives: the byte ranges of its matrices (and scales)
//   ExpertSource    a file format's slice map, shard paths and conversion
// The formats implement it in io/ (io/gguf_sources.hpp: GgufExpertSource, each of w1/w2/w3 one
// slice of the merged blk.l.ffn_{gate,down,up}_exps; io/safetensors_sources.hpp:
// SafetensorsExpertSource, six tensors: three weights, three scales) and hand it out through
// WeightSource::expert_source(), so model/ never includes io/. The reads themselves are the expert
// cache's (expert_cache.hpp).
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>
#include "weights.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// Where every routed expert's bytes live: per (layer, expert) the byte ranges ("slices") that
/// hold its three matrices (and their scales), read back to back into one staging buffer. Layers
/// 0 .. n_layers - 1 are the backbone's; a model with DSpark's draft head (dspark_stages() > 0)
/// has its stages after them, stage s as layer n_layers + s, each with the draft's own expert
/// count (ModelConfig::dspark_experts()), so one cache streams both.
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
  /// The backbone's routed experts per layer (n_routed_experts).
  int experts() const { return experts_; }
  /// Layer `layer`'s routed experts: experts() for the backbone's, the draft's for a stage's.
  int experts(int layer) const { return static_cast<int>(layers_.at(layer).size()); }
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
/// slices().at(layer, e).parts[i]) into three HostTensors. Implementations (io/): GgufExpertSource
/// (merged [E, rows, cols] tensors) and SafetensorsExpertSource (six tensors per expert).
/// decode() runs on the calling thread, or on a reader thread (StreamOptions::convert_on_readers).
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

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
