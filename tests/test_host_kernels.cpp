// The host backend's fast Linear (host/gemv.hpp: vectorised across rows, split over threads) and
// its thread pool: every output bit-identical to the scalar reference MatrixView::dot, for every
// weight format over awkward shapes, row-major and in the host backend's 8-row panel layout (row
// slices on and off panel boundaries), and the tiny golden's counts unchanged.
#include <doctest/doctest.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "ds41/backend/host.hpp"
#include "ds41/model/engram.hpp"
#include "ds41/model/highway.hpp"
#include "ds41/core/compress_math.hpp"
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include "golden_checks.hpp"
#include "random_weights.hpp"
#include "same_bits.hpp"

using namespace ds41;
using ds41::testing::same_bits;

namespace {

using testing::random_matrix;

/// Runs host_gemv::linear and the scalar reference on the same data; returns the mismatches.
long compare_linear(const HostTensor& t, int T, OutRound round, std::mt19937& rng, HostThreadPool& pool) {
  const MatrixView w = t.view();
  const long x_stride = w.cols + 3, y_stride = w.rows + 5;  // strides wider than the rows
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(T) * x_stride);
  for (auto& e : x) e = bf16_round(uni(rng));
  x[0] = -0.0f;  // signed zeros and zero products must come out the same too
  std::vector<float> fast(static_cast<size_t>(T) * y_stride, 7.0f), ref(fast);
  host_gemv::linear(x.data(), T, x_stride, w, fast.data(), y_stride, round, pool);
  for (int r = 0; r < T; ++r)
    for (int n = 0; n < w.rows; ++n) ref[r * y_stride + n] = apply_round(w.dot(x.data() + r * x_stride, n), round);
  long bad = 0;
  for (size_t i = 0; i < fast.size(); ++i) bad += !same_bits(fast[i], ref[i]);
  return bad;
}

/// A HostTensor stored the way Matrix<HostBackend> stores a Linear's weights (8-row panels).
struct PanelMatrix {
  HostBuffer<uint8_t> payload;
  HostBuffer<float> scales;
  MatrixView view;
  explicit PanelMatrix(const HostTensor& t) {
    // packed directly rather than through upload_linear_weights, which keeps row-major weights
    // where the vector kernels are not compiled: a portable build still checks the panel layout
    // through the scalar path (MatrixView::panel_value)
    REQUIRE(host_panels::packable(t.view()));
    const int rows = static_cast<int>(t.shape[0]), cols = static_cast<int>(t.shape[1]);
    payload = HostBuffer<uint8_t>(host_panels::payload_bytes(t.format, rows, cols));
    scales = HostBuffer<float>(host_panels::scale_buffer_count(t.format, rows, cols));
    view = host_panels::pack(t.view(), payload.data(), scales.data());
    REQUIRE(view.layout == WeightLayout::kPanels8);
  }
};

/// Runs host_gemv::linear on rows [r0, r0 + n) of the panel copy `p` and compares every output
/// with the scalar MatrixView::dot on the row-major original `t`; returns the mismatches.
long compare_panel_linear(const HostTensor& t, const MatrixView& p, int r0, int n, int T, OutRound round,
                          std::mt19937& rng, HostThreadPool& pool,
                          host_gemv::VectorIsa isa = host_gemv::VectorIsa::kWidest) {
  const MatrixView w = t.view(), slice = p.row_slice(r0, n);
  const long x_stride = w.cols + 3, y_stride = n + 5;
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(T) * x_stride);
  for (auto& e : x) e = uni(rng);  // full f32 activations: products round
  x[0] = -0.0f;
  std::vector<float> fast(static_cast<size_t>(T) * y_stride, 7.0f), ref(fast);
  host_gemv::linear(x.data(), T, x_stride, slice, fast.data(), y_stride, round, pool, isa);
  for (int r = 0; r < T; ++r)
    for (int i = 0; i < n; ++i) ref[r * y_stride + i] = apply_round(w.dot(x.data() + r * x_stride, r0 + i), round);
  long bad = 0;
  for (size_t i = 0; i < fast.size(); ++i) bad += !same_bits(fast[i], ref[i]);
  // the panel view's own scalar dot and at() agree with the original's
  for (int i = 0; i < n; i += 3) {
    bad += !same_bits(slice.dot(x.data(), i), w.dot(x.data(), r0 + i));
    for (int k = 0; k < w.cols; k += 7) bad += !same_bits(slice.at(i, k), w.at(r0 + i, k));
  }
  return bad;
}

const WeightFormat kFormats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kFp8Block32,
                                 WeightFormat::kFp4Block32};

}  // namespace

TEST_CASE("host linear: bit-identical to MatrixView::dot for every format, shape and input row count") {
  INFO("vectorised kernels compiled in: " << host_gemv::kVectorised);
  std::mt19937 rng(41);
  HostThreadPool pool(3);  // more threads than this machine may have: splits must not matter
  const int row_counts[] = {1, 7, 8, 9, 31, 32, 33, 69, 130, 257};
  const int col_counts[] = {2, 8, 30, 32, 40, 64, 70, 96, 160, 326, 1024};
  const int input_rows[] = {1, 2, 5, 16, 17, 40};
  for (WeightFormat f : kFormats)
    for (int rows : row_counts)
      for (int cols : col_counts)
        for (int T : input_rows) {
          if ((rows * cols * T) % 3 != 0 && T > 2 && cols > 64) continue;  // thin the big cross product
          HostTensor t = random_matrix(f, rows, cols, rng);
          for (OutRound round : {OutRound::kF32, OutRound::kBF16}) {
            CAPTURE(format_name(f));
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(T);
            CHECK(compare_linear(t, T, round, rng, pool) == 0);
          }
        }
}

TEST_CASE("host linear: V4.1-sized GEMV and GEMM, threaded, bit-identical") {
  std::mt19937 rng(7);
  HostThreadPool& pool = HostThreadPool::global();
  for (WeightFormat f : kFormats)
    for (int T : {1, 3}) {
      HostTensor t = random_matrix(f, 1056, 5120, rng);
      CAPTURE(format_name(f));
      CAPTURE(T);
      CHECK(compare_linear(t, T, OutRound::kBF16, rng, pool) == 0);
    }
}

TEST_CASE("host linear on panel-packed weights: bit-identical to MatrixView::dot on the row-major original") {
  std::mt19937 rng(17);
  HostThreadPool pool(3);
  const int row_counts[] = {1, 7, 8, 9, 31, 33, 69, 130};
  const int col_counts[] = {2, 6, 7, 8, 30, 32, 33, 40, 70, 96, 326};  // odd: a bf16 group half past K
  const int input_rows[] = {1, 2, 17};
  for (WeightFormat f : kFormats)
    for (int rows : row_counts)
      for (int cols : col_counts)
        for (int T : input_rows) {
          if (f == WeightFormat::kFp4Block32 && cols % 2) continue;  // fp4 packs whole bytes (packable)
          HostTensor t = random_matrix(f, rows, cols, rng);
          PanelMatrix p(t);
          CAPTURE(format_name(f));
          CAPTURE(rows);
          CAPTURE(cols);
          CAPTURE(T);
          // each vector level: f32/bf16 decode takes 16-row tiles with AVX-512 (host/gemv_panels512.hpp)
          for (auto isa : {host_gemv::VectorIsa::kWidest, host_gemv::VectorIsa::kAvx2}) {
            CAPTURE(static_cast<int>(isa));
            for (OutRound round : {OutRound::kF32, OutRound::kBF16})
              CHECK(compare_panel_linear(t, p.view, 0, rows, T, round, rng, pool, isa) == 0);
          }
        }
}

TEST_CASE("host linear on panel-packed weights: row slices on and off panel boundaries") {
  std::mt19937 rng(23);
  HostThreadPool pool(2);
  // (r0, n): grouped-wo_a-like slices of 8, 16 and 24 rows, and slices starting inside a panel
  const int slices[][2] = {{0, 8}, {8, 8}, {16, 16}, {32, 24}, {3, 5}, {5, 13}, {9, 40}, {64, 32}, {1, 95}};
  for (WeightFormat f : kFormats)
    for (int cols : {40, 64, 100})
      for (int T : {1, 3, 16}) {
        HostTensor t = random_matrix(f, 96, cols, rng);
        PanelMatrix p(t);
        for (const auto& slice : slices) {
          const int r0 = slice[0], n = slice[1];  // not a structured binding: CAPTURE is a lambda
          CAPTURE(format_name(f));
          CAPTURE(cols);
          CAPTURE(T);
          CAPTURE(r0);
          CAPTURE(n);
          for (auto isa : {host_gemv::VectorIsa::kWidest, host_gemv::VectorIsa::kAvx2})
            CHECK(compare_panel_linear(t, p.view, r0, n, T, OutRound::kBF16, rng, pool, isa) == 0);
        }
      }
}

TEST_CASE("host linear on panel-packed weights: V4.1-sized GEMV and GEMM, threaded") {
  std::mt19937 rng(29);
  HostThreadPool& pool = HostThreadPool::global();
  for (WeightFormat f : kFormats)
    for (int T : {1, 5}) {
      HostTensor t = random_matrix(f, 1056, 5120, rng);
      PanelMatrix p(t);
      CAPTURE(format_name(f));
      CAPTURE(T);
      CHECK(compare_panel_linear(t, p.view, 0, 1056, T, OutRound::kBF16, rng, pool) == 0);
      CHECK(compare_panel_linear(t, p.view, 1024, 32, T, OutRound::kBF16, rng, pool) == 0);
    }
}

/// host_gemv::linear of T input rows (row stride x_stride) through view w, outputs [T, w.rows].
std::vector<float> run_linear(const float* x, int T, long x_stride, const MatrixView& w, HostThreadPool& pool,
                              host_gemv::VectorIsa isa) {
  std::vector<float> y(static_cast<size_t>(T) * w.rows, 7.0f);
  host_gemv::linear(x, T, x_stride, w, y.data(), w.rows, OutRound::kBF16, pool, isa);
  return y;
}

TEST_CASE("batched decode on panels (T = 2..17): every format and vector level bit-identical, each row as alone") {
  // the multi-row kernels (host/gemm_panels512.hpp with AVX-512: 16 rows a vector, up to 8 input
  // rows a pass, remainders 1..7; panels::linear_tile with AVX2): every output against the scalar
  // reference, and row-local: a row's outputs the same whatever the batch around it (reversed
  // order, alone as T = 1)
  std::mt19937 rng(53);
  HostThreadPool pool(2);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  const host_gemv::VectorIsa isas[] = {host_gemv::VectorIsa::kWidest, host_gemv::VectorIsa::kAvx512,
                                       host_gemv::VectorIsa::kAvx2};
  // non-finite, subnormal, signed-zero and huge inputs (fp8/fp4: a row with inf or NaN is NaN)
  const float specials[] = {NAN, INFINITY, -INFINITY, 0x1p-140f, -0x1p-130f, -0.0f, 0x1p100f, 0x1p-60f};
  for (WeightFormat f : kFormats)
    for (int cols : {6, 7, 33, 64, 70, 326})  // K tails inside a group and a 32-column block
      for (int rows : {40, 69}) {  // a 4-panel tile and a single panel; rows past the last panel
        if (f == WeightFormat::kFp4Block32 && cols % 2) continue;  // fp4 packs whole bytes (packable)
        HostTensor t = random_matrix(f, rows, cols, rng);
        PanelMatrix p(t);
        const MatrixView w = t.view();
        for (int T : {2, 3, 5, 8, 16, 17}) {
          const long x_stride = cols + 1;
          std::vector<float> x(static_cast<size_t>(T) * x_stride), reversed(x.size());
          for (auto& e : x) e = uni(rng);
          for (int r = 1; r < T; r += 3) x[r * x_stride + (r * 7) % cols] = specials[(r / 3) % 8];
          for (int r = 0; r < T; ++r)
            std::copy_n(x.begin() + r * x_stride, x_stride, reversed.begin() + (T - 1 - r) * x_stride);
          std::vector<float> ref(static_cast<size_t>(T) * rows);
          for (int r = 0; r < T; ++r)
            for (int n = 0; n < rows; ++n) ref[r * rows + n] = apply_round(w.dot(x.data() + r * x_stride, n), OutRound::kBF16);
          for (auto isa : isas) {
            CAPTURE(format_name(f));
            CAPTURE(cols);
            CAPTURE(rows);
            CAPTURE(T);
            CAPTURE(static_cast<int>(isa));
            const std::vector<float> fast = run_linear(x.data(), T, x_stride, p.view, pool, isa);
            const std::vector<float> back = run_linear(reversed.data(), T, x_stride, p.view, pool, isa);
            long bad = 0, moved = 0, alone_differs = 0;
            for (size_t i = 0; i < fast.size(); ++i) bad += !same_bits(fast[i], ref[i]);
            for (int r = 0; r < T; ++r)
              for (int n = 0; n < rows; ++n) moved += !same_bits(fast[r * rows + n], back[(T - 1 - r) * rows + n]);
            for (int r : {0, 1, T - 1}) {
              const std::vector<float> one = run_linear(x.data() + r * x_stride, 1, x_stride, p.view, pool, isa);
              for (int n = 0; n < rows; ++n) alone_differs += !same_bits(fast[r * rows + n], one[n]);
            }
            CHECK(bad == 0);
            CHECK(moved == 0);
            CHECK(alone_differs == 0);
          }
        }
      }
  // row slices starting on and off panel and tile boundaries, at batch sizes that leave a
  // remainder of rows per pass
  for (WeightFormat f : kFormats) {
    HostTensor t = random_matrix(f, 96, 100, rng);
    PanelMatrix p(t);
    const int slices[][2] = {{0, 96}, {8, 48}, {3, 29}, {16, 16}, {40, 56}};
    for (int T : {2, 5, 8, 13})
      for (const auto& slice : slices)
        for (auto isa : isas) {
          const int r0 = slice[0], n = slice[1];
          CAPTURE(format_name(f));
          CAPTURE(T);
          CAPTURE(r0);
          CAPTURE(n);
          CAPTURE(static_cast<int>(isa));
          CHECK(compare_panel_linear(t, p.view, r0, n, T, OutRound::kF32, rng, pool, isa) == 0);
        }
  }
}

namespace {

/// fp8 codes as trained weights have them: rarely subnormal (about 1 in 4096 codes kept subnormal,
/// spread evenly over the matrix, within pack's 1-in-512 limit), so the panel copy takes the
/// scaled-domain decoder; zeros, ±max and every exponent appear.
HostTensor fp8_trained_like(int rows, int cols, std::mt19937& rng) {
  HostTensor t = random_matrix(WeightFormat::kFp8Block32, rows, cols, rng);
  auto subnormal = [](uint8_t b) { return (b & 0x78) == 0 && (b & 0x07) != 0; };
  long n = 0;
  for (uint8_t b : t.payload) n += subnormal(b);
  const long budget = static_cast<long>(t.payload.size()) / 4096;
  const long every = budget > 0 ? std::max(1L, n / budget) : 1;  // keep one in `every`, `budget` at most
  long seen = 0, kept = 0;
  for (auto& b : t.payload)
    if (subnormal(b)) {
      if (seen++ % every == 0 && kept < budget) ++kept;
      else b |= 0x08;
    }
  return t;
}

/// compare_panel_linear with a caller-chosen single input row x (T = 1).
[[maybe_unused]] long compare_panel_gemv(const HostTensor& t, const MatrixView& p, const std::vector<float>& x, HostThreadPool& pool,
                        host_gemv::VectorIsa isa) {
  const MatrixView w = t.view();
  std::vector<float> fast(w.rows, 7.0f);
  host_gemv::linear(x.data(), 1, w.cols, p, fast.data(), w.rows, OutRound::kF32, pool, isa);
  long bad = 0;
  for (int n = 0; n < w.rows; ++n) bad += !same_bits(fast[n], w.dot(x.data(), n));
  return bad;
}

}  // namespace

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE("host fp8 panels, scaled-domain decoder: bit-identical, and every guard falls back") {
  // every check runs at each vector level this build has (AVX-512 BF16 dot products,
  // host/gemv_fp8dot512.hpp; AVX-512 multiply-adds, host/gemv_scaled512.hpp; AVX2 alone): the
  // decoders must give the same bits
  const host_gemv::VectorIsa isas[] = {host_gemv::VectorIsa::kWidest, host_gemv::VectorIsa::kAvx512,
                                       host_gemv::VectorIsa::kAvx2};
  std::mt19937 rng(37);
  HostThreadPool pool(2);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  // the multi-row fp8 tile's block sums both ways, whichever this CPU's tuning takes
  // (host/gemm_fp8dot512.hpp: dot products or multiply-adds, the same bits)
  auto both_sums = [](auto&& check) {
#if defined(DS41_HOST_AVX512_BF16)
    using host_gemv::gemm_fp8dot512::BlockSums;
    for (BlockSums m : {BlockSums::kDotProducts, BlockSums::kMultiplyAdds}) {
      CAPTURE(static_cast<int>(m));
      host_gemv::gemm_fp8dot512::block_sums_override() = m;
      check();
    }
    host_gemv::gemm_fp8dot512::block_sums_override() = BlockSums::kTuned;
#else
    check();
#endif
  };
  auto trained_like = [&](WeightFormat f, int rows, int cols) {
    return f == WeightFormat::kFp8Block32 ? fp8_trained_like(rows, cols, rng) : random_matrix(f, rows, cols, rng);
  };
  // fp4 runs the same checks on its table decoder (host/gemv_scaled.hpp says why it has no scaled one)
  const WeightFormat formats[] = {WeightFormat::kFp8Block32, WeightFormat::kFp4Block32};
  SUBCASE("chosen at pack time only for fp8 with rarely-subnormal codes") {
    CHECK(PanelMatrix(fp8_trained_like(64, 96, rng)).view.host_scaled_decode);
    HostTensor big_scale = fp8_trained_like(64, 96, rng);  // block scales multiply unscaled partials
    big_scale.scales[3] = 0x1p70f;
    CHECK(PanelMatrix(big_scale).view.host_scaled_decode);
    for (auto isa : isas)
      CHECK(compare_panel_linear(big_scale, PanelMatrix(big_scale).view, 0, 64, 1, OutRound::kF32, rng, pool, isa) == 0);
    CHECK_FALSE(PanelMatrix(random_matrix(WeightFormat::kFp8Block32, 64, 96, rng)).view.host_scaled_decode);  // ~5% subnormal
    CHECK_FALSE(PanelMatrix(random_matrix(WeightFormat::kFp4Block32, 64, 96, rng)).view.host_scaled_decode);
    CHECK_FALSE(PanelMatrix(random_matrix(WeightFormat::kBF16, 64, 96, rng)).view.host_scaled_decode);
  }
  SUBCASE("shapes: K tails inside a panel group and a 32-column block, partial tiles") {
    for (WeightFormat f : formats)
      for (int rows : {8, 33, 130})
        for (int cols : {1, 2, 3, 4, 6, 10, 30, 32, 38, 70, 326}) {
          if (f == WeightFormat::kFp4Block32 && cols % 2) continue;
          HostTensor t = trained_like(f, rows, cols);
          PanelMatrix p(t);
          REQUIRE(p.view.host_scaled_decode == (f == WeightFormat::kFp8Block32));
          std::vector<float> x(cols);
          for (auto& e : x) e = uni(rng);
          x[0] = -0.0f;
          CAPTURE(format_name(f));
          CAPTURE(rows);
          CAPTURE(cols);
          for (auto isa : isas) {
            CAPTURE(static_cast<int>(isa));
            CHECK(compare_panel_gemv(t, p.view, x, pool, isa) == 0);
            // T > 1: host/gemm_fp8dot512.hpp at the widest level, passes of 8 rows and remainders
            both_sums([&] {
              for (int T : {1, 3, 6, 11})
                CHECK(compare_panel_linear(t, p.view, 0, rows, T, OutRound::kBF16, rng, pool, isa) == 0);
            });
          }
        }
  }
  SUBCASE("row slices on and off panel boundaries (grouped wo_a views)") {
    HostTensor t = fp8_trained_like(96, 100, rng);
    PanelMatrix p(t);
    REQUIRE(p.view.host_scaled_decode);
    // {1, 95} and {8, 64}: tiles from an odd panel, so a 16-row vector's two panels (3 and 4)
    // lie in different 32-row scale blocks
    const int slices[][2] = {{0, 8}, {8, 8}, {32, 24}, {3, 5}, {5, 13}, {9, 40}, {1, 95}, {8, 64}, {16, 48}};
    for (const auto& slice : slices)
      for (auto isa : isas) {
        CAPTURE(slice[0]);
        CAPTURE(slice[1]);
        CAPTURE(static_cast<int>(isa));
        both_sums([&] {
          for (int T : {1, 2, 5})
            CHECK(compare_panel_linear(t, p.view, slice[0], slice[1], T, OutRound::kBF16, rng, pool, isa) == 0);
        });
      }
  }
  SUBCASE("V4.1-sized, threaded: whole matrices and slices from odd panels") {
    for (int cols : {1280, 5120 + 16}) {
      HostTensor t = fp8_trained_like(cols == 1280 ? 1056 : 264, cols, rng);
      PanelMatrix p(t);
      REQUIRE(p.view.host_scaled_decode);
      const int rows = static_cast<int>(t.shape[0]);
      HostThreadPool& global = HostThreadPool::global();
      for (auto isa : isas) {
        CAPTURE(cols);
        CAPTURE(static_cast<int>(isa));
        CHECK(compare_panel_linear(t, p.view, 0, rows, 1, OutRound::kBF16, rng, global, isa) == 0);
        CHECK(compare_panel_linear(t, p.view, 8, rows - 16, 1, OutRound::kBF16, rng, global, isa) == 0);
        CHECK(compare_panel_linear(t, p.view, rows - 40, 40, 1, OutRound::kF32, rng, global, isa) == 0);
        both_sums([&] {
          CHECK(compare_panel_linear(t, p.view, 0, rows, 8, OutRound::kBF16, rng, global, isa) == 0);
          CHECK(compare_panel_linear(t, p.view, 8, rows - 16, 7, OutRound::kBF16, rng, global, isa) == 0);
          CHECK(compare_panel_linear(t, p.view, 0, rows, 16, OutRound::kBF16, rng, global, isa) == 0);
        });
      }
    }
  }
  SUBCASE("inputs at and past the exact range's edges (in range: scaled; out: the table decoders)") {
    const float edges[] = {0x1p-57f, 0x1.000002p-57f, 0x1.fffffep-58f, 0x1p-100f, 0x1p-140f /* subnormal */,
                           0x1.fffffep61f, 0x1p62f, 0x1p100f, INFINITY, -INFINITY, NAN};
    for (WeightFormat f : formats) {
      HostTensor t = trained_like(f, 72, 200);
      PanelMatrix p(t);
      for (float e : edges) {
        std::vector<float> x(200);
        for (auto& v : x) v = uni(rng) * 0x1p-40f;  // small activations: products near the normal edge
        x[5] = e;
        x[77] = -e;
        CAPTURE(format_name(f));
        CAPTURE(e);
        for (auto isa : isas) CHECK(compare_panel_gemv(t, p.view, x, pool, isa) == 0);
        // the edge row between two ordinary rows (T = 3): the multi-row tiles take a call only
        // when every row's input is in range, else the whole call takes the float tile
        std::vector<float> batch(3 * 200);
        for (auto& v : batch) v = uni(rng);
        std::copy(x.begin(), x.end(), batch.begin() + 200);
        for (auto isa : isas)
          both_sums([&] {
            std::vector<float> y(3 * 72, 7.0f);
            host_gemv::linear(batch.data(), 3, 200, p.view, y.data(), 72, OutRound::kF32, pool, isa);
            long bad = 0;
            for (int r = 0; r < 3; ++r)
              for (int n = 0; n < 72; ++n) bad += !same_bits(y[r * 72 + n], t.view().dot(batch.data() + r * 200, n));
            CHECK(bad == 0);
          });
        // only the edge values nonzero: an out-of-range x taken by a scaled decoder would
        // underflow (tiny) or overflow (huge) there, and the outputs would differ
        std::vector<float> sparse(200, 0.0f);
        sparse[5] = e;
        sparse[77] = -0.75f * e;
        for (auto isa : isas) CHECK(compare_panel_gemv(t, p.view, sparse, pool, isa) == 0);
      }
    }
  }
  SUBCASE("a partial sum cancelling below 2^-126 in the scaled domain stays exact") {
    for (WeightFormat f : formats) {
      // row 0: x0·w - x1·w with x0 = x1·(1 + 2^-20): 2^-83 (fp8 w = 2^-6) or 2^-77 (fp4 w = 1);
      // scaled by 2^-60 that is an f32 subnormal
      HostTensor t = trained_like(f, 8, 2);
      if (f == WeightFormat::kFp8Block32) t.payload[0] = 0x08, t.payload[1] = 0x88;  // 2^-6, -2^-6
      else t.payload[0] = 0xA2;                                                      // 1, -1
      PanelMatrix p(t);
      REQUIRE(p.view.host_scaled_decode == (f == WeightFormat::kFp8Block32));
      const std::vector<float> x = {0x1.00001p-57f, 0x1p-57f};
      CAPTURE(format_name(f));
      for (auto isa : isas) CHECK(compare_panel_gemv(t, p.view, x, pool, isa) == 0);
      // with FTZ/DAZ set on the computing thread the table decoders run
      HostThreadPool inline_pool(1);  // runs on this thread, whose MXCSR is changed below
      const unsigned saved = _mm_getcsr();
      _mm_setcsr(saved | 0x8040u);
      long bad = 0;
      for (auto isa : isas) bad += compare_panel_gemv(t, p.view, x, inline_pool, isa);
      _mm_setcsr(saved);
      CHECK(bad == 0);
    }
  }
}
#endif

TEST_CASE("fp8 panels: pack() flags exactly the (panel, 32-column block)s holding a subnormal code") {
  std::mt19937 rng(53);
  for (int cols : {32, 100, 1280}) {
    HostTensor t = random_matrix(WeightFormat::kFp8Block32, 44, cols, rng);  // ~1 code in 18 subnormal
    for (auto& b : t.payload)  // most blocks clean, so that both flag values occur
      if ((b & 0x78) == 0 && (b & 0x07) != 0 && rng() % 8) b |= 0x08;
    PanelMatrix p(t);
    REQUIRE(p.view.host_subnormal_blocks != nullptr);
    const int kblocks = (cols + 31) / 32;
    long set = 0, bad = 0;
    for (int panel = 0; panel < 6; ++panel)
      for (int kb = 0; kb < kblocks; ++kb) {
        bool want = false;
        for (int r = 8 * panel; r < std::min(44, 8 * panel + 8); ++r)
          for (int k = 32 * kb; k < std::min(cols, 32 * kb + 32); ++k) {
            const uint8_t c = t.payload[static_cast<size_t>(r) * cols + k];
            want |= (c & 0x78) == 0 && (c & 0x07) != 0;
          }
        set += want;
        bad += (p.view.host_subnormal_blocks[panel * kblocks + kb] != 0) != want;
      }
    CAPTURE(cols);
    CHECK(bad == 0);
    CHECK(set > 0);
    CHECK(set < 6 * kblocks);
  }
  CHECK(PanelMatrix(random_matrix(WeightFormat::kFp4Block32, 16, 64, rng)).view.host_subnormal_blocks == nullptr);
}

#if defined(DS41_HOST_AVX512)
TEST_CASE("bf16 panels, T > 1: fused multiply-adds exactly where every product is exact, the same bits") {
  std::mt19937 rng(61);
  HostThreadPool pool(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // bf16-valued inputs: every product of two bf16 values has at most 16 significant bits
  auto bf16_rows = [&](long T, int K, float scale) {
    std::vector<float> x(static_cast<size_t>(T) * K);
    for (auto& v : x) v = bf16_round(normal(rng) * scale);
    return x;
  };
  // y = x·Wᵀ at every vector level against MatrixView::dot on the row-major original
  auto mismatches = [&](const HostTensor& t, const MatrixView& p, const std::vector<float>& x, long T) {
    const int rows = static_cast<int>(t.shape[0]), K = static_cast<int>(t.shape[1]);
    long bad = 0;
    auto check = [&](host_gemv::VectorIsa isa) {
      std::vector<float> y(static_cast<size_t>(T) * rows, 7.0f);
      host_gemv::linear(x.data(), T, K, p, y.data(), rows, OutRound::kF32, pool, isa);
      for (long r = 0; r < T; ++r)
        for (int n = 0; n < rows; ++n) bad += !same_bits(y[r * rows + n], t.view().dot(x.data() + r * K, n));
    };
#if defined(DS41_HOST_AVX512_BF16)
    // the widest level by dot products (host/gemm_bf16dot512.hpp) and by multiply-adds, on any CPU
    using host_gemv::gemm_fp8dot512::BlockSums;
    for (BlockSums m : {BlockSums::kDotProducts, BlockSums::kMultiplyAdds}) {
      host_gemv::gemm_fp8dot512::block_sums_override() = m;
      check(host_gemv::VectorIsa::kTuned);
    }
    host_gemv::gemm_fp8dot512::block_sums_override() = BlockSums::kTuned;
#else
    check(host_gemv::VectorIsa::kTuned);
#endif
    check(host_gemv::VectorIsa::kAvx512);
    check(host_gemv::VectorIsa::kAvx2);
    return bad;
  };
  SUBCASE("pack() keeps the range of |w|; non-finite weights leave it unknown") {
    HostTensor t = random_matrix(WeightFormat::kBF16, 24, 70, rng);  // |w| in [2^-4, 2^-2)
    auto* w = reinterpret_cast<uint16_t*>(t.payload.data());
    w[5] = 0x0000, w[9] = 0x8000, w[11] = 0x0001 /* bf16 subnormal, 2^-133 */, w[40] = 0xC180 /* -16 */;
    PanelMatrix p(t);
    CHECK(same_bits(p.view.host_bf16_abs_min, 0x1p-133f));
    CHECK(same_bits(p.view.host_bf16_abs_max, 16.0f));
    w[7] = 0x7F80;  // +inf
    PanelMatrix q(t);
    CHECK(q.view.host_bf16_abs_min == 0.0f);
    CHECK(q.view.host_bf16_abs_max == 0.0f);
  }
  SUBCASE("taken for ordinary inputs, declined at each edge, every output the reference's") {
    for (int K : {7, 16, 70, 326, 1024}) {
      HostTensor t = random_matrix(WeightFormat::kBF16, 40, K, rng);  // |w| < 2
      reinterpret_cast<uint16_t*>(t.payload.data())[3] = 0x7180;      // and one 2^100
      PanelMatrix p(t);
      REQUIRE(same_bits(p.view.host_bf16_abs_max, 0x1p100f));
      REQUIRE(p.view.host_bf16_abs_min > 0.0f);
      int e = 0;  // |w| >= 2^(e-1), the smallest below 2^e
      std::frexp(p.view.host_bf16_abs_min, &e);
      for (long T : {2L, 5L, 8L, 11L, 17L}) {
        CAPTURE(K);
        CAPTURE(T);
        std::vector<float> x = bf16_rows(T, K, 1.0f);
        x[0] = 0.0f, x[1] = -0.0f;
        CHECK(host_gemv::gemm512::bf16_products_exact(x.data(), T, K, K, p.view));
        CHECK(mismatches(t, p.view, x, T) == 0);
        std::vector<float> zero(static_cast<size_t>(T) * K, 0.0f);  // every product zero
        CHECK(host_gemv::gemm512::bf16_products_exact(zero.data(), T, K, K, p.view));
        CHECK(mismatches(t, p.view, zero, T) == 0);
        // each edge declines: a product below 2^-126 (with the smallest |w|), one reaching 2^128
        // (with the 2^100 weight), a value that is no bf16, inf, NaN
        const float edges[] = {std::ldexp(1.0f, -127 - e), 0x1p28f, 1.0f + 0x1p-20f, INFINITY, NAN};
        for (float e : edges) {
          CAPTURE(e);
          std::vector<float> y = x;
          y[static_cast<size_t>(T - 1) * K + K / 2] = e;
          CHECK_FALSE(host_gemv::gemm512::bf16_products_exact(y.data(), T, K, K, p.view));
          CHECK(mismatches(t, p.view, y, T) == 0);
        }
        // just inside: the smallest product at least 2^-126, the largest 2^127
        std::vector<float> y = x;
        y[K / 2] = std::ldexp(1.0f, -125 - e);
        y[static_cast<size_t>(T - 1) * K] = 0x1p27f;
        CHECK(host_gemv::gemm512::bf16_products_exact(y.data(), T, K, K, p.view));
        CHECK(mismatches(t, p.view, y, T) == 0);
      }
    }
  }
#if defined(DS41_HOST_AVX512_BF16)
  SUBCASE("dot products: taken where no partial sum can be subnormal; declined where one would be flushed") {
    using host_gemv::gemm_bf16dot512::sums_stay_normal;
    using host_gemv::gemm512::input_range;
    HostTensor t = random_matrix(WeightFormat::kBF16, 32, 64, rng);  // |w| in [2^-4, 2^-2)
    auto* w = reinterpret_cast<uint16_t*>(t.payload.data());
    for (int n = 0; n < 32; ++n) {  // every row: w[n][0] = 1, w[n][1] = -1, the rest 2^-4
      for (int k = 0; k < 64; ++k) w[n * 64 + k] = 0x3D80;
      w[n * 64] = 0x3F80, w[n * 64 + 1] = 0xBF80;
    }
    PanelMatrix p(t);
    REQUIRE(same_bits(p.view.host_bf16_abs_min, 0x1p-4f));
    const long T = 4;
    std::vector<float> x = bf16_rows(T, 64, 1.0f);
    CHECK(sums_stay_normal(input_range(x.data(), T, 64, 64), p.view));
    CHECK(mismatches(t, p.view, x, T) == 0);
    // (1 + 2^-7)·2^-122 - 2^-122 = 2^-129: both products exact and normal, their sum subnormal
    // (the reference keeps it, `vdpbf16ps` would flush it); ex + ew - 14 = -122 - 4 - 14 < -126
    for (long r = 0; r < T; ++r) {
      std::fill(x.begin() + r * 64, x.begin() + r * 64 + 64, 0.0f);
      x[r * 64] = 0x1.02p-122f, x[r * 64 + 1] = 0x1p-122f;
    }
    REQUIRE(host_gemv::gemm512::bf16_products_exact(input_range(x.data(), T, 64, 64), p.view));
    CHECK_FALSE(sums_stay_normal(input_range(x.data(), T, 64, 64), p.view));
    CHECK(mismatches(t, p.view, x, T) == 0);
    CHECK(same_bits(t.view().dot(x.data(), 0), 0x1p-129f));
    // the smallest inputs whose grain is 2^-126: taken, and exact
    for (long r = 0; r < T; ++r) x[r * 64] = 0x1.02p-108f, x[r * 64 + 1] = 0x1p-108f, x[r * 64 + 5] = 0x1p-108f;
    CHECK(sums_stay_normal(input_range(x.data(), T, 64, 64), p.view));
    CHECK(mismatches(t, p.view, x, T) == 0);
  }
#endif
  SUBCASE("inputs whose products round: the reference's bits on both paths") {
    // tiny inputs: products in the subnormal range round there, so the call multiplies and adds
    // apart; ordinary and huge ones take the fused path; all match the reference
    HostTensor t = random_matrix(WeightFormat::kBF16, 33, 200, rng);
    PanelMatrix p(t);
    for (float scale : {0x1p-124f, 0x1p-100f, 1.0f, 0x1p100f}) {
      CAPTURE(scale);
      const std::vector<float> x = bf16_rows(8, 200, scale);
      const bool exact = host_gemv::gemm512::bf16_products_exact(x.data(), 8, 200, 200, p.view);
      if (scale < 0x1p-120f) CHECK_FALSE(exact);
      if (scale >= 1.0f) CHECK(exact);
      CHECK(mismatches(t, p.view, x, 8) == 0);
    }
  }
}
#endif

TEST_CASE("fp4 panels: block scales stored as e8m0 bytes, the whole e8m0 range; other scales stay row-major") {
  std::mt19937 rng(59);
  HostThreadPool pool(2);
  // every e8m0 value but NaN, 2^-127 (byte 0, a subnormal float) and 2^127 among them, in rows the
  // vector tiles take (full panels) and rows the scalar path takes (the partial last panel). Row
  // r's 10 blocks take bytes 6r .. 6r + 9 (mod 255), so that each block's share of its row's sum
  // shows in the output (row 0: 2^-127 .. 2^-118)
  HostTensor t = random_matrix(WeightFormat::kFp4Block32, 45, 320, rng);
  for (int r = 0; r < 45; ++r)
    for (int kb = 0; kb < 10; ++kb) t.scales[static_cast<size_t>(r) * 10 + kb] = e8m0_to_f32(static_cast<uint8_t>((6 * r + kb) % 255));
  REQUIRE(t.scales[0] == std::ldexp(1.0f, -127));
  REQUIRE(t.scales[42 * 10 + 2] == std::ldexp(1.0f, 127));
  PanelMatrix p(t);
  REQUIRE(p.view.host_fp4_scales_e8m0 != nullptr);
  CHECK(p.view.scales == nullptr);
  long bad = 0;
  for (int r = 0; r < 45; ++r)
    for (int kb = 0; kb < 10; ++kb) bad += !same_bits(p.view.panel_scale(r, kb), t.scales[static_cast<size_t>(r) * 10 + kb]);
  CHECK(bad == 0);
  for (auto isa : {host_gemv::VectorIsa::kWidest, host_gemv::VectorIsa::kAvx2})
    for (int T : {1, 3}) CHECK(compare_panel_linear(t, p.view, 0, 45, T, OutRound::kBF16, rng, pool, isa) == 0);
  // stored scales one byte each after the 4-byte floats: the packed matrix is smaller
  CHECK(host_panels::packed_bytes(t.format, 45, 320) == host_panels::payload_bytes(t.format, 45, 320) + 48 * 10);
  // a scale e8m0 cannot hold keeps the matrix row-major, and upload leaves it as it is
  for (float bad_scale : {1.5f, 0.0f, -1.0f, std::ldexp(1.0f, -128), std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    HostTensor u = t;
    u.scales[17] = bad_scale;
    CAPTURE(bad_scale);
    CHECK_FALSE(host_panels::packable(u.view()));
    HostBuffer<uint8_t> payload;
    HostBuffer<float> scales;
    MatrixView out;
    CHECK_FALSE(HostBackend::upload_linear_weights(u.view(), payload, scales, out));
    if (std::isfinite(bad_scale)) CHECK(compare_linear(u, 1, OutRound::kBF16, rng, pool) == 0);
  }
}

#if defined(DS41_HOST_AVX512_BF16)
TEST_CASE("fp8 dot-product decoder: the CPU's vdpbf16ps, and which inputs prepare() lets through") {
  // informational: a CPU whose vdpbf16ps is not two FMAs (high half first) takes the
  // multiply-adds, and the bit-exactness checks above still hold
  MESSAGE("vdpbf16ps is two rounded FMAs here: " << host_gemv::fp8dot512::dot_is_two_fmas());
  HostBuffer<uint32_t> pairs;
  std::vector<float> xs(70);
  for (int k = 0; k < 70; ++k) xs[k] = std::ldexp(1.0f + static_cast<float>(k % 8) / 8, 60 - 9 + k % 17) * (k % 3 ? 1 : -1);
  xs[7] = 0.0f, xs[8] = -0.0f;
  REQUIRE(host_gemv::fp8dot512::prepare(xs.data(), 70, pairs));  // e4m3 values (and zeros) times 2^60
  for (int k = 0; k < 64; k += 2) {  // 64 = the whole blocks; the tail is the multiply-adds'
    uint32_t hi, lo;
    std::memcpy(&hi, &xs[k], 4);
    std::memcpy(&lo, &xs[k + 1], 4);
    CHECK(pairs.data()[k / 2] == ((hi & 0xFFFF0000u) | lo >> 16));
  }
  auto accepts = [&](int k, float v) {
    std::vector<float> y = xs;
    y[k] = v;
    return host_gemv::fp8dot512::prepare(y.data(), 70, pairs);
  };
  CHECK_FALSE(accepts(5, 0x1.01p70f));   // not a bf16: 9 significant bits
  CHECK_FALSE(accepts(40, 0x1p9f));      // x = 2^-51: products could land below 2^-126
  CHECK(accepts(40, 0x1p10f));           // x = 2^-50, the edge
  CHECK(accepts(40, -0x1.fep100f));      // a bf16 far up
  CHECK(accepts(66, 0x1.01p70f));        // in the K tail, which the dot products never read
}
#endif

TEST_CASE("Matrix<HostBackend>: Linear weights as panels, tables and fp8 with NaN codes row-major") {
  std::mt19937 rng(31);
  HostTensor bf16 = random_matrix(WeightFormat::kBF16, 20, 64, rng);
  CHECK(Matrix<HostBackend>(bf16).view().layout ==
        (host_gemv::kVectorised ? WeightLayout::kPanels8 : WeightLayout::kRowMajor));
  CHECK(Matrix<HostBackend>(bf16, MatrixUse::kTable).view().layout == WeightLayout::kRowMajor);
  HostTensor nan = random_matrix(WeightFormat::kFp8Block32, 40, 96, rng);
  nan.payload[7] = 0x7F;
  CHECK(Matrix<HostBackend>(nan).view().layout == WeightLayout::kRowMajor);
  // a reused Matrix (expert slots) takes the new contents whole
  Matrix<HostBackend> m(random_matrix(WeightFormat::kFp4Block32, 24, 64, rng));
  HostTensor next = random_matrix(WeightFormat::kFp4Block32, 24, 64, rng);
  m.assign(next);
  std::vector<float> x(64, 0.5f);
  for (int n = 0; n < 24; ++n) CHECK(same_bits(m.view().dot(x.data(), n), next.view().dot(x.data(), n)));
}

TEST_CASE("host linear: fp8 NaN codes give NaN exactly where the reference does") {
  std::mt19937 rng(3);
  HostThreadPool pool(2);
  HostTensor t = random_matrix(WeightFormat::kFp8Block32, 40, 96, rng, /*fp8_nan_codes=*/false);
  t.payload[5 * 96 + 40] = 0x7F;
  t.payload[33 * 96 + 3] = 0xFF;
  for (int T : {1, 4}) CHECK(compare_linear(t, T, OutRound::kBF16, rng, pool) == 0);
}

TEST_CASE("host linear: HostBackend::linear is the fast path") {
  std::mt19937 rng(5);
  HostTensor t = random_matrix(WeightFormat::kBF16, 100, 256, rng);
  std::vector<float> x(256), y(100);
  for (int k = 0; k < 256; ++k) x[k] = bf16_round(std::sin(0.3f * k));
  HostBackend::linear(x.data(), 1, 256, t.view(), y.data(), 100, OutRound::kBF16);
  for (int n = 0; n < 100; ++n) CHECK(same_bits(y[n], bf16_round(t.view().dot(x.data(), n))));
}

TEST_CASE("host linear: which kernel of the list takes a call, each with MatrixView::dot's bits") {
  // The AVX2 level's choices, the same on every AVX2 build (an AVX-512 build's wider kernels are
  // capped by the level); without AVX2 every call but GGUF blocks takes the scalar reference.
  std::mt19937 rng(39);
  HostThreadPool pool(2);
  const bool vec = host_gemv::kVectorised;
  auto expect = [&](const char* name) { return std::string(vec ? name : "scalar reference"); };
  // the name of the kernel linear() ran on w (the panel or row-major copy of t), and no mismatch
  auto taken = [&](const HostTensor& t, const MatrixView& w, int T, host_gemv::VectorIsa isa) {
    std::vector<float> x(static_cast<size_t>(T) * w.cols), y(static_cast<size_t>(T) * w.rows);
    std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
    for (auto& e : x) e = uni(rng);
    host_gemv::linear(x.data(), T, w.cols, w, y.data(), w.rows, OutRound::kF32, pool, isa);
    const std::string name = host_gemv::last_kernel();
    long bad = 0;
    for (int r = 0; r < T; ++r)
      for (int n = 0; n < w.rows; ++n) bad += !same_bits(y[r * w.rows + n], t.view().dot(x.data() + r * w.cols, n));
    CHECK_MESSAGE(bad == 0, name);
    return name;
  };
  const auto avx2 = host_gemv::VectorIsa::kAvx2;
  const HostTensor fp8 = fp8_trained_like(72, 256, rng), fp8_plain = random_matrix(WeightFormat::kFp8Block32, 72, 256, rng);
  const HostTensor fp4 = random_matrix(WeightFormat::kFp4Block32, 72, 256, rng);
  const HostTensor bf16 = random_matrix(WeightFormat::kBF16, 72, 256, rng), f32 = random_matrix(WeightFormat::kF32, 72, 256, rng);
  const HostTensor q4k = random_matrix(WeightFormat::kGgmlBlocks, 72, 256, rng);
  const PanelMatrix p8(fp8), p8_plain(fp8_plain), p4(fp4), pb(bf16);
  REQUIRE(p8.view.host_scaled_decode == vec);  // packed for the scaled decoder where it is built
  REQUIRE(!p8_plain.view.host_scaled_decode);  // random codes: subnormals beyond pack's limit
  CHECK(taken(fp8, p8.view, 1, avx2) == expect("fp8 scaled decode GEMV (AVX2)"));
  CHECK(taken(fp8, p8.view, 3, avx2) == expect("panel tiles (AVX2)"));
  CHECK(taken(fp8_plain, p8_plain.view, 1, avx2) == expect("panel tiles (AVX2)"));
  CHECK(taken(fp4, p4.view, 1, avx2) == expect("fp4 integer decode GEMV (AVX2)"));
  CHECK(taken(fp4, p4.view, 3, avx2) == expect("panel tiles (AVX2)"));
  CHECK(taken(bf16, pb.view, 1, avx2) == expect("panel tiles (AVX2)"));
  for (int T : {1, 3}) {
    CAPTURE(T);
    for (const HostTensor* t : {&f32, &bf16, &fp8_plain, &fp4}) CHECK(taken(*t, t->view(), T, avx2) == expect("row-major tiles (AVX2)"));
    CHECK(taken(q4k, q4k.view(), T, avx2) == "GGUF blocks");  // its own kernel, with or without AVX2
  }
  // kTuned, a few fp4 rows: one integer GEMV per row, unless the multi-row integer tile is built
#if defined(DS41_HOST_AVX512_VNNI)
  CHECK(taken(fp4, p4.view, 3, host_gemv::VectorIsa::kTuned) == "fp4 multi-row integer tile (AVX-512 VNNI)");
#else
  CHECK(taken(fp4, p4.view, 3, host_gemv::VectorIsa::kTuned) == expect("fp4 integer decode GEMV (AVX2)"));
#endif
}

TEST_CASE("fp8/fp4 Linear input: the vector act_quant gives act_quant_row's bits; non-finite rows give NaN outputs") {
  std::mt19937 rng(41);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 40);
  const int K = 32 * 40 + 13;  // a short tail block too
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(K);
    for (auto& v : x) v = bf16_round(gauss(rng) * std::ldexp(1.0f, exponent(rng) / 4));
    // edges: zeros of both signs, values on e4m3 rounding ties and in its subnormal range, an
    // all-tiny block (amax clamped to 1e-4), a block of huge values
    x[3] = -0.0f, x[4] = 0.0f;
    for (int k = 32; k < 64; ++k) x[k] = (k % 2 ? -1.0f : 1.0f) * 1e-7f * static_cast<float>(k);
    x[64] = 448.0f, x[65] = 0x1.3p-8f, x[66] = -0x1.1p0f, x[67] = 0x1.08p-6f;  // ties after scaling by 2^0
    for (int k = 96; k < 128; ++k) x[k] = 0x1p100f * gauss(rng);
    std::vector<float> q1(K), q2(K), s1(41), s2(41);
    act_quant_row(x.data(), K, q1.data(), s1.data());
    host_gemv::act_quant_row_fast(x.data(), K, q2.data(), s2.data());
    long bad = 0;
    for (int k = 0; k < K; ++k) bad += !same_bits(q1[k], q2[k]);
    for (int b = 0; b < 41; ++b) bad += !same_bits(s1[b], s2[b]);
#if defined(__AVX2__) && defined(__FMA__)
    // the AVX2 block on its own too (act_quant_row_fast takes the AVX-512 one where built)
    for (int b = 0; b < 40; ++b) {
      float q8[32], s8;
      if (!avx2::act_quant_block32(x.data() + 32 * b, q8, &s8)) continue;
      for (int k = 0; k < 32; ++k) bad += !same_bits(q1[32 * b + k], q8[k]);
      bad += !same_bits(s1[b], s8);
    }
#endif
    CHECK(bad == 0);
  }
  // inf or NaN in the input: every output of that row NaN, on every path (reference: NaN·w)
  HostThreadPool pool(2);
  for (WeightFormat f : {WeightFormat::kFp8Block32, WeightFormat::kFp4Block32}) {
    HostTensor t = random_matrix(f, 72, 160, rng);
    PanelMatrix p(t);
    for (float v : {INFINITY, NAN}) {
      std::vector<float> x(2 * 160);
      for (auto& e : x) e = bf16_round(gauss(rng));
      x[160 + 100] = v;  // row 1 only
      std::vector<float> y(2 * 72);
      for (const MatrixView& w : {t.view(), p.view}) {
        host_gemv::linear(x.data(), 2, 160, w, y.data(), 72, OutRound::kBF16, pool);
        long nan_row0 = 0, nan_row1 = 0;
        for (int n = 0; n < 72; ++n) nan_row0 += std::isnan(y[n]), nan_row1 += std::isnan(y[72 + n]);
        CAPTURE(format_name(f));
        CHECK(nan_row0 == 0);
        CHECK(nan_row1 == 72);
      }
    }
  }
}

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE("fp4 panels, integer block sums: taken where provably exact, the float path elsewhere, same bits") {
  std::mt19937 rng(43);
  std::normal_distribution<float> gauss(0.0f, 1.0f);
  HostThreadPool pool(2);
  // every check with the widest vectors this build has (AVX-512 + VNNI where compiled in,
  // host/gemv_fp4int512.hpp) and with AVX2 alone
  const auto bad_both = [&](const HostTensor& t, const MatrixView& p, const std::vector<float>& x) {
    return compare_panel_gemv(t, p, x, pool, host_gemv::VectorIsa::kWidest) +
           compare_panel_gemv(t, p, x, pool, host_gemv::VectorIsa::kAvx512) +
           compare_panel_gemv(t, p, x, pool, host_gemv::VectorIsa::kAvx2);
  };
  const int K = 32 * 12 + 16;  // 12 full blocks and a tail
  HostTensor t = random_matrix(WeightFormat::kFp4Block32, 130, K, rng);
  PanelMatrix p(t);
  long integer_blocks = 0, float_blocks = 0;
  std::vector<float> trials;  // every trial's row, for the multi-row check below
  for (int trial = 0; trial < 60; ++trial) {
    std::vector<float> x(K);
    for (auto& v : x) v = bf16_round(gauss(rng) * (trial % 3 == 0 ? 1e3f : 1.0f));
    if (trial % 2) {  // blocks a float sum could round: one value far below its block's largest
      x[32 * (trial % 12) + 5] = 1e-3f * x[32 * (trial % 12) + 6];
      x[40] = -0.0f;
    }
    std::vector<float> q(K), qs((K + 31) / 32);
    act_quant_row(x.data(), K, q.data(), qs.data());
    HostBuffer<uint32_t> words;
    HostBuffer<float> units;
    const host_gemv::fp4int::Planes planes = host_gemv::fp4int::prepare(q.data(), K, words, units);
    for (int b = 0; b < 12; ++b) (planes.block_unit[b] != 0.0f ? integer_blocks : float_blocks) += 1;
    CHECK(planes.block_unit[12] == 0.0f);  // the tail block is never summed in integers
    CAPTURE(trial);
    CHECK(bad_both(t, p.view, x) == 0);
    trials.insert(trials.end(), x.begin(), x.end());
  }
  CHECK(integer_blocks > 500);  // most blocks of normal activations qualify...
  CHECK(float_blocks > 0);      // ...and the exactness test turns some away
  // the same rows in batches (host/gemm_fp4int512.hpp with VNNI: one decoded weight vector for up
  // to 4 rows, blocks of some rows on the float path while the others sum in integers): every
  // output as the reference's, at T = 2..9 (passes of 4 and remainders) and both vector levels
  for (int T = 2; T <= 9; ++T)
    for (auto isa : {host_gemv::VectorIsa::kTuned, host_gemv::VectorIsa::kAvx512}) {
      const int rows = 130, first = (T * 7) % (60 - T);
      std::vector<float> y(static_cast<size_t>(T) * rows, 7.0f);
      host_gemv::linear(trials.data() + static_cast<size_t>(first) * K, T, K, p.view, y.data(), rows, OutRound::kF32,
                        pool, isa);
      long bad = 0;
      for (int r = 0; r < T; ++r)
        for (int n = 0; n < rows; ++n) bad += !same_bits(y[r * rows + n], t.view().dot(trials.data() + (first + r) * K, n));
      CAPTURE(T);
      CHECK(bad == 0);
    }
#if defined(DS41_HOST_AVX512_VNNI)
  // the multi-row tile's planes: a block whose xi >> t reaches 2^14 takes a third 7-bit plane
  // (a value ~1e-4 of its block's largest: q = 3·2^-6 beside 448 gives t = 3, top 28672); blocks
  // of every kind side by side in one batch, each row against the reference
  {
    const int T = 5;
    std::vector<float> xs(static_cast<size_t>(T) * K);
    for (auto& v : xs) v = bf16_round(gauss(rng));
    for (int r = 0; r < T; ++r)
      for (int b = r % 3; b < 12; b += 3) {
        xs[r * K + 32 * b] = 448.0f;
        xs[r * K + 32 * b + 9] = (r % 2 ? -1.0f : 1.0f) * 448.0f * 3.0f / 64.0f / 448.0f;  // q = ±3·2^-6
      }
    std::vector<float> q(K), qs((K + 31) / 32);
    std::vector<uint32_t> words(host_gemv::gemm_fp4int512::words_per_row(K));
    std::vector<float> units(13);
    std::vector<int32_t> bias(13);
    std::vector<uint8_t> planes(13);
    long three = 0, two = 0;
    for (int r = 0; r < T; ++r) {
      act_quant_row(xs.data() + r * K, K, q.data(), qs.data());
      host_gemv::gemm_fp4int512::prepare_row(q.data(), qs.data(), K, words.data(), units.data(), bias.data(),
                                             planes.data());
      for (int b = 0; b < 12; ++b)
        if (units[b] != 0.0f) (planes[b] == 3 ? three : two) += 1;
      CHECK(units[12] == 0.0f);  // the K tail
    }
    CHECK(three >= T * 4);  // every marked block
    CHECK(two > 0);
    std::vector<float> y(static_cast<size_t>(T) * 130, 7.0f);
    host_gemv::linear(xs.data(), T, K, p.view, y.data(), 130, OutRound::kF32, pool);
    long bad = 0;
    for (int r = 0; r < T; ++r)
      for (int n = 0; n < 130; ++n) bad += !same_bits(y[r * 130 + n], t.view().dot(xs.data() + r * K, n));
    CHECK(bad == 0);
  }
#endif
  // a block that fails the test, summed in integers anyway, would differ from the float sum: the
  // test is what keeps the bits (sum of |xi| far over 2^24 units with odd low bits)
  std::vector<float> x(K, 0.0f);
  for (int k = 0; k < 32; ++k) x[k] = 448.0f * (k % 2 ? 1 : -1);
  x[7] = 0x1p-9f * 3;  // odd, tiny
  std::vector<float> q(K), qs((K + 31) / 32);
  act_quant_row(x.data(), K, q.data(), qs.data());
  HostBuffer<uint32_t> words;
  HostBuffer<float> units;
  CHECK(host_gemv::fp4int::prepare(q.data(), K, words, units).block_unit[0] == 0.0f);
  CHECK(bad_both(t, p.view, x) == 0);
  // the sum bound alone: every xi fits two byte planes (t = 2) but Σ xi'·12 > 2^24. Row 0's K-order
  // float sum reaches 67200 (ulp 2^-7), rounds the product 11/256 there, then falls to 51072
  // (ulp 2^-8), where the integer sum would have kept the bit
  HostTensor e;
  e.shape = {8, 32};
  e.format = WeightFormat::kFp4Block32;
  e.payload.assign(8 * 16, 0);
  e.scales.assign(8, 1.0f);
  for (int k = 0; k < 32; ++k) {
    const uint8_t code = k < 25 ? 7 : k == 25 ? 1 : 15;  // +6 ... +0.5, then -6
    e.payload[k / 2] |= static_cast<uint8_t>(k % 2 ? code << 4 : code);
  }
  PanelMatrix ep(e);
  std::vector<float> xe(32, 448.0f);
  xe[25] = 11.0f / 128.0f;
  std::vector<float> qe(32), qse(1);
  act_quant_row(xe.data(), 32, qe.data(), qse.data());
  CHECK(host_gemv::fp4int::prepare(qe.data(), 32, words, units).block_unit[0] == 0.0f);
  CHECK(e.view().dot(xe.data(), 0) == 51072.046875f);  // the float order's rounding, not 51072.04296875
  CHECK(bad_both(e, ep.view, xe) == 0);
  // the int16 lane bound alone: t = 4, the top 448·2^9 >> 4 = 14336 < 2^16 and the sum bound holds,
  // but the 16 columns {0, 1, 4, 5} + 8g feed one 16-bit lane with 240 each: at weight +6 (w2 = 12)
  // the lane would sum 46080, past 32767, and wrap
  for (auto& b : e.payload) b = 0x77;  // code 7 (+6) in every nibble
  PanelMatrix six(e);
  std::vector<float> xl(32, 0.0f);
  for (int g = 0; g < 4; ++g)
    for (int c : {0, 1, 4, 5}) xl[8 * g + c] = 7.5f;  // e4m3, xi = 3840 = 240·2^4
  xl[2] = 448.0f;                                     // act_quant's scale 1: q = x
  xl[3] = 0.28125f;                                   // 9·2^-5: xi = 144, the lowest bit 2^4
  std::vector<float> ql(32), qsl(1);
  act_quant_row(xl.data(), 32, ql.data(), qsl.data());
  CHECK(qsl[0] == 1.0f);
  CHECK(host_gemv::fp4int::prepare(ql.data(), 32, words, units).block_unit[0] == 0.0f);
  CHECK(bad_both(e, six.view, xl) == 0);
}
#endif

TEST_CASE("thread pool: every item once, exceptions reach the caller, nested runs inline") {
  HostThreadPool pool(4);
  CHECK(pool.threads() == 4);
  for (long n : {0L, 1L, 5L, 1000L, 100003L}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.run(n, 7, [&](long b, long e) {
      for (long i = b; i < e; ++i) hits[i]++;
    });
    long wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
  CHECK_THROWS_AS(pool.run(100, 1, [](long b, long) {
    if (b == 37) throw std::runtime_error("item 37");
  }),
                  std::runtime_error);
  std::atomic<long> inner{0};
  pool.run(8, 1, [&](long, long) { pool.run(10, 1, [&](long b, long e) { inner += e - b; }); });
  CHECK(inner.load() == 80);
  // the pool keeps working after an exception
  std::atomic<long> sum{0};
  pool.run(64, 4, [&](long b, long e) { sum += e - b; });
  CHECK(sum.load() == 64);
  HostThreadPool single(1);
  long count = 0;
  single.run(50, 3, [&](long b, long e) { count += e - b; });
  CHECK(count == 50);
}

TEST_CASE("thread pool, run_owned: every item once, contiguous shares, late shares taken from the back") {
  HostThreadPool pool(3);
  for (long n : {0L, 1L, 2L, 5L, 100L, 100003L})
    for (long grain : {1L, 7L, 200L}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<long> bad_hint{0};
      pool.run_owned(n, grain, [&](long b, long e, long share_end) {
        bad_hint += !(b < e && e <= share_end && share_end <= n);
        for (long i = b; i < e; ++i) hits[i]++;
      });
      long wrong = 0;
      for (auto& h : hits) wrong += h.load() != 1;
      CAPTURE(n);
      CAPTURE(grain);
      CHECK(wrong == 0);
      CHECK(bad_hint.load() == 0);
    }
  // each thread takes its own share [n·t/3, n·(t+1)/3) from the front, chunk after chunk, and
  // such a chunk hints at least to its own end; other threads' chunks of it come from its back
  {
    const long n = 1000, grain = 9;
    std::mutex m;
    std::vector<std::array<long, 4>> chunks;  // thread, begin, end, share_end, in the order taken
    pool.run_owned(n, grain, [&](long b, long e, long share_end) {
      std::lock_guard<std::mutex> lock(m);
      chunks.push_back({HostThreadPool::thread_index(), b, e, share_end});
    });
    long next_front[3] = {0, n / 3, 2 * n / 3}, out_of_order = 0;
    for (const auto& [t, b, e, share_end] : chunks) {
      const long share = b >= 2 * n / 3 ? 2 : b >= n / 3;  // [0, 333), [333, 666), [666, 1000)
      if (share != t) continue;                               // taken from another's back
      out_of_order += b != next_front[t] || share_end < e;
      next_front[t] = e;
    }
    CHECK(out_of_order == 0);
  }
  // a thread that stalls in its first chunk (worker 1, whose share is [n/3, 2n/3)): the others
  // take the rest of its share from the back meanwhile, so it ends with that one chunk (or none,
  // when it woke after the others had done everything)
  const long n = 300;
  std::vector<int> taker(n, -1);
  pool.run_owned(n, 5, [&](long b, long e, long) {
    const int me = HostThreadPool::thread_index();
    for (long i = b; i < e; ++i) taker[i] = me;
    if (me == 1) std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  long by_stalled = 0;
  for (int t : taker) by_stalled += t == 1;
  CHECK(by_stalled <= 5);
  CHECK_THROWS_AS(pool.run_owned(100, 1, [](long b, long, long) {
    if (b == 37) throw std::runtime_error("item 37");
  }),
                  std::runtime_error);
  std::atomic<long> inner{0};
  pool.run_owned(8, 1, [&](long, long, long) {  // nested: inline
    pool.run_owned(10, 1, [&](long b, long e, long) { inner += e - b; });
  });
  CHECK(inner.load() == 80);
  std::atomic<long> sum{0};
  pool.run_owned(64, 4, [&](long b, long e, long) { sum += e - b; });  // still working after the exception
  CHECK(sum.load() == 64);
  HostThreadPool single(1);
  long count = 0;
  single.run_owned(50, 3, [&](long b, long e, long share_end) {  // inline, one call over everything
    count += (e - b) * (b == 0 && e == 50 && share_end == 50);
  });
  CHECK(count == 50);
}

TEST_CASE("HostBackend::for_each visits every item once, split or not") {
  for (long n : {3L, 63L, 64L, 5000L}) {
    std::vector<int> hits(static_cast<size_t>(n), 0);
    int* p = hits.data();
    HostBackend::for_each(n, [=](long i) { p[i] += 1; });
    long wrong = 0;
    for (int h : hits) wrong += h != 1;
    CHECK(wrong == 0);
  }
}

TEST_CASE("HostBackend::for_each_in_rows visits every (row, column) once with its own indices, split or not") {
  // shapes below and above the parallel threshold, chunks that start and end inside rows, one column
  for (const auto& shape : {std::pair{0L, 5L}, {3L, 0L}, {1L, 1L}, {7L, 9L}, {64L, 1L}, {3L, 5000L}, {1000L, 7L}}) {
    const long rows = shape.first, cols = shape.second;  // not a structured binding: clang 14 cannot capture one
    std::vector<long> seen(static_cast<size_t>(rows * cols), -1);
    std::vector<int> hits(static_cast<size_t>(rows * cols), 0);
    long* s = seen.data();
    int* h = hits.data();
    HostBackend::for_each_in_rows(rows, cols, [=](long r, long c) {
      s[r * cols + c] = r * 100000 + c;
      h[r * cols + c] += 1;
    });
    long wrong = 0;
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c) wrong += hits[r * cols + c] != 1 || seen[r * cols + c] != r * 100000 + c;
    CHECK(wrong == 0);
  }
}

TEST_CASE("HostBackend::for_each_with_scratch: every item once, no two running items share scratch") {
  for (bool heavy : {true, false})
    for (long n : {0L, 1L, 2L, 7L, 64L, 3000L}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<long> clashes{0};
      HostBackend::for_each_with_scratch<long>(n, 3, heavy, [&](long i, long* scratch) {
        hits[i]++;
        scratch[0] = i;  // an item owns its scratch until it returns: nobody else may write it
        for (int spin = 0; spin < 2000; ++spin) {
          if (scratch[0] != i) ++clashes;
          std::atomic_signal_fence(std::memory_order_seq_cst);
        }
        scratch[2] = i;
      });
      long wrong = 0;
      for (auto& h : hits) wrong += h.load() != 1;
      CAPTURE(heavy);
      CAPTURE(n);
      CHECK(wrong == 0);
      CHECK(clashes.load() == 0);
    }
  CHECK(HostThreadPool::thread_index() == 0);  // the test's thread is no worker
}

namespace {
/// The host backend as it was: scalar dot products, one thread.
struct ScalarHostBackend : HostBackend {
  static constexpr const char* kName = "host-scalar";
  template <class F>
  static void for_each(long n, F f) {
    for (long i = 0; i < n; ++i) f(i);
  }
  static void linear(const float* x, long rows, long x_stride, const MatrixView& w, float* y, long y_stride,
                     OutRound round) {
    host_gemv::linear_rows_scalar(x, nullptr, rows, x_stride, w, y, y_stride, round, 0, w.rows);
  }
};

template <class B>
testing::Tally run_tiny_golden() {
  const auto& g = testing::tiny_golden();
  Model<B> model(g.config, testing::tiny_weights());
  return testing::check_reports(golden::run(g, model));
}
}  // namespace

TEST_CASE("tiny golden: the fast host backend keeps 1006 passed, 1006 bit-identical, as the scalar one") {
  testing::Tally fast = run_tiny_golden<HostBackend>();
  CHECK(fast.failed == 0);
  CHECK(fast.passed == 1006);
  CHECK(fast.exact == 1006);
  testing::Tally scalar = run_tiny_golden<ScalarHostBackend>();
  CHECK(scalar.passed == fast.passed);
  CHECK(scalar.exact == fast.exact);
}

// ---------------------------------------------------------------------------------------------
// Components' host loops (issue 6): restructured for speed, the same bits as the per-element
// formula the device runs.

TEST_CASE("engram gather: the host row dequantiser gives the per-element formula's bits") {
  // every code once, scale 1: bf16(e4m3) is exact, so this checks the decode itself, NaN included
  {
    std::vector<uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[c] = static_cast<uint8_t>(c);
    std::vector<float> scales(8, 1.0f), out(256);
    engram_host::dequant_row(codes.data(), scales.data(), 256, out.data());
    for (int c = 0; c < 256; ++c) {
      CAPTURE(c);
      const float ref = e4m3_decode(static_cast<uint8_t>(c));
      if ((c & 0x7F) == 0x7F) CHECK(std::isnan(out[c]));
      CHECK(f32_bits(out[c]) == f32_bits(ref));
    }
  }
  // random rows and scales (pow2 and not, huge: overflow to inf, tiny: subnormal products), widths
  // with and without a part the 8-wide path leaves to the scalar tail
  std::mt19937 rng(61);
  std::uniform_int_distribution<int> byte(0, 255), expo(-140, 120);
  std::uniform_real_distribution<float> uni(0.5f, 2.0f);
  for (int hd : {8, 32, 45, 64, 256, 263}) {
    CAPTURE(hd);
    const int nb = (hd + 31) / 32;
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<uint8_t> c(hd);
      for (auto& v : c) v = static_cast<uint8_t>(byte(rng));
      std::vector<float> sc(nb), out(hd);
      for (auto& v : sc) v = (rep % 2 ? uni(rng) : 1.0f) * std::ldexp(1.0f, expo(rng));
      engram_host::dequant_row(c.data(), sc.data(), hd, out.data());
      for (int d = 0; d < hd; ++d) {
        const float ref = bf16_round(e4m3_decode(c[d]) * sc[d / 32]);
        if (f32_bits(out[d]) != f32_bits(ref)) {
          CAPTURE(d);
          CAPTURE(static_cast<int>(c[d]));
          CHECK(f32_bits(out[d]) == f32_bits(ref));
        }
      }
    }
  }
}

TEST_CASE("hc_post: the host expand_post gives the per-element formula's bits") {
  std::mt19937 rng(62);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  std::uniform_int_distribution<int> pick(0, 15);
  auto value = [&]() {  // some exact zeros of either sign (0 + -0 = +0 matters), otherwise random
    const int k = pick(rng);
    return k == 0 ? 0.0f : k == 1 ? -0.0f : uni(rng);
  };
  struct Shape {
    long T;
    int hc, dim;
  };
  for (Shape sh : {Shape{1, 4, 64}, Shape{23, 4, 64}, Shape{3, 4, 5120}, Shape{5, 4, 700}, Shape{2, 1, 1030},
                   Shape{7, 2, 33}, Shape{4, 3, 512}, Shape{1, 4, 1}}) {
    const long T = sh.T;
    const int hc = sh.hc, dim = sh.dim;
    CAPTURE(T);
    CAPTURE(hc);
    CAPTURE(dim);
    std::vector<float> x(T * dim), res(T * hc * dim), post(T * hc), comb(T * hc * hc), out(T * hc * dim, -1.0f);
    for (auto* v : {&x, &res, &post, &comb})
      for (auto& e : *v) e = value();
    HighwayT<HostBackend>::expand_post(x.data(), res.data(), post.data(), comb.data(), T, hc, dim, out.data());
    long bad = 0;
    for (long e = 0; e < T * hc * dim; ++e) {  // the formula the device runs, one element at a time
      const long t = e / (static_cast<long>(hc) * dim);
      const int j = static_cast<int>((e / dim) % hc);
      const long d = e % dim;
      float acc = 0.0f;
      for (int i = 0; i < hc; ++i) acc += comb[(t * hc + i) * hc + j] * res[(t * hc + i) * dim + d];
      const float ref = bf16_round(post[t * hc + j] * x[t * dim + d] + acc);
      bad += f32_bits(out[e]) != f32_bits(ref);
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("indexer scores: the host's 8 keys side by side give index_score_entry's bits") {
  std::mt19937 rng(61);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  for (int heads : {1, 3, 4, 13, 32})  // 8 heads at once, then 4, then single ones
    for (int hd : {8, 13, 128})
      for (long nk : {1L, 8L, 13L, 40L}) {
        std::vector<float> q(static_cast<size_t>(heads) * hd), w(heads), keys(static_cast<size_t>(nk) * hd);
        for (auto& v : q) v = uni(rng);
        for (auto& v : w) v = bf16_round(uni(rng));
        for (auto& v : keys) v = uni(rng);
        if (nk > 3) keys[2 * hd] = NAN;  // a NaN key: ReLU of NaN is 0 in the reference's compare
        for (bool small : {false, true}) {
          std::vector<float> fast(nk, 7.0f);
          for (long j0 = 0; j0 < nk; j0 += 8) index_scores_host(q.data(), w.data(), keys.data(), j0, nk, heads, hd, small, fast.data());
          CAPTURE(heads);
          CAPTURE(hd);
          CAPTURE(nk);
          CAPTURE(small);
          long bad = 0;
          for (long j = 0; j < nk; ++j)
            bad += !same_bits(fast[j], index_score_entry(q.data(), w.data(), keys.data() + j * hd, heads, hd, small));
          CHECK(bad == 0);
        }
      }
}
