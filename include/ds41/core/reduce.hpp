// ds41/core/reduce.hpp — float32 sums in the order the reference's runtime adds them.
//
// torch (1.13, CPU, AVX2) sums a contiguous row of at least 8 as 8-lane vectors: the vectors are dealt round
// robin to 4 accumulators (with a 4-level cascade once a row exceeds 16·4 vectors), the
// accumulators are added 0+1+2+3, the scalar tail goes first into the final sum and the 8 lanes
// are then added in lane order. Reproducing this order (instead of a plain left-to-right sum) is
// what makes the RMS statistics — and through them every bf16 rounding downstream — agree bit for
// bit with the reference.
#pragma once
#include "macros.hpp"

#include "fp_exact_begin.hpp"
namespace ds41 {

constexpr int kSumLanes = 8;
constexpr int kSumIlp = 4;
constexpr int kSumLevels = 4;

/// Σ f(i) for i < n in the order torch's sum over a contiguous last dimension takes: its
/// vectorised inner sum, or, for a row shorter than one vector, its scalar row sum (4 partial sums
/// over i mod 4, the tail into the first, then 0+1+2+3: x0..x5 adds as ((x0+x4)+x5)+x1+x2+x3).
/// `f` yields float32 terms.
template <class F>
DS41_HD float torch_order_sum(long n, F f) {
  if (n < kSumLanes) {
    float part[kSumIlp] = {0.0f, 0.0f, 0.0f, 0.0f};
    long i = 0;
    for (; i + kSumIlp <= n; i += kSumIlp)
      for (int k = 0; k < kSumIlp; ++k) part[k] += f(i + k);
    for (; i < n; ++i) part[0] += f(i);
    for (int k = 1; k < kSumIlp; ++k) part[0] += part[k];
    return part[0];
  }
  const long vec_size = n / kSumLanes;
  const long size_ilp = vec_size / kSumIlp;
  int ceil_log2 = 0;
  while ((1L << ceil_log2) < size_ilp) ++ceil_log2;
  const long level_power = ceil_log2 / kSumLevels > 4 ? ceil_log2 / kSumLevels : 4;
  const long level_step = 1L << level_power, level_mask = level_step - 1;
  float acc[kSumLevels][kSumIlp][kSumLanes];
  for (int a = 0; a < kSumLevels; ++a)
    for (int k = 0; k < kSumIlp; ++k)
      for (int l = 0; l < kSumLanes; ++l) acc[a][k][l] = 0.0f;
  auto add_row = [&](long i) {
    for (int k = 0; k < kSumIlp; ++k)
      for (int l = 0; l < kSumLanes; ++l) acc[0][k][l] += f((i * kSumIlp + k) * kSumLanes + l);
  };
  long i = 0;
  while (i + level_step <= size_ilp) {
    for (long j = 0; j < level_step; ++j, ++i) add_row(i);
    for (int j = 1; j < kSumLevels; ++j) {
      for (int k = 0; k < kSumIlp; ++k)
        for (int l = 0; l < kSumLanes; ++l) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0.0f;
        }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < size_ilp; ++i) add_row(i);
  for (int j = 1; j < kSumLevels; ++j)
    for (int k = 0; k < kSumIlp; ++k)
      for (int l = 0; l < kSumLanes; ++l) acc[0][k][l] += acc[j][k][l];
  for (long v = size_ilp * kSumIlp; v < vec_size; ++v)
    for (int l = 0; l < kSumLanes; ++l) acc[0][0][l] += f(v * kSumLanes + l);
  for (int k = 1; k < kSumIlp; ++k)
    for (int l = 0; l < kSumLanes; ++l) acc[0][0][l] += acc[0][k][l];
  float total = 0.0f;
  for (long t = vec_size * kSumLanes; t < n; ++t) total += f(t);
  for (int l = 0; l < kSumLanes; ++l) total += acc[0][0][l];
  return total;
}

/// vec::reduce_all(+) of torch's CPU kernels (used by softmax over the last dim): 8-lane vectors
/// added lane-wise (a short tail only into its own lanes), then the 8 lanes folded as a tree; a row
/// shorter than one vector takes reduce_all's slow path instead, x0 + x1 + ... left to right
/// (a softmax router over 7 experts).
DS41_HD float torch_reduce_all_sum(const float* x, int n) {
  if (n < kSumLanes) {
    float s = n > 0 ? x[0] : 0.0f;
    for (int i = 1; i < n; ++i) s += x[i];
    return s;
  }
  float acc[kSumLanes];
  const int first = n < kSumLanes ? n : kSumLanes;
  for (int l = 0; l < kSumLanes; ++l) acc[l] = l < first ? x[l] : 0.0f;
  int d = kSumLanes;
  for (; d + kSumLanes <= n; d += kSumLanes)
    for (int l = 0; l < kSumLanes; ++l) acc[l] += x[d + l];
  for (int l = 0; d + l < n; ++l) acc[l] += x[d + l];
  // AVX2's vec_reduce_all for float folds the 8 lanes as a tree: halves, then pairs, then neighbours
  float h[4], q[2];
  for (int l = 0; l < 4; ++l) h[l] = acc[l] + acc[l + 4];
  for (int l = 0; l < 2; ++l) q[l] = h[l] + h[l + 2];
  return q[0] + q[1];
}

}  // namespace ds41
#include "fp_exact_end.hpp"
