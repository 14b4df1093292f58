// ds41/core/topk.hpp — top-k of one row.
//
// Two orders live here:
//  * torch's (torch_topk_row, reference_topk_row; host and device alike): what DeepSeek's
//    reference gets from torch.topk on the CPU of torch 1.13 (aten/src/ATen/native/TopKImpl.h,
//    topk_impl_loop): the row's (value, index) pairs filled in index order, then std::partial_sort
//    of the first k when k * 64 <= n, else std::nth_element at k-1 followed, when sorted, by
//    std::sort of the first k-1, all with the comparator "NaN first, then greater value", which
//    never looks at the index. Among equal values the outcome is therefore whatever those
//    algorithms leave, as libstdc++ defines them (the goldens' torch is Debian bookworm's, built
//    with GCC 12): core/stdlib_select.hpp performs the same steps, so that the device and any
//    standard library give torch's answer; tests/test_topk.cpp checks them against vectors torch
//    itself made and against libstdc++ on many tie-heavy rows.
//  * lower index first (topk_before / topk_order_key): the order of the device's radix sort
//    (CudaBackend::topk_rows sorts by it, then redoes a row with torch_topk_row only where equal
//    scores straddle the k-th place: topk_boundary_tied) and of the fast policy's block sort, which
//    may keep other members of a tie (docs/NUMERICS.md). Among -inf entries the HIGHER index wins.
//    topk_row is that rule by insertion, kept for the tests that measure it against torch.
#pragma once
#include <vector>
#include "numeric.hpp"
#include "stdlib_select.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

DS41_HD bool topk_before(float va, int ia, float vb, int ib) {
  if (va != vb) return va > vb;
  if (va == -INFINITY) return ia > ib;
  return ia < ib;
}

/// A 64-bit key of (value, index) for the device's sorts (CudaBackend::topk_rows, the fast policy's
/// block sort), best first when sorted descending: the value's order in the upper half (NaN above
/// every number, as torch's comparator puts it first; -0 and +0 one value), then the index (lower
/// first, higher first among -inf), so that among numbers the order is topk_before's.
DS41_HD unsigned long long topk_order_key(float x, int col) {
  if (x == 0.0f) x = 0.0f;  // -0 -> +0
  const uint32_t b = f32_bits(x);
  const uint32_t ord = is_nan(x) ? 0xffffffffu : (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // monotone in x
  const uint32_t tie = (x == -INFINITY) ? static_cast<uint32_t>(col) : ~static_cast<uint32_t>(col);
  return (static_cast<unsigned long long>(ord) << 32) | tie;
}

/// Writes the k best of v[0..n) to idx[0..k) (and their values to val when non-null), best first
/// in topk_before's order, NaN taken as -inf. Requires k <= n. The lowest-index rule ds41 used
/// before issue 42: no model path calls it any more; tests measure it against torch's choice.
DS41_HD void topk_row(const float* v, int n, int k, int* idx, float* val) {
  if (k <= 0) return;
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

/// A score and its column: the pair torch's topk_impl_loop sorts (it holds (float, int64); the
/// element type only moves, the outcome depends on the comparisons alone).
struct TopkEntry {
  float value;
  int index;
};

/// torch.topk's comparator (largest=True): NaN before any number, then the greater value; equal
/// values (and -0 with +0, NaN with NaN) are equivalent, whatever their indices.
DS41_HD bool torch_topk_before(const TopkEntry& a, const TopkEntry& b) {
  return (is_nan(a.value) && !is_nan(b.value)) || a.value > b.value;
}

/// torch.topk(k, dim=-1, largest=True, sorted) of one row as torch 1.13's CPU kernel computes it,
/// ties included: idx[0..k) (and val[0..k) when non-null) in torch's order. sorted=false is
/// torch's unsorted order (its nth_element's), not an arbitrary one. Writes min(k, n) entries
/// (torch refuses k > n; the model's callers check it); `scratch` holds n entries.
DS41_HD void torch_topk_row(const float* v, int n, int k, bool sorted, int* idx, float* val, TopkEntry* scratch) {
  k = k < n ? k : n;
  if (k <= 0) return;
  for (int i = 0; i < n; ++i) scratch[i] = {v[i], i};
  const auto before = [](const TopkEntry& a, const TopkEntry& b) { return torch_topk_before(a, b); };
  // torch: use_partial_sort = k * 64 <= dim_size (int64 arithmetic)
  if (static_cast<long long>(k) * 64 <= n) {
    stdlib_select::partial_sort(scratch, k, n, before);
  } else {
    stdlib_select::nth_element(scratch, k - 1, n, before);
    // the first k-1 only, as torch 1.13 does: the k-th stays where nth_element put it
    if (sorted) stdlib_select::sort(scratch, k - 1, before);
  }
  for (int j = 0; j < k; ++j) idx[j] = scratch[j].index;
  if (val)
    for (int j = 0; j < k; ++j) val[j] = scratch[j].value;
}

/// Whether a row sorted best first by topk_order_key (`keys`, n of them) has equal scores at the
/// k-th and (k+1)-th places, the one case where the set of the k best is not decided by the
/// values alone (then torch_topk_row decides). The upper half of a key is the value's order
/// (NaN and -0 folded as topk_order_key folds them).
DS41_HD bool topk_boundary_tied(const unsigned long long* keys, int n, int k) {
  return k > 0 && k < n && (keys[k - 1] >> 32) == (keys[k] >> 32);
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

/// The calling thread's scratch for reference_topk_row on the host (grown, never shrunk).
inline TopkEntry* topk_thread_scratch(int n) {
  thread_local std::vector<TopkEntry> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

/// The reference's top-k for per-row code written once for host and device (the router, the
/// candidate blocks): torch_topk_row with `scratch` (n entries; the device must pass it, the host
/// may pass null for a buffer of the calling thread).
DS41_HD void reference_topk_row(const float* v, int n, int k, bool sorted, int* idx, TopkEntry* scratch) {
#if !DS41_DEVICE_CODE
  if (!scratch) scratch = topk_thread_scratch(n);
#endif
  torch_topk_row(v, n, k, sorted, idx, nullptr, scratch);
}

}  // namespace ds41
#include "fp_exact_end.hpp"
