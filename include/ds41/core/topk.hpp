// ds41/core/topk.hpp — top-k of one row, written once for host and device.
//
// Order: larger value first; equal finite values keep the lower index first. Among -inf entries
// (masked positions) the HIGHER index wins: the reference's fills (SCHEMA §5.1) must land on
// unreachable positions, which are the highest ones, before any reachable masked position.
#pragma once
#include "numeric.hpp"

namespace ds41 {

DS41_HD bool topk_before(float va, int ia, float vb, int ib) {
  if (va != vb) return va > vb;
  if (va == -INFINITY) return ia > ib;
  return ia < ib;
}

/// Writes the k best of v[0..n) to idx[0..k) (and their values to val when non-null), best first.
/// Requires k <= n. NaN never occurs in the reference's selections and is treated as -inf.
DS41_HD void topk_row(const float* v, int n, int k, int* idx, float* val) {
  int have = 0;
  for (int i = 0; i < n; ++i) {
    float x = is_nan(v[i]) ? -INFINITY : v[i];
    if (have == k && !topk_before(x, i, v[idx[k - 1]], idx[k - 1])) continue;
    int pos = have < k ? have++ : k - 1;
    while (pos > 0 && topk_before(x, i, v[idx[pos - 1]], idx[pos - 1])) {
      idx[pos] = idx[pos - 1];
      --pos;
    }
    idx[pos] = i;
  }
  if (val)
    for (int j = 0; j < k; ++j) val[j] = v[idx[j]];
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
