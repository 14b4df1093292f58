// tests/device_topk_rule.hpp — CudaBackend::topk_rows's rule, on the host: each row ordered by
// descending topk_order_key (CUB's radix sort), the first k; with `redo`, a row where equal scores
// straddle the k-th place (topk_boundary_tied) taken from torch_topk_row instead, as the device
// does. Without `redo` it is also the fast policy's one-block sort (cuda/block_topk.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>
#include "ds41/core/topk.hpp"

namespace ds41::testing {

inline void device_topk_row(const float* v, int n, int k, bool redo, int32_t* idx) {
  std::vector<std::pair<unsigned long long, int>> sorted(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) sorted[i] = {topk_order_key(v[i], i), i};
  std::sort(sorted.begin(), sorted.end(), std::greater<>());  // the keys are distinct (the column is in them)
  for (int j = 0; j < k; ++j) idx[j] = sorted[j].second;
  std::vector<unsigned long long> keys(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) keys[i] = sorted[i].first;
  if (redo && topk_boundary_tied(keys.data(), n, k)) {
    std::vector<TopkEntry> scratch(static_cast<size_t>(n));
    torch_topk_row(v, n, k, false, reinterpret_cast<int*>(idx), nullptr, scratch.data());
  }
}

}  // namespace ds41::testing
