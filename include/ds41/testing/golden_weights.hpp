// ds41/testing/golden_weights.hpp — a golden's parameters made from their rules (SCHEMA §1.3-1.4):
// all at once into a WeightSet (regenerate_weights), or one by one as a model asks for each
// (RegeneratedWeights). Included by golden.hpp after the Golden it reads.
#pragma once
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include "../core/error.hpp"
#include "../model/weights.hpp"
#include "filler.hpp"
#include "golden.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::golden {

/// One parameter made from its rule: the tensor, and the scales of its quantisation where the
/// storage has them (what the golden's "derived" `<prefix>.scale` parameter holds; else empty).
struct RegeneratedParam {
  HostTensor tensor;
  std::vector<float> scales;
};

/// The name of the "derived" scale parameter a quantised parameter `name` feeds: `<prefix>.scale`
/// for `<prefix>.weight` (SCHEMA §1.4, §10.2).
inline std::string derived_scale_name(const std::string& name) {
  return name.substr(0, name.size() - std::string("weight").size()) + "scale";
}

/// Whether parameters of `storage` feed a derived scale parameter (the bf16 form of an fp8 weight
/// holds its values and no scale).
inline bool storage_has_scales(const std::string& storage) {
  return storage == "e4m3_pow2_block32" || storage == "e4m3_pow2_block32x32" || storage == "e2m1_pow2_block32";
}

/// Whether regenerate_param knows `storage` (or it is "derived", made from its source's scales):
/// RegeneratedWeights checks every rule by it when it is made, as regenerate_weights fails at once.
inline bool storage_known(const std::string& storage) {
  return storage == "f32" || storage == "bf16" || storage == "e4m3_pow2_block32x32_bf16" || storage == "derived" ||
         storage_has_scales(storage);
}

/// Makes parameter `p` of golden `g` (not a "derived" one: those are the scales this returns).
/// `v` is a scratch row of values the caller keeps between parameters: a vector per parameter was a
/// fresh mapping of up to hundreds of MB each time, faulted in page by page (rel_fp8: 2.05M page
/// faults -> 0.66M, 8 -> 4 s of kernel time; session 42).
inline RegeneratedParam regenerate_param(const Golden& g, const ParamRule& p, std::vector<float>& v) {
  long n = 1;
  for (long d : p.shape) n *= d;
  if (!p.logical_shape.empty()) n = p.logical_shape[0] * p.logical_shape[1];  // filler index r·in + c
  const uint64_t h = filler::fnv1a64(p.name);
  v.resize(n);  // every element written below
  for (long i = 0; i < n; ++i) v[i] = filler::fixed_value_h(h, static_cast<uint64_t>(i), p.scale, p.offset);
  RegeneratedParam out;
  if (p.storage == "f32") {
    out.tensor = HostTensor::from_f32(p.shape, v);
  } else if (p.storage == "bf16") {
    for (float& x : v) x = bf16_round(x);
    out.tensor = HostTensor::from_bf16_values(p.shape, v);
  } else if (p.storage == "e4m3_pow2_block32") {
    DS41_CHECK(p.shape.size() == 2, "golden ", g.path, ": parameter '", p.name,
               "' with storage e4m3_pow2_block32 has shape ", shape_str({p.shape.begin(), p.shape.end()}),
               ", expected [rows, cols]");
    const long rows = p.shape[0], cols = p.shape[1], nb = (cols + 31) / 32;
    out.scales.resize(static_cast<size_t>(rows) * nb);
    for (long r = 0; r < rows; ++r)
      filler::quantize_e4m3_pow2_row(&v[r * cols], static_cast<int>(cols), &out.scales[r * nb]);
    out.tensor = HostTensor::from_f32(p.shape, v);
  } else if (p.storage == "e4m3_pow2_block32x32" || p.storage == "e4m3_pow2_block32x32_bf16") {
    // SCHEMA §10.2: an fp8 Linear weight (codes + a 2^k per 32x32 block), or wo_a as the bf16
    // values convert.py makes of it (code·2^k, exact in bf16)
    DS41_CHECK(p.shape.size() == 2, "golden ", g.path, ": parameter '", p.name, "' with storage ", p.storage,
               " has shape ", shape_str({p.shape.begin(), p.shape.end()}), ", expected [out, in]");
    HostTensor t;
    t.shape = p.shape;
    std::vector<float> sc;
    filler::quantize_e4m3_block32x32(v, p.shape[0], p.shape[1], t.payload, sc);
    if (p.storage == "e4m3_pow2_block32x32_bf16") {
      const long cb = (p.shape[1] + 31) / 32;
      for (long i = 0; i < n; ++i)  // v's values are spent: it takes the bf16 values
        v[i] = e4m3_decode(t.payload[i]) * sc[(i / p.shape[1] / 32) * cb + (i % p.shape[1]) / 32];
      out.tensor = HostTensor::from_bf16_values(p.shape, v);
      return out;
    }
    t.format = WeightFormat::kFp8Block32;
    t.scales = sc;
    out.tensor = std::move(t);
    out.scales = std::move(sc);
  } else if (p.storage == "e2m1_pow2_block32") {  // SCHEMA §10.2: an fp4 expert weight
    HostTensor t;
    t.shape = p.logical_shape;
    t.format = WeightFormat::kFp4Block32;
    filler::quantize_e2m1_block32(v, p.logical_shape[0], p.logical_shape[1], t.payload, out.scales);
    t.scales = out.scales;
    out.tensor = std::move(t);
  } else {
    fail("golden ", g.path, ": parameter '", p.name, "' has unknown storage \"", p.storage, "\"");
  }
  return out;
}

/// The "derived" parameter `p` (a `<prefix>.scale`) as the tensor of the scales its source made.
inline HostTensor derived_param(const Golden& g, const ParamRule& p, std::vector<float> scales) {
  long n = 1;
  for (long d : p.shape) n *= d;
  DS41_CHECK(static_cast<long>(scales.size()) == n, "golden ", g.path, ": derived parameter '", p.name,
             "' has shape ", shape_str({p.shape.begin(), p.shape.end()}), " but its source yields ", scales.size(),
             " scales");
  return HostTensor::from_f32(p.shape, scales);
}

/// Regenerate every parameter from its rule (SCHEMA §1.3-1.4). Engram tables come back as float32
/// e4m3 code values with their "derived" `.scale` tensors.
inline WeightSet regenerate_weights(const Golden& g) {
  WeightSet ws;
  std::map<std::string, std::vector<float>> derived_scales;
  std::vector<float> v;
  for (const ParamRule& p : g.params) {
    if (p.storage == "derived") continue;  // filled from its source parameter below
    RegeneratedParam r = regenerate_param(g, p, v);
    if (storage_has_scales(p.storage)) derived_scales[derived_scale_name(p.name)] = std::move(r.scales);
    ws.put(p.name, std::move(r.tensor));
  }
  for (const ParamRule& p : g.params) {
    if (p.storage != "derived") continue;
    auto it = derived_scales.find(p.name);
    DS41_CHECK(it != derived_scales.end(), "golden ", g.path, ": derived parameter '", p.name,
               "' has no quantised source parameter");
    ws.put(p.name, derived_param(g, p, std::move(it->second)));
  }
  return ws;
}

/// The parameters regenerate_weights makes, each made when a model asks for it and handed over
/// (a WeightSet's load copies a tensor it keeps). A model built from it holds the only copy of its
/// weights: at the released per-layer shapes (ds41_mid) the set and the model's packed copy were
/// 7.9 GB at once, and clearing those pages took half the golden's time. The same bits as
/// regenerate_weights (the same regenerate_param). Keeps a reference to `g`, which must outlive it.
/// Every rule's storage and every derived parameter's source are checked when it is made, as
/// regenerate_weights checks them. A derived scale asked for before its source is made by
/// regenerating the source (the engram tables and fp8/fp4 weights; a Model asks for the source first).
/// While it lives it keeps one scratch row, the f32 values of the largest parameter made so far
/// (regenerate_param reuses it: a vector a parameter cost its page faults again each time), so
/// build a model from a temporary one, as ds41-golden and Python's Model.from_golden do.
class RegeneratedWeights : public WeightSource {
 public:
  explicit RegeneratedWeights(const Golden& g) : g_(g) {
    for (size_t i = 0; i < g.params.size(); ++i) index_[g.params[i].name] = i;
    for (const ParamRule& p : g.params) {
      DS41_CHECK(storage_known(p.storage), "golden ", g.path, ": parameter '", p.name, "' has unknown storage \"",
                 p.storage, "\"");
      if (storage_has_scales(p.storage)) source_of_[derived_scale_name(p.name)] = index_.at(p.name);
    }
    for (const ParamRule& p : g.params)
      DS41_CHECK(p.storage != "derived" || source_of_.count(p.name), "golden ", g.path, ": derived parameter '",
                 p.name, "' has no quantised source parameter");
  }
  bool has(const std::string& name) const override { return index_.count(name) != 0; }
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    auto it = index_.find(name);
    DS41_CHECK(it != index_.end(), "weights: missing tensor '", name, "' (expected shape ",
               shape_str({shape.begin(), shape.end()}), ")");
    const ParamRule& p = g_.params[it->second];
    std::lock_guard<std::mutex> lock(mutex_);
    HostTensor t;
    if (p.storage == "derived") {
      auto kept = scales_.find(name);
      if (kept == scales_.end()) {
        scales_[name] = regenerate_param(g_, g_.params[source_of_.at(name)], scratch_).scales;
        kept = scales_.find(name);
      }
      t = derived_param(g_, p, std::move(kept->second));
      scales_.erase(kept);
    } else {
      RegeneratedParam r = regenerate_param(g_, p, scratch_);
      const std::string scale_name = derived_scale_name(name);
      if (storage_has_scales(p.storage) && index_.count(scale_name)) scales_[scale_name] = std::move(r.scales);
      t = std::move(r.tensor);
    }
    check_shape(name, t.shape, shape);
    return t;
  }

 private:
  const Golden& g_;
  std::map<std::string, size_t> index_;      // parameter name -> g_.params
  std::map<std::string, size_t> source_of_;  // derived scale name -> its quantised source parameter
  // the scales of sources already made, until their derived parameter is asked for; and the
  // regeneration's scratch row (regenerate_param). load() is const and may be called from threads.
  mutable std::map<std::string, std::vector<float>> scales_;
  mutable std::vector<float> scratch_;
  mutable std::mutex mutex_;
};

}  // namespace ds41::golden
#include "../core/fp_exact_end.hpp"
