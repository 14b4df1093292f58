// ds41/backend/host.hpp — HostBackend: host memory, loops over the shared DS41_HD functions.
//
// The backend vocabulary every component uses (the CUDA backend offers the same names):
//   Buffer<T>, alloc<T>(n), upload/download/copy, for_each(n, f), linear(...), sync().
// Components never touch threads or CUDA directly. Linear runs the vectorised, multi-threaded
// kernels of host_gemv.hpp (bit-identical to MatrixView::dot) on weights Matrix<HostBackend> stored
// as 8-row panels (upload_linear_weights); for_each splits its items over the
// same thread pool (host_threads.hpp) when there are enough of them.
#pragma once
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>
#include "../core/linear_math.hpp"
#include "../core/topk.hpp"
#include "host_buffer.hpp"
#include "host_gemv.hpp"
#include "host_panels.hpp"
#include "host_threads.hpp"

namespace ds41 {

struct HostBackend {
  static constexpr const char* kName = "host";
  static constexpr bool kIsDevice = false;
  template <class T>
  using Buffer = HostBuffer<T>;

  template <class T>
  static Buffer<T> alloc(size_t n) {
    return Buffer<T>(n);
  }
  /// host -> backend memory
  template <class T>
  static void upload(T* dst, const T* src, size_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(T));
  }
  /// backend -> host memory
  template <class T>
  static void download(T* dst, const T* src, size_t n) {
    if (n) std::memcpy(dst, src, n * sizeof(T));
  }
  /// backend -> backend
  template <class T>
  static void copy(T* dst, const T* src, size_t n) {
    if (n) std::memmove(dst, src, n * sizeof(T));
  }
  template <class T>
  static void fill(T* dst, size_t n, T v) {
    std::fill(dst, dst + n, v);
  }
  static void sync() {}
  /// Nothing to release: the host keeps no captured graphs (CudaBackend does).
  static void release_graphs() {}

  /// Below this many items for_each stays on the calling thread (waking the pool costs ~10 us).
  static constexpr long kParallelForEachMinItems = 64;

  /// f(i) for i in [0, n). Work items are independent, so they may run on any thread in any order.
  template <class F>
  static void for_each(long n, F f) {
    HostThreadPool& pool = HostThreadPool::global();
    if (n < kParallelForEachMinItems || pool.threads() == 1) {
      for (long i = 0; i < n; ++i) f(i);
      return;
    }
    pool.run(n, std::max(1L, n / (8L * pool.threads())), [&](long begin, long end) {
      for (long i = begin; i < end; ++i) f(i);
    });
  }

  /// f(i, scratch) for i in [0, n), where scratch is `per_thread` T's that belong to the thread
  /// running item i while the job runs. `heavy` items (tens of microseconds or more each) go one
  /// per chunk, on the pool from two items up; others split as for_each's. The scratch lives in
  /// the calling thread's buffer (one slot per pool thread), grown on first use and kept, as
  /// host_gemv's input buffers are: a sequence allocates nothing here after its first call. The
  /// buffer belongs to the call site (each F is its own instantiation), so an item that calls
  /// for_each_with_scratch with another lambda takes another buffer.
  template <class T, class F>
  static void for_each_with_scratch(long n, size_t per_thread, bool heavy, F f) {
    HostThreadPool& pool = HostThreadPool::global();
    thread_local HostBuffer<T> scratch;
    const size_t slot = (per_thread * sizeof(T) + 63) / 64 * 64 / sizeof(T);  // 64-byte aligned slots
    if (scratch.size() < slot * pool.threads()) scratch = HostBuffer<T>(slot * pool.threads());
    T* base = scratch.data();
    if (n <= 0) return;
    if (pool.threads() == 1 || (!heavy && n < kParallelForEachMinItems)) {
      for (long i = 0; i < n; ++i) f(i, base);
      return;
    }
    pool.run(n, heavy ? 1 : std::max(1L, n / (8L * pool.threads())), [&](long begin, long end) {
      T* mine = base + slot * HostThreadPool::thread_index();
      for (long i = begin; i < end; ++i) f(i, mine);
    });
  }
  /// Threads for_each may use (the calling one included).
  static int threads() { return HostThreadPool::global().threads(); }

  /// idx[r, 0..k) = the k best columns of v[r, 0..n), best first (topk_before's order).
  static void topk_rows(const float* v, long rows, int n, int k, int32_t* idx) {
    for_each_with_scratch<TopkEntry>(rows, static_cast<size_t>(n), false, [=](long r, TopkEntry* scratch) {
      topk_row_select(v + r * n, n, k, reinterpret_cast<int*>(idx + r * k), scratch);
    });
  }

  /// Uploads a Linear's weights in the layout this backend's GEMV streams fastest: 8-row panels
  /// (host_panels.hpp) where the vector kernels are compiled in. Returns false, touching nothing,
  /// when `src` stays row-major (no AVX2, fp8 with NaN codes, fp4 with a scale e8m0 cannot hold);
  /// the caller then uploads it as is.
  /// Buffers of the right size are reused (expert slots).
  static bool upload_linear_weights(const MatrixView& src, Buffer<uint8_t>& payload, Buffer<float>& scales,
                                    MatrixView& out) {
    if (!host_gemv::kVectorised || !host_panels::packable(src)) return false;
    const size_t bytes = host_panels::payload_bytes(src.format, src.rows, src.cols);
    const size_t nscales = host_panels::scale_buffer_count(src.format, src.rows, src.cols);
    if (payload.size() != bytes) payload = Buffer<uint8_t>(bytes);
    if (scales.size() != nscales) scales = Buffer<float>(nscales);
    out = host_panels::pack(src, payload.data(), scales.data());
    return true;
  }

  /// y[r, n] = round(x[r, :] · W[n, :]) for r < rows, n < W.rows.
  static void linear(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                     OutRound round) {
    host_gemv::linear(x, rows, x_stride, w, y, y_stride, round, HostThreadPool::global());
  }
};

}  // namespace ds41
