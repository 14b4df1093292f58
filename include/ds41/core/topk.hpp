// ds41/core/topk.hpp — top-k of one row.
//
// Two orders live here:
//  * torch's (torch_topk_row, reference_topk_row on the host): what DeepSeek's reference gets from
//    torch.topk on the CPU of torch 1.13 (aten/src/ATen/native/TopKImpl.h, topk_impl_loop): the row's
//    (value, index) pairs filled in index order, then std::partial_sort of the first k when
//    k * 64 <= n, else std::nth_element at k-1 followed, when sorted, by std::sort of the first k-1,
//    all with the comparator "NaN first, then greater value", which never looks at the index. Among
//    equal values the outcome is therefore whatever those standard-library algorithms leave: this
//    file calls the same algorithms on the same pairs with the same comparator, so the standard
//    library must be the reference's, libstdc++ (GCC and Clang on Linux both use it; the goldens'
//    torch is Debian bookworm's, built with GCC 12). Calling libstdc++ rather than re-writing its
//    introselect/introsort/heap code keeps ds41 from carrying a second copy that could drift from it;
//    tests/test_topk.cpp checks every (index, order) against vectors torch itself made.
//  * lower index first (topk_before / topk_order_key / topk_row): the device's order (CUB's radix
//    sort of 64-bit keys and the per-row loops run on the GPU). It matches torch's wherever no two
//    competing scores tie; among ties the device may keep other members (docs/NUMERICS.md).
//    Among -inf entries (masked positions) the HIGHER index wins there: the reference's fills
//    (SCHEMA §5.1) land on unreachable positions, which are the highest ones, in the tie-free goldens.
#pragma once
#include <algorithm>
#include <vector>
#include "numeric.hpp"

#include "fp_exact_begin.hpp"
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

/// A score and its column: the pair torch's topk_impl_loop sorts (it holds (float, int64); the
/// element type only moves, the outcome depends on the comparisons alone).
struct TopkEntry {
  float value;
  int index;
};

#if !DS41_DEVICE_CODE && !defined(__GLIBCXX__)
#error "ds41: core/topk.hpp reproduces torch.topk's choice among tied scores, which is what libstdc++'s std::partial_sort / std::nth_element / std::sort leave (the reference's torch is built with GCC's libstdc++); this standard library is not libstdc++, so ties would be broken differently. Build with libstdc++ (e.g. without -stdlib=libc++)."
#endif

// The host functions below are declared in nvcc's device pass too (host code calls them), where
// only reference_topk_row's device branch is compiled.

/// torch.topk's comparator (largest=True): NaN before any number, then the greater value; equal
/// values (and -0 with +0, NaN with NaN) are equivalent, whatever their indices.
inline bool torch_topk_before(const TopkEntry& a, const TopkEntry& b) {
  return (is_nan(a.value) && !is_nan(b.value)) || a.value > b.value;
}

/// torch.topk(k, dim=-1, largest=True, sorted) of one row as torch 1.13's CPU kernel computes it,
/// ties included: idx[0..k) (and val[0..k) when non-null) in torch's order. sorted=false is
/// torch's unsorted order (its nth_element's), not an arbitrary one. Writes min(k, n) entries
/// (torch refuses k > n; the model's callers check it); `scratch` holds n entries. A host
/// function (libstdc++'s algorithms; see the top of the file).
inline void torch_topk_row(const float* v, int n, int k, bool sorted, int* idx, float* val, TopkEntry* scratch) {
  k = std::min(k, n);
  if (k <= 0) return;
  for (int i = 0; i < n; ++i) scratch[i] = {v[i], i};
  // torch: use_partial_sort = k * 64 <= dim_size (int64 arithmetic)
  if (static_cast<long long>(k) * 64 <= n) {
    std::partial_sort(scratch, scratch + k, scratch + n, torch_topk_before);
  } else {
    std::nth_element(scratch, scratch + k - 1, scratch + n, torch_topk_before);
    // the first k-1 only, as torch 1.13 does: the k-th stays where nth_element put it
    if (sorted) std::sort(scratch, scratch + k - 1, torch_topk_before);
  }
  for (int j = 0; j < k; ++j) idx[j] = scratch[j].index;
  if (val)
    for (int j = 0; j < k; ++j) val[j] = scratch[j].value;
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

/// The calling thread's scratch for reference_topk_row (grown, never shrunk): a host function.
inline TopkEntry* topk_thread_scratch(int n) {
  thread_local std::vector<TopkEntry> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

/// The reference's top-k for per-row code written once for host and device (the router, the
/// candidate blocks): torch_topk_row on the host, with `scratch` (n entries) or, when null, a
/// buffer of the calling thread; on the device topk_row (lower index first among ties: the device
/// does not yet reproduce torch's tie outcome, docs/NUMERICS.md; `scratch` is unused there).
DS41_HD void reference_topk_row(const float* v, int n, int k, bool sorted, int* idx, TopkEntry* scratch) {
#if DS41_DEVICE_CODE
  (void)sorted;
  (void)scratch;
  topk_row(v, n, k, idx, nullptr);
#else
  torch_topk_row(v, n, k, sorted, idx, nullptr, scratch ? scratch : topk_thread_scratch(n));
#endif
}

}  // namespace ds41
#include "fp_exact_end.hpp"
