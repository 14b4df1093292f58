// ds41/backend/cuda/block_topk.hpp — top-k of rows of up to 4096 scores, one thread block a row
// sorting the row's orderable keys with cub::BlockRadixSort: cuda_detail::block_topk_rows, with
// CudaBackend::topk_rows' parameters. Include where cuda.hpp's contents are (as fast_attention.hpp).
//
// Why: topk_rows sorts with cub::DeviceSegmentedRadixSort, which needs five temporary device
// buffers, a temporary-storage query and a host synchronisation per call (a decode step's indexer
// pays them every layer, and the synchronisation ends a graph segment). A row the indexer scores at
// decode (nk = context / 4 keys) fits one block: one launch, no allocation, no synchronisation.
//
// The same result as topk_rows, not just the same set: both sort the same 64-bit keys
// (core/topk.hpp's topk_order_key: the value's order bits over the column's tie bits), which are
// distinct within a row, so any correct descending sort puts them in one order. (This CCCL, 13.0,
// has no block-level top-k; a full block sort of a row is the simple exact one.)
#pragma once
#if !defined(__CUDACC__)
#error "ds41/backend/cuda/block_topk.hpp must be compiled by nvcc (a .cu translation unit)"
#endif
#include <cuda_runtime.h>
#include <cub/block/block_radix_sort.cuh>
#include <cstdint>
#include "../../core/topk.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::cuda_detail {

constexpr int kBlockTopkThreads = 256;
constexpr int kBlockTopkMaxCols = kBlockTopkThreads * 16;  // 4096 scores a row

/// Row blockIdx.x: its n keys (striped loads: coalesced), padded with key 0, which no score's key
/// equals (the smallest order bits a score gets are -inf's, 0x007fffff) and which sorts last; the
/// sort leaves rank i·threads + thread in a thread's item i (striped), and ranks below k are written.
/// kItems keys a thread: 4 for rows up to 1024 scores (a 4k context's index keys), else 16 (the
/// sort's passes run over every slot, padding included).
template <int kItems>
__global__ void __launch_bounds__(kBlockTopkThreads) block_topk_kernel(const float* v, int n, int k, int32_t* idx) {
  using Sort = cub::BlockRadixSort<unsigned long long, kBlockTopkThreads, kItems, int>;
  __shared__ typename Sort::TempStorage temp;
  const long r = blockIdx.x;
  unsigned long long keys[kItems];
  int cols[kItems];
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int col = i * kBlockTopkThreads + threadIdx.x;
    keys[i] = col < n ? topk_order_key(v[r * n + col], col) : 0ull;
    cols[i] = col;
  }
  Sort(temp).SortDescendingBlockedToStriped(keys, cols);
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int rank = i * kBlockTopkThreads + threadIdx.x;
    if (rank < k) idx[r * k + rank] = cols[i];
  }
}

/// idx[r, 0..k) = the k best columns of v[r, 0..n) in topk_before order, topk_rows' result.
/// Returns false, launching nothing, when a row has more than kBlockTopkMaxCols scores (the caller
/// keeps topk_rows' segmented sort) or rows exceed one grid dimension.
inline bool block_topk_rows(const float* v, long rows, int n, int k, int32_t* idx) {
  if (rows <= 0 || k <= 0) return true;
  if (n > kBlockTopkMaxCols || k > n || rows > 0x7fffffffL) return false;
  if (n <= kBlockTopkThreads * 4)
    block_topk_kernel<4><<<static_cast<unsigned>(rows), kBlockTopkThreads, 0, backend_stream()>>>(v, n, k, idx);
  else
    block_topk_kernel<16><<<static_cast<unsigned>(rows), kBlockTopkThreads, 0, backend_stream()>>>(v, n, k, idx);
  DS41_CUDA_CHECK(cudaGetLastError());
  return true;
}

}  // namespace ds41::cuda_detail
#include "../../core/fp_exact_end.hpp"
