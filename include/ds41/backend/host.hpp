// ds41/backend/host.hpp — HostBackend: host memory, loops over the shared DS41_HD functions.
//
// The backend vocabulary every component uses (the CUDA backend offers the same names):
//   Buffer<T>, alloc<T>(n), upload/download/copy, for_each(n, f), linear(...), sync().
// Components never touch threads or CUDA directly. Linear runs the vectorised, multi-threaded
// kernels of host/gemv.hpp (bit-identical to MatrixView::dot) on weights Matrix<HostBackend> stored
// as 8-row panels (upload_linear_weights); for_each splits its items over the
// same thread pool (host/threads.hpp) when there are enough of them.
#pragma once
#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>
#include "../core/compress_math.hpp"
#include "../core/linear_math.hpp"
#include "../core/topk.hpp"
#include "concept.hpp"
#include "host/attention.hpp"
#include "host/buffer.hpp"
#include "host/gemv.hpp"
#include "host/panels.hpp"
#include "host/rows.hpp"
#include "host/threads.hpp"

#include "../core/fp_exact_begin.hpp"
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

  /// f(r, c0, c1) for the runs [c0, c1) of row r that cover a row-major [rows, cols] array, split
  /// as for_each's items are (a chunk of elements, walked row by row): a row's elements in one
  /// call where the chunk holds them, so that f can take them a vector at a time.
  template <class F>
  static void for_each_run(long rows, long cols, F f) {
    const long n = rows * cols;
    if (n <= 0) return;
    auto run = [&](long begin, long end) {
      long r = begin / cols, c = begin % cols;
      for (long e = begin; e < end; ++r, c = 0) {
        const long stop = std::min(cols, c + (end - e));
        f(r, c, stop);
        e += stop - c;
      }
    };
    HostThreadPool& pool = HostThreadPool::global();
    if (n < kParallelForEachMinItems || pool.threads() == 1) return run(0, n);
    pool.run(n, std::max(1L, n / (8L * pool.threads())), run);
  }

  /// f(r, c) for r in [0, rows), c in [0, cols): for_each over the rows·cols elements of a
  /// row-major [rows, cols] array, split as for_each's, each chunk walked as runs along a row.
  /// Why: elementwise row ops written over a flat index (hc collapse and copies, the MoE gathers
  /// and adds) spent more on `e / dim`, a 64-bit divide per element, than on their arithmetic
  /// (~2% of a batch-8 decode step, perf, bench_layer's shapes); along a run the row stays put.
  template <class F>
  static void for_each_in_rows(long rows, long cols, F f) {
    for_each_run(rows, cols, [&](long r, long c0, long c1) {
      for (long c = c0; c < c1; ++c) f(r, c);
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
  /// run_tasks runs its tasks on the pool's threads (MoeT's experts of a step of few rows).
  static constexpr bool kRunsTasks = true;
  /// f(i) for i in [0, n), each i a task run wholly by one thread: a for_each or Linear inside it
  /// runs inline there (nested pool calls do). The first thread takes its share of [0, n) front
  /// to back, the others theirs, then each takes from the back of the others'
  /// (HostThreadPool::run_owned): callers order tasks heaviest first.
  template <class F>
  static void run_tasks(long n, F f) {
    HostThreadPool& pool = HostThreadPool::global();
    if (n < 2 || pool.threads() == 1) {
      for (long i = 0; i < n; ++i) f(i);
      return;
    }
    pool.run_owned(n, 1, [&](long begin, long end, long) {
      for (long i = begin; i < end; ++i) f(i);
    });
  }

  /// Threads for_each may use (the calling one included).
  static int threads() { return HostThreadPool::global().threads(); }

  /// idx[r, 0..k) = the k best columns of v[r, 0..n): the indexer's index_score.topk(k,
  /// sorted=False), torch's choice among tied scores and torch's unsorted order (core/topk.hpp's
  /// torch_topk_row). The caller re-sorts (index_topk_finish); CudaBackend's order is best first.
  static void topk_rows(const float* v, long rows, int n, int k, int32_t* idx) {
    for_each_with_scratch<TopkEntry>(rows, static_cast<size_t>(n), false, [=](long r, TopkEntry* scratch) {
      torch_topk_row(v + r * n, n, k, false, reinterpret_cast<int*>(idx + r * k), nullptr, scratch);
    });
  }

  // ---- operations a device does its own way (CudaBackend has the same names, the same bits)

  /// Sparse attention with a per-head sink (attention_math.hpp): query row t's H heads [T, H, D]
  /// attend over the kv rows [., D] listed in idx[t, 0..ncols) (-1: none) → out [T, H, D]. Here: a
  /// group of a row's heads per item, each gathered block read once for the group
  /// (host/attention.hpp; the same bits as one call per head).
  static void sparse_attention(const float* q, const float* kv, int D, const int32_t* idx, int ncols, long T, int H,
                               const float* sink, float scale, float* out) {
    const int group = attn_heads_per_item(H, threads());
    const long groups = (H + group - 1) / group;
    for_each_with_scratch<float>(T * groups, attn_heads_scratch_floats(D, group), true, [=](long e, float* scratch) {
      const long t = e / groups;
      const int h0 = static_cast<int>(e % groups) * group, hn = H - h0 < group ? H - h0 : group;
      const long e0 = t * H + h0;
      sparse_attn_heads_host(q + e0 * D, kv, D, idx + t * ncols, ncols, D, hn, sink + h0, scale, out + e0 * D, scratch);
    });
  }

  /// The indexer's scores (compress_math.hpp): out[t, j] = index_score_entry(q[t], w[t], keys[j])
  /// for query rows q [T, H, Di] with head weights w [T, H] and keys [nk, Di]. Here: 8 keys per
  /// item, their sums side by side (the same order per key, simd_avx2.hpp).
  static void index_scores(const float* q, const float* w, const float* keys, long T, int H, int Di, long nk,
                           bool small_bmm, float* out) {
    const long groups = (nk + 7) / 8;
    for_each(T * groups, [=](long e) {
      const long t = e / groups, j0 = (e % groups) * 8;
      index_scores_host(q + t * H * Di, w + t * H, keys, j0, nk, H, Di, small_bmm, out + t * nk);
    });
  }

  /// The highway's post-expansion: out[t, j, d] = bf16(post[t, j]·x[t, d] + Σ_i comb[t, i, j]·
  /// res[t, i, d]), the sum over i in order (host/rows.hpp: items of row stretches).
  static void expand_post(const float* x, const float* res, const float* post, const float* comb, long T, int hc,
                          int dim, float* out) {
    for_each(host_rows::expand_post_items(T, hc, dim),
             [=](long item) { host_rows::expand_post_item(item, x, res, post, comb, T, hc, dim, out); });
  }

  /// Rows of an fp8 table: out[i, d] = bf16(e4m3(codes[r, d]) · scales[r, d / 32]) for r = ids[i].
  /// Here: items of whole rows (~kGatherItemElements elements; a small gather stays on the calling
  /// thread), a row kGatherPrefetchRows ahead prefetched.
  static void gather_fp8_rows(const uint8_t* codes, const float* scales, int hd, const int32_t* ids, long n, float* out) {
    if (hd <= 0) return;
    const int nb = hd / 32;
    const long per_item = hd >= host_rows::kGatherItemElements ? 1 : host_rows::kGatherItemElements / hd;
    for_each((n + per_item - 1) / per_item, [=](long item) {
      const long i1 = (item + 1) * per_item < n ? (item + 1) * per_item : n;
      for (long i = item * per_item; i < i1; ++i) {
        if (i + host_rows::kGatherPrefetchRows < n)
          engram_host::prefetch_row(codes, scales, ids[i + host_rows::kGatherPrefetchRows], hd);
        const long r = ids[i];
        engram_host::dequant_row(codes + r * hd, scales + r * nb, hd, out + i * hd);
      }
    });
  }

  /// Uploads a Linear's weights in the layout this backend's GEMV streams fastest: 8-row panels
  /// (host/panels.hpp) where the vector kernels are compiled in. Returns false, touching nothing,
  /// when `src` stays row-major (no AVX2, fp8 with NaN codes, fp4 with a scale e8m0 cannot hold);
  /// the caller then uploads it as is.
  /// Buffers of the right size are reused (expert slots).
  static bool upload_linear_weights(const MatrixView& src, Buffer<uint8_t>& payload, Buffer<float>& scales,
                                    MatrixView& out) {
    if (src.format == WeightFormat::kGgmlBlocks) {  // GGUF blocks: 8-row panels of the same bytes
      if (!host_ggml::packable(src)) return false;
      const size_t bytes = host_ggml::packed_bytes(src);
      if (payload.size() != bytes) payload = Buffer<uint8_t>(bytes);
      if (scales.size() != 0) scales = Buffer<float>();
      out = host_ggml::pack(src, payload.data());
      return true;
    }
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

static_assert(Backend<HostBackend>, "HostBackend must meet backend/concept.hpp");
static_assert(TaskRunner<HostBackend> && PackedWeightUpload<HostBackend>, "HostBackend's capabilities");

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
