// ds41/backend/host.hpp — HostBackend: host memory, loops over the shared DS41_HD functions.
//
// The backend vocabulary every component uses (the CUDA backend offers the same names):
//   Buffer<T>, alloc<T>(n), upload/download/copy, for_each(n, f), linear(...), sync().
// Components never touch threads or CUDA directly.
#pragma once
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>
#include "../core/linear_math.hpp"
#include "host_buffer.hpp"

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

  /// f(i) for i in [0, n). Work items are independent.
  template <class F>
  static void for_each(long n, F f) {
    for (long i = 0; i < n; ++i) f(i);
  }

  /// y[r, n] = round(x[r, :] · W[n, :]) for r < rows, n < W.rows.
  static void linear(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                     OutRound round) {
    for (long r = 0; r < rows; ++r) {
      const float* xr = x + r * x_stride;
      float* yr = y + r * y_stride;
      for (int n = 0; n < w.rows; ++n) yr[n] = apply_round(w.dot(xr, n), round);
    }
  }
};

}  // namespace ds41
