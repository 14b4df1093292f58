// ds41/model/streamed_experts.hpp — the StreamedExperts ExpertStore policy: one layer's view of
// a model-wide ExpertCache (expert_cache.hpp), which reads routed experts on demand from the
// weights' files (their ExpertSource, expert_source.hpp: GGUF shards or a safetensors checkpoint,
// io/) into a bounded arena (expert_arena.hpp).
#pragma once
#include <string>
#include <vector>
#include "expert_cache.hpp"
#include "moe.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// ExpertStore policy: one layer's view of a model-wide ExpertCache.
template <class B>
class StreamedExperts {
 public:
  using Cache = ExpertCache<B>;
  static constexpr bool kPrefetches = true;
  /// get() may evict an expert fetched earlier in the step (a cache smaller than the step): the
  /// step uses each expert before fetching the next.
  static constexpr bool kStableRefs = false;

  StreamedExperts() = default;
  /// `layer`: a backbone layer, or DSpark's stage s as layer n_layers + s (`c` then the stage's
  /// configuration: the draft's expert count, DSparkHead::stage_config), which the cache's file
  /// maps after the backbone's (ExpertSliceMap) when the weights carry the draft head.
  StreamedExperts(const ModelConfig& c, const WeightSource&, int layer, Cache& cache) : cache_(&cache), layer_(layer) {
    const ExpertSliceMap& m = cache.slices();
    const std::string what = layer < c.n_layers ? "layer " + std::to_string(layer)
                                                : "DSpark stage " + std::to_string(layer - c.n_layers) + " (layer " +
                                                      std::to_string(layer) + ")";
    DS41_CHECK(m.layers() == c.n_layers || m.layers() == c.n_layers + c.n_mtp_layers, "streamed experts: the cache's file has ",
               m.layers(), " layers of experts, the config ", c.n_layers,
               c.n_mtp_layers ? " (or " + std::to_string(c.n_layers + c.n_mtp_layers) + " with its DSpark stages)" : "");
    DS41_CHECK(layer >= 0 && layer < m.layers(), "streamed experts: ", what, " has no experts in the cache's file (",
               m.layers(), " layers: the cache was made from weights without the draft head?)");
    DS41_CHECK(m.experts(layer) == c.n_routed_experts, "streamed experts: ", what, " of the cache's file has ",
               m.experts(layer), " experts, the config ", c.n_routed_experts);
    if (cache.budget_in_bytes()) check_budget(cache, c.n_activated_experts);
  }
  /// One layer's step routes to `active` experts: a cache that cannot hold them is an error.
  /// Applied to byte budgets (StreamOptions::capacity_bytes) when a layer is built; an explicit
  /// capacity_experts below a step is allowed (it thrashes within the layer, and the golden tests
  /// use one to exercise eviction); callers that want the check for it too call this.
  static void check_budget(const Cache& cache, int active) {
    const uint64_t per = cache.slices().max_expert_bytes();
    DS41_CHECK(cache.capacity() >= active, "streamed experts: the expert cache holds ", cache.capacity(),
               " experts (", cache.capacity() * per, " bytes at ", per, " bytes per expert), but one layer's step needs ",
               active, " (n_activated_experts: ", static_cast<uint64_t>(active) * per, " bytes)");
  }
  void prefetch(const std::vector<int>& experts) { cache_->prefetch(layer_, experts); }
  const ExpertWeights<B>& get(int e) { return cache_->get(layer_, e); }

 private:
  Cache* cache_ = nullptr;
  int layer_ = 0;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
