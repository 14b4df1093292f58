// ds41/core/topk.hpp — top-k of one row, written once for host and device.
//
// Order: larger value first; equal finite values keep the lower index first. Among -inf entries
// (masked positions) the HIGHER index wins: the reference's fills (SCHEMA §5.1) must land on
// unreachable positions, which are the highest ones, before any reachable masked position.
#pragma once
#include <algorithm>
#include "numeric.hpp"

namespace ds41 {

DS41_HD bool topk_before(float va, int ia, float vb, int ib) {
  if (va != vb) return va > vb;
  if (va == -INFINITY) return ia > ib;
  return ia < ib;
}

/// A 64-bit key of (value, index) whose descending order is topk_before's (NaN taken as -inf, as
/// topk_row does), for the device's sorts (CudaBackend::topk_rows, the fast policy's block sort):
/// the value's bits made monotone, then the index (lower first, higher first among -inf). -0 and
/// +0 compare equal in topk_before, so they get one key: their order is by index.
DS41_HD unsigned long long topk_order_key(float x, int col) {
  if (is_nan(x)) x = -INFINITY;
  if (x == 0.0f) x = 0.0f;  // -0 -> +0
  const uint32_t b = f32_bits(x);
  const uint32_t ord = (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // monotone in x
  const uint32_t tie = (x == -INFINITY) ? static_cast<uint32_t>(col) : ~static_cast<uint32_t>(col);
  return (static_cast<unsigned long long>(ord) << 32) | tie;
}

/// Writes the k best of v[0..n) to idx[0..k) (and their values to val when non-null), best first.
/// Requires k <= n. NaN never occurs in the reference's selections and is treated as -inf.
DS41_HD void topk_row(const float* v, int n, int k, int* idx, float* val) {
  if (k <= 0) return;
  // the entries already kept compare as -inf too (CudaBackend::topk_rows's keys do the same)
  const auto key = [v](int i) { return is_nan(v[i]) ? -INFINITY : v[i]; };
  int have = 0;
  for (int i = 0; i < n; ++i) {
    const float x = key(i);
    if (have == k && !topk_before(x, i, key(idx[k - 1]), idx[k - 1])) continue;
    int pos = have < k ? have++ : k - 1;
    while (pos > 0 && topk_before(x, i, key(idx[pos - 1]), idx[pos - 1])) {
      idx[pos] = idx[pos - 1];
      --pos;
    }
    idx[pos] = i;
  }
  if (val)
    for (int j = 0; j < k; ++j) val[j] = v[idx[j]];
}

/// A value (NaN taken as -inf) and its index: topk_row_select's scratch entry.
struct TopkEntry {
  float value;
  int index;
};

/// topk_row's result (the same k indices in the same order: topk_before is a total order on
/// (value, index)), by selection then a sort of the k: O(n + k log k) instead of topk_row's
/// insertion into a sorted list, which moves ~k/2 entries per insertion. One core: 16384 scores,
/// k = 512: 128 us against 554 us; 640 / 512: 9.5 against 99 us; but 384 / 6: 1.3 against
/// 0.9 us, so k <= 8 keeps the insertion. A host function; `scratch` holds n entries. Like
/// topk_row, writes min(k, n) indices.
inline void topk_row_select(const float* v, int n, int k, int* idx, TopkEntry* scratch) {
  k = std::min(k, n);
  if (k <= 8) return topk_row(v, n, k, idx, nullptr);
  for (int i = 0; i < n; ++i) scratch[i] = {is_nan(v[i]) ? -INFINITY : v[i], i};
  const auto before = [](const TopkEntry& a, const TopkEntry& b) { return topk_before(a.value, a.index, b.value, b.index); };
  if (k < n) std::nth_element(scratch, scratch + k - 1, scratch + n, before);
  std::sort(scratch, scratch + k, before);
  for (int j = 0; j < k; ++j) idx[j] = scratch[j].index;
}

/// Sort a small int array ascending (insertion sort; k is small).
DS41_HD void sort_ascending(int* a, int n) {
  for (int i = 1; i < n; ++i) {
    int x = a[i], j = i;
    while (j > 0 && a[j - 1] > x) {
      a[j] = a[j - 1];
      --j;
    }
    a[j] = x;
  }
}

}  // namespace ds41
