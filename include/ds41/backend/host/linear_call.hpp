// ds41/backend/host/linear_call.hpp — what a host Linear kernel is: a descriptor that says whether
// it takes a call (format, layout, rows, instruction level), prepares its form of the input, and
// runs a range of output rows. host_gemv::linear() (host/gemv.hpp) tries the kernels of its list
// in order and runs the first that takes the call on the thread pool, rows split across threads.
//
// A descriptor, in the file of its kernel:
//   static constexpr const char* kName;      what tests and benchmarks call it
//   struct Prepared;                          its form of the input (pointers into its own
//                                             thread_local workspace), made once per call
//   static bool usable(const LinearCall&);   the weights' format and layout, T, c.isa, the build
//   static bool prepare(const LinearCall&, Prepared&);  false: this input does not suit it (e.g.
//                                             values outside its exact range); the next kernel then
//   static void run(const LinearCall&, const Prepared&, int n_begin, int n_end, int prefetch_end);
//                                             rows [n_begin, n_end) of y, prefetching rows up to
//                                             prefetch_end as its own (HostThreadPool::run_owned)
// Every kernel gives the bits of MatrixView::dot (the format's FormatTraits::dot); which one runs
// changes the time only. A kernel whose instructions this build lacks is a NotBuilt.
#pragma once
#include "../../core/macros.hpp"  // DS41_HOST_AVX2
#include "../../core/linear_math.hpp"
#include "buffer.hpp"
#include "threads.hpp"

namespace ds41::host_gemv {

/// The vector instructions the host Linear's kernels may use, so that tests and benchmarks can
/// run each level on one machine (the results are the same bits): all this build has (kWidest:
/// with AVX-512 BF16, fp8 decode sums by dot products, host/gemv_fp8dot512.hpp), AVX-512
/// without BF16 (kAvx512: fp8 by multiply-adds, host/gemv_scaled512.hpp; fp4 with VNNI,
/// host/gemv_fp4int512.hpp; f32/bf16 decode 16 rows a vector, host/gemv_panels512.hpp), or AVX2
/// alone. A level the build lacks runs the next one down.
/// kTuned, linear()'s default: per format the level that read cold weights fastest (decode_isa).
enum class VectorIsa { kWidest, kAvx512, kAvx2, kTuned };

/// One Linear as its kernels see it: y[r, n] = round(x[r, :] · W[n, :]) for r < T, n < w.rows.
/// For a block-scaled W (fp8/fp4) x holds act_quant's q values and xs their scales (row stride
/// ceil(K/32)); linear() quantises every row once before any kernel sees them.
struct LinearCall {
  const float* x = nullptr;
  long T = 0, x_stride = 0;
  const float* xs = nullptr;
  MatrixView w;
  float* y = nullptr;
  long y_stride = 0;
  OutRound round = OutRound::kF32;
  VectorIsa isa = VectorIsa::kWidest;  // resolved: never kTuned here
  HostThreadPool* pool = nullptr;      // for a prepare with work per input row
};

/// Whether this build has the vector kernels (AVX2 with FMA, and up); without them every call takes the
/// scalar reference (host/gemv.hpp's ScalarRows).
#if defined(DS41_HOST_AVX2)
inline constexpr bool kVectorised = true;
#else
inline constexpr bool kVectorised = false;
#endif

/// The descriptor of a kernel this build does not have (its instruction set is off).
struct NotBuilt {
  static constexpr const char* kName = "not built";
  struct Prepared {};
  static bool usable(const LinearCall&) { return false; }
  static bool prepare(const LinearCall&, Prepared&) { return false; }
  static void run(const LinearCall&, const Prepared&, int, int, int) {}
};

/// Input values from which linear() quantises its input rows, and a prepare does its per-row work,
/// on the pool rather than inline.
constexpr long kParallelQuantMin = 1L << 15;

/// fn(r) for each input row r < c.T: on the pool for large inputs (prepare's per-row work).
template <class Fn>
inline void for_each_input_row(const LinearCall& c, Fn&& fn) {
  auto rows = [&](long begin, long end) {
    for (long r = begin; r < end; ++r) fn(r);
  };
  if (c.T * c.w.cols >= kParallelQuantMin && c.pool && c.pool->threads() > 1) c.pool->run(c.T, 1, rows);
  else rows(0, c.T);
}

/// A buffer of at least n elements in b (grown, never shrunk: a sequence's steps allocate nothing
/// after the first). For the kernels' thread_local workspaces.
template <class Buffer>
inline void grow(Buffer& b, long n) {
  if (b.size() < static_cast<size_t>(n)) b = Buffer(static_cast<size_t>(n));
}

}  // namespace ds41::host_gemv
