// ds41/backend/cuda.hpp — CudaBackendT<Numerics>: device memory, one stream, kernels launched over
// the same DS41_HD functions the host backend loops over. CudaBackend (ReferenceNumerics) is
// bit-identical to the reference; CudaFastBackend (FastNumerics, cuda/numerics.hpp) reorders the
// Linear sums (cuda/fast_linear.hpp) and is otherwise the same backend. Both share one stream and
// one graph recorder (the state lives in non-template cuda_detail functions). Include only from CUDA translation units
// (nvcc with --extended-lambda; the project also passes --fmad=false so that no multiply-add is
// fused and device results round like the host's).
//
// Vocabulary (shared with HostBackend): Buffer<T>, alloc<T>(n), upload/download/copy/fill, sync,
// for_each(n, f), linear(...) (its kernels in cuda/linear.hpp), topk_rows(...). Every CUDA call
// and launch is checked; failures raise ds41::Error naming the call.
#pragma once
#if !defined(__CUDACC__)
#error "ds41/backend/cuda.hpp must be compiled by nvcc (a .cu translation unit)"
#endif
#include <cuda_runtime.h>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>
#include "../core/error.hpp"
#include "../core/attention_math.hpp"
#include "../core/compress_math.hpp"
#include "../core/hc_post.hpp"
#include "../core/linear_math.hpp"
#include "../core/quant.hpp"
#include "../core/topk.hpp"
#include "concept.hpp"
#include "cuda/fast_linear.hpp"
#include "cuda/linear.hpp"
#include "cuda/numerics.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

#define DS41_CUDA_CHECK(call)                                                                       \
  do {                                                                                              \
    cudaError_t ds41_err_ = (call);                                                                 \
    if (ds41_err_ != cudaSuccess)                                                                   \
      ::ds41::fail("CUDA call ", #call, " failed: ", cudaGetErrorName(ds41_err_), " (",            \
                   cudaGetErrorString(ds41_err_), ") at ", __FILE__, ":", __LINE__);               \
  } while (0)

namespace cuda_detail {
/// The stream every operation of the backend is ordered on.
inline cudaStream_t backend_stream() {
  static cudaStream_t s = [] {
    cudaStream_t st;
    DS41_CUDA_CHECK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    return st;
  }();
  return s;
}

/// Graph mode: work issued on the backend stream is captured into CUDA graphs, one segment between
/// two host spans (a download, an upload, a sync). Frees of buffers used by a segment wait until it
/// has run.
struct GraphRecorder {
  bool enabled = false;
  bool capturing = false;
  long segments = 0;       // graphs launched since the counter was last read
  long captured_nodes = 0;
  long instantiated = 0;   // of those, instantiated anew / updated in place
  long updated = 0;
  std::vector<void*> deferred_frees;
  // Executable graphs kept across steps, by segment position in the step: step n + 1's segment i
  // is captured again (its buffers and parameters differ), then applied to step n's executable
  // with cudaGraphExecUpdate, which skips instantiation when the topology is the same.
  std::vector<cudaGraphExec_t> execs;
  size_t next_exec = 0;
};
inline GraphRecorder& recorder() {
  static GraphRecorder r;
  return r;
}

/// The fast Linear's workspace (cuda/fast_linear.hpp: the quantised input rows and split partial
/// sums): one grow-only device buffer for every numerics policy, reused by successive calls, which
/// the one stream orders. A buffer outgrown while a graph segment is captured is freed once that
/// segment has run (it may already be in it).
inline float* fast_workspace(size_t floats) {
  struct Workspace {
    float* p = nullptr;
    size_t n = 0;
  };
  static Workspace ws;
  if (floats > ws.n) {
    if (ws.p) {
      if (recorder().capturing) recorder().deferred_frees.push_back(ws.p);
      else cudaFree(ws.p);  // waits for the work using it
    }
    ws.p = nullptr;
    ws.n = 0;
    const size_t n = floats + floats / 2;  // headroom: the next larger shape rarely reallocates
    DS41_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ws.p), n * sizeof(float)));
    ws.n = n;
  }
  return ws.p;
}
}  // namespace cuda_detail
}  // namespace ds41
#include "../core/fp_exact_end.hpp"
// the fast policy's attention kernels need the stream, the workspace and DS41_CUDA_CHECK above
#include "cuda/block_topk.hpp"
#include "cuda/device_pool.hpp"
#include "cuda/fast_attention.hpp"
#include "../core/fp_exact_begin.hpp"
namespace ds41 {

/// An owning device array (from cuda/device_pool.hpp's kept blocks, zero-initialised). Move-only.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    p_ = static_cast<T*>(cuda_detail::device_pool().get(n * sizeof(T)));
    // ordered on the backend stream (a memset node when a graph segment is being captured)
    DS41_CUDA_CHECK(cudaMemsetAsync(p_, 0, n * sizeof(T), cuda_detail::backend_stream()));
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { reset(); }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }

 private:
  void reset() {
    // back to the pool, reused in stream order (also while a graph segment is captured: the
    // next use is a later node of the same segment)
    if (p_) cuda_detail::device_pool().put(p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

/// An owning page-locked host array (cudaHostAlloc, zero-initialised), the expert staging's
/// (model/expert_arena.hpp's alloc_staging): copies from it to the device are DMA, not staged
/// through the driver's own bounce buffer. Move-only; the same interface as HostBuffer.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t n) : n_(n) {
    if (n == 0) return;
    DS41_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void**>(&p_), n * sizeof(T), cudaHostAllocDefault));
    std::memset(static_cast<void*>(p_), 0, n * sizeof(T));
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { reset(); }
  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  void reset() {
    if (p_) cudaFreeHost(p_);  // a failing free in a destructor cannot be reported
    p_ = nullptr;
    n_ = 0;
  }
  T* p_ = nullptr;
  size_t n_ = 0;
};

namespace cuda_detail {

template <class F>
__global__ void for_each_kernel(long n, F f) {
  for (long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long>(gridDim.x) * blockDim.x)
    f(i);
}

/// f(r, c) of a flat index i of a row-major [rows, cols] array (for_each_in_rows on for_each).
template <class F>
struct InRows {
  long cols;
  F f;
  __device__ void operator()(long i) const { f(i / cols, i % cols); }
};

/// f(r, c, c + 1) of a flat index i of a row-major [rows, cols] array (for_each_run on
/// for_each: one element a thread, a run of one).
template <class F>
struct InRuns {
  long cols;
  F f;
  __device__ void operator()(long i) const { f(i / cols, i % cols, i % cols + 1); }
};

template <class T>
__global__ void fill_kernel(T* p, size_t n, T v) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    p[i] = v;
}

/// Each score's sort key (core/topk.hpp's topk_order_key: descending is topk_before's order) and
/// its column.
__global__ void topk_keys_kernel(const float* v, long rows, int n, unsigned long long* keys, int* vals) {
  long i = blockIdx.x * static_cast<long>(blockDim.x) + threadIdx.x;
  if (i >= rows * n) return;
  const int col = static_cast<int>(i % n);
  keys[i] = topk_order_key(v[i], col);
  vals[i] = col;
}

/// The device's contraction probe (core/fp_exact.hpp's host_fp_contracts, on the device):
/// in[0]·in[0] + in[1] is 0 with two roundings and 2^-24 when nvcc fuses it into an FMA, which it
/// does under its default --fmad=true. The inputs come from memory so that nothing folds at compile
/// time. A template, so that every translation unit can keep its own copy (compiled with that
/// unit's --fmad, the setting of the kernels it guards).
template <int = 0>
__global__ void fmad_probe_kernel(const float* in, float* out) {
  out[0] = in[0] * in[0] + in[1];
}

}  // namespace cuda_detail

namespace cuda_detail {
/// Throws ds41::Error when the last kernel launch failed.
inline void check_launch(const char* what) {
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) fail("CUDA kernel launch (", what, ") failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

inline void begin_segment() {
  DS41_CUDA_CHECK(cudaStreamBeginCapture(backend_stream(), cudaStreamCaptureModeRelaxed));
  recorder().capturing = true;
}

/// Ends the graph segment being captured (launching it where `launch`).
inline void end_segment(bool launch) {
  auto& r = recorder();
  cudaStream_t stream = backend_stream();
  if (!r.capturing) return;
  r.capturing = false;
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(stream, &graph);
  if (e == cudaSuccess && launch && graph) {
    size_t nodes = 0;
    DS41_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
    if (nodes) {
      const size_t slot = r.next_exec++;
      if (slot == r.execs.size()) r.execs.push_back(nullptr);
      cudaGraphExec_t& exec = r.execs[slot];
      if (exec) {
        cudaGraphExecUpdateResultInfo info{};
        if (cudaGraphExecUpdate(exec, graph, &info) == cudaSuccess) {
          ++r.updated;
        } else {  // another topology (a different step shape): instantiate afresh
          (void)cudaGetLastError();
          cudaGraphExecDestroy(exec);
          exec = nullptr;
        }
      }
      if (!exec) {
        DS41_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        ++r.instantiated;
      }
      DS41_CUDA_CHECK(cudaGraphLaunch(exec, stream));
      DS41_CUDA_CHECK(cudaStreamSynchronize(stream));
      ++r.segments;
      r.captured_nodes += static_cast<long>(nodes);
    }
  }
  if (graph) cudaGraphDestroy(graph);
  cudaStreamSynchronize(stream);
  for (void* p : r.deferred_frees) cudaFree(p);
  r.deferred_frees.clear();
  if (e != cudaSuccess) fail("CUDA graph capture of a segment failed: ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

/// A host span (download, upload, sync) ends the graph segment being captured, launching it, and
/// starts the next one on exit.
struct HostSpan {
  bool resume = false;
  HostSpan() {
    if (recorder().capturing) {
      end_segment(true);
      resume = true;
    }
  }
  ~HostSpan() {
    if (resume && recorder().enabled) begin_segment();
  }
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;
};

/// Runs the work issued while it lives as CUDA graphs: each stretch between host spans
/// (downloads of routing decisions or captures, uploads, syncs) is captured and launched as one
/// graph. The executable graph of the scope's i-th segment is kept and updated in place by the
/// next scope's i-th capture (cudaGraphExecUpdate; instantiated afresh only when the topology
/// changed) until release_graphs(). On an exception the open capture is discarded. One recorder
/// for every numerics policy: CudaBackend::GraphScope and CudaFastBackend::GraphScope are this.
class GraphScope {
 public:
  GraphScope() : exceptions_(std::uncaught_exceptions()) {
    auto& r = recorder();
    DS41_CHECK(!r.enabled, "CudaBackend::GraphScope: graph mode is already on");
    r.enabled = true;
    r.next_exec = 0;
    begin_segment();
  }
  ~GraphScope() {
    auto& r = recorder();
    const bool failing = std::uncaught_exceptions() > exceptions_;
    r.enabled = false;
    try {
      end_segment(/*launch=*/!failing);
    } catch (...) {
      if (!failing) throw_later_ = true;  // destructors must not throw; surfaced by failed()
    }
  }
  GraphScope(const GraphScope&) = delete;
  GraphScope& operator=(const GraphScope&) = delete;
  bool failed() const { return throw_later_; }

 private:
  int exceptions_;
  bool throw_later_ = false;
};
}  // namespace cuda_detail

/// The device backend under a numerics policy (cuda/numerics.hpp). Under FastNumerics, linear()
/// takes the fast kernels (cuda/fast_linear.hpp) where their plan accepts the shape, sparse
/// attention and index scores theirs (cuda/fast_attention.hpp), topk_rows a one-block sort; every
/// other operation is the reference one in both policies.
template <class Numerics>
struct CudaBackendT {
  using NumericsPolicy = Numerics;
  static constexpr bool kFast = Numerics::kReordersSums;
  static constexpr const char* kName = kFast ? "cuda-fast" : "cuda";
  static constexpr bool kIsDevice = true;
  template <class T>
  using Buffer = DeviceBuffer<T>;

  /// Whether a usable device exists (never throws).
  static bool device_available() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return n > 0;
  }
  /// The stream every operation of this backend is ordered on.
  static cudaStream_t stream() { return cuda_detail::backend_stream(); }

  /// Model's constructor calls it. The exact policy's device arithmetic is not yet written with
  /// explicit roundings throughout (core/fp_exact.hpp's mul_rn/add_rn are the way there), so it
  /// still needs nvcc's --fmad=false on the translation units that instantiate it; this probe,
  /// compiled in the same unit, throws ds41::Error instead of letting fused kernels give other bits.
  /// The fast policy fuses by design and needs nothing.
  static void require_exact_numerics() {
    if constexpr (!kFast) {
      const float in[2] = {1.0f + 0x1p-12f, -(1.0f + 0x1p-11f)};
      Buffer<float> d_in(2), d_out(1);
      upload(d_in.data(), in, 2);
      cuda_detail::fmad_probe_kernel<<<1, 1, 0, stream()>>>(d_in.data(), d_out.data());
      cuda_detail::check_launch("fmad probe");
      float out = 1.0f;
      download(&out, d_out.data(), 1);
      if (out != 0.0f)
        fail("CudaBackend (exact numerics): this translation unit's device code fuses a*b+c into FMA "
             "(nvcc's default --fmad=true): compile the .cu files that instantiate ds41's exact CUDA "
             "backend with --fmad=false, or use CudaFastBackend (docs/NUMERICS.md, \"Consumers: "
             "compiler flags\")");
    }
  }

  /// Graph mode (cuda_detail::GraphScope): the same recorder for every numerics policy.
  using GraphScope = cuda_detail::GraphScope;

  /// Graphs launched (and nodes captured) since the last call.
  static std::pair<long, long> take_graph_counters() {
    auto& r = cuda_detail::recorder();
    auto out = std::make_pair(r.segments, r.captured_nodes);
    r.segments = r.captured_nodes = 0;
    return out;
  }
  /// Of the graphs launched since the last call: instantiated anew, and reused (updated in place).
  static std::pair<long, long> take_graph_reuse() {
    auto& r = cuda_detail::recorder();
    auto out = std::make_pair(r.instantiated, r.updated);
    r.instantiated = r.updated = 0;
    return out;
  }
  /// Destroys the executable graphs kept for reuse (Model calls it when a sequence starts and on
  /// release(): they hold device resources). While a GraphScope is open it does nothing.
  static void release_graphs() {
    auto& r = cuda_detail::recorder();
    if (r.enabled) return;
    for (cudaGraphExec_t e : r.execs)
      if (e) cudaGraphExecDestroy(e);
    r.execs.clear();
    r.next_exec = 0;
  }

  template <class T>
  static Buffer<T> alloc(size_t n) {
    return Buffer<T>(n);
  }
  /// Page-locked host memory (PinnedStaging, backend/concept.hpp): the streamed experts' staging.
  template <class T>
  static PinnedBuffer<T> alloc_pinned(size_t n) {
    return PinnedBuffer<T>(n);
  }
  template <class T>
  static void upload(T* dst, const T* src, size_t n) {
    if (!n) return;
    cuda_detail::HostSpan span;
    DS41_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyHostToDevice, stream()));
    DS41_CUDA_CHECK(cudaStreamSynchronize(stream()));  // the host source may go away right after
  }
  template <class T>
  static void download(T* dst, const T* src, size_t n) {
    if (!n) return;
    cuda_detail::HostSpan span;
    DS41_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream()));
    DS41_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }
  template <class T>
  static void copy(T* dst, const T* src, size_t n) {
    if (!n) return;
    DS41_CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream()));
  }
  template <class T>
  static void fill(T* dst, size_t n, T v) {
    if (!n) return;
    unsigned grid = static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 65535));
    cuda_detail::fill_kernel<<<grid, 256, 0, stream()>>>(dst, n, v);
    cuda_detail::check_launch("fill");
  }
  static void sync() {
    cuda_detail::HostSpan span;
    DS41_CUDA_CHECK(cudaStreamSynchronize(stream()));
  }

  template <class F>
  static void for_each(long n, F f) {
    if (n <= 0) return;
    unsigned grid = static_cast<unsigned>(std::min<long>((n + 255) / 256, 65535L * 16));
    cuda_detail::for_each_kernel<<<grid, 256, 0, stream()>>>(n, f);
    cuda_detail::check_launch("for_each");
  }

  /// f(r, c) for r < rows, c < cols (HostBackend::for_each_in_rows): for_each, one thread an
  /// element, the row and column taken from its flat index.
  template <class F>
  static void for_each_in_rows(long rows, long cols, F f) {
    if (rows <= 0 || cols <= 0) return;
    for_each(rows * cols, cuda_detail::InRows<F>{cols, f});
  }

  /// f(r, c0, c1) over runs covering a [rows, cols] array (HostBackend::for_each_run): here
  /// every run is one element, one thread each.
  template <class F>
  static void for_each_run(long rows, long cols, F f) {
    if (rows <= 0 || cols <= 0) return;
    for_each(rows * cols, cuda_detail::InRuns<F>{cols, f});
  }

  static void linear(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                     OutRound round) {
    if (rows <= 0 || w.rows <= 0) return;
    if constexpr (kFast) {
      // reordered sums (cuda/fast_linear.hpp) where the plan takes the shape; else the exact kernels
      if (cuda_detail::launch_fast_linear(x, rows, x_stride, w, y, y_stride, round, stream(), cuda_detail::fast_workspace)) {
        cuda_detail::check_launch("fast linear");
        return;
      }
    }
    // the coalesced tiled kernel (cuda/linear.hpp), bit-identical to MatrixView::dot; input rows
    // beyond one grid dimension (65535) are launched in slices
    cuda_detail::launch_linear(x, rows, x_stride, w, y, y_stride, round, stream());
    cuda_detail::check_launch("linear");
  }

  // ---- operations each backend does its own way (HostBackend has the same names; the exact
  // policy the same bits): one thread per output of the shared DS41_HD formulas, or the fast
  // policy's kernels

  /// Sparse attention with a per-head sink (attention_math.hpp): exact, one thread per (row,
  /// head); fast, cuda/fast_attention.hpp (KV tiles shared by a block's heads, split lists).
  static void sparse_attention(const float* q, const float* kv, int D, const int32_t* idx, int ncols, long T, int H,
                               const float* sink, float scale, float* out) {
    if constexpr (kFast) {
      cuda_detail::fast_sparse_attention(q, kv, D, idx, ncols, T, H, sink, scale, out);
      return;
    }
    for_each(T * H, [=] __device__(long e) {
      const long t = e / H;
      const int h = static_cast<int>(e % H);
      sparse_attn_head(q + e * D, kv, D, idx + t * ncols, ncols, D, sink[h], scale, out + e * D);
    });
  }
  /// The indexer's scores (compress_math.hpp): exact, one thread per (row, key); fast,
  /// cuda/fast_attention.hpp (q and key tiles staged in shared memory).
  static void index_scores(const float* q, const float* w, const float* keys, long T, int H, int Di, long nk,
                           bool small_bmm, float* out) {
    if constexpr (kFast) {
      cuda_detail::fast_index_scores(q, w, keys, T, H, Di, nk, small_bmm, out);
      return;
    }
    for_each(T * nk, [=] __device__(long e) {
      const long t = e / nk, j = e % nk;
      out[e] = index_score_entry(q + t * H * Di, w + t * H, keys + j * Di, H, Di, small_bmm);
    });
  }
  /// The highway's post-expansion (core/hc_post.hpp): one thread per output element.
  static void expand_post(const float* x, const float* res, const float* post, const float* comb, long T, int hc,
                          int dim, float* out) {
    for_each(T * hc * dim, [=] __device__(long e) {
      const long t = e / (static_cast<long>(hc) * dim);
      out[e] = hc_post_element(x, res, post, comb, t, static_cast<int>((e / dim) % hc), e % dim, hc, dim);
    });
  }
  /// Rows of an fp8 table (HostBackend::gather_fp8_rows): one thread per output element.
  static void gather_fp8_rows(const uint8_t* codes, const float* scales, int hd, const int32_t* ids, long n, float* out) {
    if (hd <= 0) return;
    const int nb = hd / 32;
    for_each(n * hd, [=] __device__(long e) {
      const long i = e / hd, d = e % hd;
      const long r = ids[i];
      out[e] = fp8_row_value(codes[r * hd + d], scales[r * nb + d / 32]);
    });
  }

  /// idx[r, 0..k) = the k best columns of v[r, 0..n): torch's set, as the host's topk_rows gives
  /// it (docs/NUMERICS.md, "Tied scores"). A CUB segmented radix sort on topk_order_key orders
  /// each row; where equal scores straddle the k-th place (topk_boundary_tied) the set depends on
  /// torch's algorithm, and that row is redone by torch_topk_row (one thread per such row). Order:
  /// best first, or torch's unsorted order for a redone row; the caller re-sorts (index_topk_finish).
  static void topk_rows(const float* v, long rows, int n, int k, int32_t* idx) {
    if (rows <= 0 || k <= 0) return;
    // the fast policy sorts a row of up to 4096 scores in one block (cuda/block_topk.hpp): the
    // same keys, so the same selection, without the segmented sort's buffers and sync
    if constexpr (kFast)
      if (cuda_detail::block_topk_rows(v, rows, n, k, idx)) return;
    const long total = rows * static_cast<long>(n);
    DS41_CHECK(total < (1L << 31) - 1, "CudaBackend::topk_rows: ", rows, " x ", n,
               " scores exceed CUB's 32-bit item count; split the rows");
    Buffer<unsigned long long> keys(total), keys_out(total);
    Buffer<int> vals(total), vals_out(total);
    Buffer<int> offsets(rows + 1);
    cuda_detail::topk_keys_kernel<<<static_cast<unsigned>((total + 255) / 256), 256, 0, stream()>>>(
        v, rows, n, keys.data(), vals.data());
    cuda_detail::check_launch("topk keys");
    int* off = offsets.data();
    for_each(rows + 1, [=] __device__(long r) { off[r] = static_cast<int>(r * n); });
    size_t temp_bytes = 0;
    DS41_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        nullptr, temp_bytes, keys.data(), keys_out.data(), vals.data(), vals_out.data(), static_cast<int>(total),
        static_cast<int>(rows), off, off + 1, 0, 64, stream()));
    Buffer<uint8_t> temp(temp_bytes ? temp_bytes : 1);
    DS41_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        temp.data(), temp_bytes, keys.data(), keys_out.data(), vals.data(), vals_out.data(), static_cast<int>(total),
        static_cast<int>(rows), off, off + 1, 0, 64, stream()));
    const int* sorted = vals_out.data();
    for_each(rows * k, [=] __device__(long e) { idx[e] = sorted[(e / k) * n + e % k]; });
    // the input keys are spent: their 8 bytes per score are the redone rows' scratch
    static_assert(sizeof(TopkEntry) == sizeof(unsigned long long));
    TopkEntry* scratch = reinterpret_cast<TopkEntry*>(keys.data());
    const unsigned long long* ko = keys_out.data();
    for_each(rows, [=] __device__(long r) {
      if (topk_boundary_tied(ko + r * n, n, k))
        torch_topk_row(v + r * n, n, k, false, reinterpret_cast<int*>(idx + r * k), nullptr, scratch + r * n);
    });
    sync();  // temporaries are freed on return
  }

  /// Gives the device memory kept for reuse back to the driver (MemoryCache, backend/concept.hpp):
  /// Model's destructor calls it; an engine may between models.
  static void trim_memory() {
    sync();
    cuda_detail::device_pool().trim();
  }
  /// cudaMalloc calls of the backend's buffers so far (a step that has run before makes none).
  static long device_mallocs() { return cuda_detail::device_pool().mallocs(); }
  /// Free device memory, in bytes (for leak checks).
  static size_t free_memory() {
    size_t f = 0, t = 0;
    DS41_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    return f;
  }
};

/// Bit-identical to the reference (and to HostBackend).
using CudaBackend = CudaBackendT<ReferenceNumerics>;
/// Reordered, fused Linear sums with the reference's rounding points (docs/NUMERICS.md, "The device's fast policy").
using CudaFastBackend = CudaBackendT<FastNumerics>;

static_assert(Backend<CudaBackend> && Backend<CudaFastBackend>, "CudaBackendT must meet backend/concept.hpp");
static_assert(PinnedStaging<CudaBackend> && ExactNumericsProbe<CudaBackend> && MemoryCache<CudaBackend>,
              "CudaBackendT's capabilities");

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
