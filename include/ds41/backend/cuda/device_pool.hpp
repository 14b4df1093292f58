// ds41/backend/cuda/device_pool.hpp — device memory kept for reuse, so a step does not cudaMalloc.
//
// The components allocate their temporaries per call (B::alloc, ~80 a layer a step). cudaMalloc
// costs microseconds and cudaFree waits for the whole device, so on the device those calls, not
// the kernels, set the pace of a small step (the tiny model's decode step took 6.9 ms on the H200,
// 2026-12-04, for ~1 GFLOP). DeviceBuffer takes its memory from this pool instead: blocks kept by
// size class, handed out again in the order of the backend's one stream (a block freed by one
// operation and taken by the next is ordered after the first's kernels, as PyTorch's caching
// allocator relies on; while a graph segment is captured, both uses are nodes of that segment in
// stream order). cudaMalloc happens only when no kept block of the class is free; once every shape
// a model steps through has run, a step allocates nothing. trim() gives kept blocks back to the
// driver (Model's destructor, and before reporting an out-of-memory error).
//
// Size classes: multiples of 512 bytes below 1 MiB, of 2 MiB from there (the driver's page), so
// that a step's slightly varying sizes (a context one longer) find the same blocks.
#pragma once
#include <cuda_runtime.h>
#include <cstddef>
#include <map>
#include <mutex>
#include "../../core/error.hpp"

#include "../../core/fp_exact_begin.hpp"
namespace ds41::cuda_detail {

class DevicePool {
 public:
  static size_t size_class(size_t bytes) {
    constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
    return bytes < (size_t{1} << 20) ? (bytes + kSmall - 1) / kSmall * kSmall : (bytes + kLarge - 1) / kLarge * kLarge;
  }

  /// A block of at least `bytes` (bytes > 0): a kept one of its class, else a new one.
  void* get(size_t bytes) {
    const size_t cls = size_class(bytes);
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = free_.find(cls);
      if (it != free_.end()) {
        void* p = it->second;
        free_.erase(it);
        kept_bytes_ -= cls;
        ++reused_;
        return p;
      }
    }
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, cls);
    if (e == cudaErrorMemoryAllocation) {  // the kept blocks may be what is missing
      (void)cudaGetLastError();
      trim();
      e = cudaMalloc(&p, cls);
    }
    if (e != cudaSuccess)
      fail("cudaMalloc of ", cls, " bytes failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
    std::lock_guard<std::mutex> g(mu_);
    ++mallocs_;
    return p;
  }
  /// Keep `p` (from get(bytes)) for reuse.
  void put(void* p, size_t bytes) {
    if (!p) return;
    const size_t cls = size_class(bytes);
    std::lock_guard<std::mutex> g(mu_);
    free_.emplace(cls, p);
    kept_bytes_ += cls;
  }
  /// Give every kept block back to the driver (after the work queued on the device has run).
  void trim() {
    std::multimap<size_t, void*> blocks;
    {
      std::lock_guard<std::mutex> g(mu_);
      blocks.swap(free_);
      kept_bytes_ = 0;
    }
    for (auto& [cls, p] : blocks) cudaFree(p);  // cudaFree waits for the device
  }
  /// cudaMalloc calls so far (tests: none once a step's shapes have run), blocks reused, bytes kept.
  long mallocs() const {
    std::lock_guard<std::mutex> g(mu_);
    return mallocs_;
  }
  long reused() const {
    std::lock_guard<std::mutex> g(mu_);
    return reused_;
  }
  size_t kept_bytes() const {
    std::lock_guard<std::mutex> g(mu_);
    return kept_bytes_;
  }

 private:
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;
  size_t kept_bytes_ = 0;
  long mallocs_ = 0, reused_ = 0;
};

inline DevicePool& device_pool() {
  static DevicePool* pool = new DevicePool();  // never destroyed: buffers may outlive static destruction
  return *pool;
}

}  // namespace ds41::cuda_detail
#include "../../core/fp_exact_end.hpp"
