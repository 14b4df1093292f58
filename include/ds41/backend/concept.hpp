// ds41/backend/concept.hpp — what a backend must offer the components, and what it may.
//
// The components (model/) are templates over a backend B and call only what is written here.
// `Backend<B>` is the contract every backend meets (HostBackend and CudaBackendT static_assert
// it where they are defined); the named capabilities are what a backend may add, and the
// components test for them by these names rather than by ad-hoc `requires` probes, so that a
// backend that means to offer one and misspells it fails a static_assert instead of silently
// taking the fallback.
//
//   memory      Buffer<T> (owning, zero-initialised, move-only), alloc, upload, download, copy,
//               fill, sync; release_graphs (a no-op where nothing is captured)
//   loops       for_each(n, f(i)), for_each_in_rows(rows, cols, f(r, c)),
//               for_each_run(rows, cols, f(r, c0, c1)): independent items, any order
//   operations  linear, topk_rows, sparse_attention, index_scores, expand_post, gather_fp8_rows
//               (bit-identical across backends under the exact policy: tests/test_golden_cuda.cu)
//   identity    kName, kIsDevice
//
//   PinnedStaging<B>       alloc_pinned<T>(n): page-locked host memory for expert staging
//   PackedWeightUpload<B>  upload_linear_weights: the backend lays out Linear weights its own way
//   TaskRunner<B>          kRunsTasks, run_tasks(n, f(k)), threads(): whole tasks on worker threads
//   ExactNumericsProbe<B>  require_exact_numerics(): the backend checks at model construction that
//                          its exact kernels were compiled without contraction (core/fp_exact.hpp)
//   MemoryCache<B>         trim_memory(): the backend keeps freed buffers for reuse and gives them
//                          back here (Model's destructor calls it)
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>
#include "../core/linear_math.hpp"

#include "../core/fp_exact_begin.hpp"

namespace ds41 {
namespace backend_concept_detail {
/// A loop body for the requires-expressions (a lambda cannot appear there as a device lambda).
struct Item {
  DS41_HD void operator()(long) const {}
};
struct Cell {
  DS41_HD void operator()(long, long) const {}
};
struct Run {
  DS41_HD void operator()(long, long, long) const {}
};
}  // namespace backend_concept_detail

template <class B>
concept Backend = requires(float* f, const float* cf, int32_t* i32, const int32_t* ci32, const uint8_t* cu8,
                           long n, int k, const MatrixView& w, typename B::template Buffer<float>& buf) {
  { B::kName } -> std::convertible_to<const char*>;
  { B::kIsDevice } -> std::convertible_to<bool>;
  // memory
  { B::template alloc<float>(size_t{1}) } -> std::same_as<typename B::template Buffer<float>>;
  { buf.data() } -> std::same_as<float*>;
  { buf.size() } -> std::convertible_to<size_t>;
  B::template upload<float>(f, cf, size_t{1});
  B::template download<float>(f, cf, size_t{1});
  B::template copy<float>(f, cf, size_t{1});
  B::template fill<float>(f, size_t{1}, 0.0f);
  B::sync();
  B::release_graphs();
  // loops
  B::for_each(n, backend_concept_detail::Item{});
  B::for_each_in_rows(n, n, backend_concept_detail::Cell{});
  B::for_each_run(n, n, backend_concept_detail::Run{});
  // operations
  B::linear(cf, n, n, w, f, n, OutRound::kF32);
  B::topk_rows(cf, n, k, k, i32);
  B::sparse_attention(cf, cf, k, ci32, k, n, k, cf, 1.0f, f);
  B::index_scores(cf, cf, cf, n, k, k, n, true, f);
  B::expand_post(cf, cf, cf, cf, n, k, k, f);
  B::gather_fp8_rows(cu8, cf, k, ci32, n, f);
};

template <class B>
concept PinnedStaging = requires { B::template alloc_pinned<uint8_t>(size_t{1}); };

template <class B>
concept PackedWeightUpload = requires(const MatrixView& src, typename B::template Buffer<uint8_t>& payload,
                                      typename B::template Buffer<float>& scales, MatrixView& out) {
  { B::upload_linear_weights(src, payload, scales, out) } -> std::convertible_to<bool>;
};

template <class B>
concept TaskRunner = requires(long n, backend_concept_detail::Item f) {
  { B::kRunsTasks } -> std::convertible_to<bool>;
  B::run_tasks(n, f);
  { B::threads() } -> std::convertible_to<int>;
};

template <class B>
concept ExactNumericsProbe = requires { B::require_exact_numerics(); };

template <class B>
concept MemoryCache = requires { B::trim_memory(); };

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
