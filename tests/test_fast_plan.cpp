// The fast numerics policy's decode Linear without a GPU (cuda/fast_linear_plan.hpp): its plan
// covers every output row and every K chunk exactly once within the device's limits, at the
// DeepSeek-V4.1-Flash shapes and T = 1..16, and rejects what the kernel does not take; and a host
// emulation of the kernel's sums, built from the same DS41_HD atoms in the kernel's order (lanes,
// butterfly, splits), agrees with the exact MatrixView::dot within a reassociation bound.
// DS41_PRINT_PLANS=1 prints the plan of every V4.1 shape.
#include <doctest/doctest.h>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>
#include "ds41/backend/cuda/fast_linear_plan.hpp"
#include "ds41/core/quant.hpp"

namespace test_fast_plan {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

namespace {

constexpr int kH200Sms = 132;
constexpr size_t kH200SharedOptin = 227 * 1024;

struct Shape {
  WeightFormat f;
  int rows, cols;
  const char* what;
};
// The V4.1-Flash Linears the fast kernel takes (bench/bench_v41.hpp's layer_step_bytes: dim 5120,
// q_lora_rank 1280, 64 heads x 512, o_groups 8 x o_lora_rank 1024, indexer 32 heads x 128, 32
// routed experts x 2304, shared expert 2304), by format.
const Shape kV41Shapes[] = {
    {WeightFormat::kFp8Block32, 1280, 5120, "wq_a"},
    {WeightFormat::kFp8Block32, 32768, 1280, "wq_b"},
    {WeightFormat::kFp8Block32, 512, 5120, "wkv"},
    {WeightFormat::kFp8Block32, 5120, 8192, "wo_b"},
    {WeightFormat::kFp8Block32, 4096, 1280, "indexer wq_b"},
    {WeightFormat::kFp8Block32, 2304, 5120, "shared expert w1/w3"},
    {WeightFormat::kFp8Block32, 5120, 2304, "shared expert w2"},
    {WeightFormat::kFp4Block32, 2304, 5120, "routed expert w1/w3"},
    {WeightFormat::kFp4Block32, 5120, 2304, "routed expert w2"},
    {WeightFormat::kBF16, 8192, 4096, "wo_a (all groups)"},
    {WeightFormat::kBF16, 1024, 4096, "wo_a (one group)"},
    {WeightFormat::kBF16, 32, 5120, "router gate"},
    {WeightFormat::kBF16, 32, 5120, "indexer weights_proj"},
    {WeightFormat::kBF16, 128, 512, "indexer wk"},
};

/// Every output row, and every (K chunk, split) pair, reached exactly once by the kernel's
/// assignment: block bx, warp w, row r -> n = bx·8R + w·R + r (rows past rows_out idle); split s,
/// lane l -> chunks l, l + 32, ... of [slice_begin(s), slice_end(s)).
void check_covers(const FastLinearPlan& p) {
  std::vector<int> row_hits(p.rows_out, 0);
  for (long bx = 0; bx < p.grid_x; ++bx)
    for (int w = 0; w < p.warps; ++w)
      for (int r = 0; r < p.rows_per_warp; ++r) {
        const long n = bx * p.rows_per_block + static_cast<long>(w) * p.rows_per_warp + r;
        if (n < p.rows_out) ++row_hits[n];
      }
  long rows_wrong = 0;
  for (int h : row_hits) rows_wrong += h != 1;
  CHECK(rows_wrong == 0);
  const int chunks = p.cols / p.chunk_cols;
  std::vector<int> chunk_hits(chunks, 0);
  for (int s = 0; s < p.grid_y; ++s) {
    const int k0 = p.slice_begin(s), k1 = p.slice_end(s);
    REQUIRE(k1 > k0);
    CHECK(k0 % 32 == 0);  // a split never cuts a scale block (fp8: two chunks; fp4: one)
    CHECK((k1 - k0) % p.chunk_cols == 0);
    CHECK(row_major_row_bytes(p.format, k0) % 16 == 0);  // the slice's chunks stay 16-byte aligned
    CHECK(fast_shared_bytes(p.format, p.t_tile, k1 - k0) <= p.shared_bytes);
    const int nch = (k1 - k0) / p.chunk_cols;
    for (int lane = 0; lane < 32; ++lane)
      for (int c = lane; c < nch; c += 32) ++chunk_hits[k0 / p.chunk_cols + c];
  }
  long chunks_wrong = 0;
  for (int h : chunk_hits) chunks_wrong += h != 1;
  CHECK(chunks_wrong == 0);
}

void check_limits(const FastLinearPlan& p, size_t shared_limit) {
  CHECK(p.threads == p.warps * 32);
  CHECK(p.threads <= 1024);
  CHECK(p.shared_bytes <= shared_limit);
  CHECK(p.shared_bytes == fast_shared_bytes(p.format, p.t_tile, p.k_slice));
  CHECK(p.t_tile >= p.T);
  CHECK(p.t_tile <= kFastMaxRows);
  CHECK(p.rows_per_warp * p.t_tile <= 32);  // one lane stores each of a warp's outputs
  CHECK(p.grid_y == p.splits);
  CHECK(p.grid_y <= kFastMaxGridY);
  CHECK(p.grid_x <= 2147483647L);
  CHECK((p.k_slice == p.cols || p.k_slice % (32 * p.chunk_cols) == 0));
  // the workspace holds q, the scales and (with splits) the partials, in that order
  const size_t q = p.block_scaled() ? static_cast<size_t>(p.T) * p.cols : 0;
  const size_t sx = p.block_scaled() ? static_cast<size_t>(p.T) * (p.cols / 32) : 0;
  const size_t part = p.splits > 1 ? static_cast<size_t>(p.splits) * p.T * p.rows_out : 0;
  CHECK(p.workspace_floats == q + sx + part);
}

}  // namespace

TEST_CASE("fast plan: every V4.1 shape and T = 1..16 covers each row and K chunk once within the limits") {
  const bool print = std::getenv("DS41_PRINT_PLANS") != nullptr;
  long plans = 0;
  for (const Shape& s : kV41Shapes)
    for (int T = 1; T <= 16; ++T)
      for (size_t limit : {kFastSharedBudget, size_t{48 * 1024}, kH200SharedOptin}) {
        CAPTURE(std::string(s.what));
        CAPTURE(T);
        CAPTURE(limit);
        const FastLinearPlan p = plan_fast_linear(s.rows, s.cols, T, s.f, kH200Sms, limit);
        if (!p.ok && fast_shared_bytes(s.f, fast_t_tile(T), 32 * fast_chunk_cols(s.f)) > limit) {
          CHECK(limit < kFastSharedBudget);  // only a device with less shared memory than an H200's
          continue;                          // (one warp span of fp4 at 16 rows: 74 KB) falls back
        }
        REQUIRE_MESSAGE(p.ok, p.reason);
        check_limits(p, limit);
        check_covers(p);
        // splits only where the row blocks alone leave the device short of two blocks per
        // multiprocessor, or where shared memory forces them
        if (p.grid_x >= 2 * kH200Sms && fast_shared_bytes(s.f, p.t_tile, s.cols) <= limit) CHECK(p.splits == 1);
        ++plans;
        if (print && limit == kFastSharedBudget && (T == 1 || T == 2 || T == 4 || T == 8 || T == 16))
          std::printf("%-22s %-11s %5d x %5d T=%2d: tile %2d, %d rows/warp, %3d rows/block, grid %4ld x %2ld, k_slice %5d, "
                      "%6zu B shared, workspace %zu floats\n",
                      s.what, format_name(s.f), s.rows, s.cols, T, p.t_tile, p.rows_per_warp, p.rows_per_block, p.grid_x,
                      p.grid_y, p.k_slice, p.shared_bytes, p.workspace_floats);
      }
  MESSAGE(plans << " plans checked");
}

TEST_CASE("fast plan: other devices and odd shapes it takes still cover everything") {
  for (int sms : {1, 16, 78, 132, 1000})
    for (const Shape& s : {Shape{WeightFormat::kFp8Block32, 33, 96, "odd rows"}, Shape{WeightFormat::kFp4Block32, 7, 4128, "fp4"},
                           Shape{WeightFormat::kBF16, 1, 8, "one chunk"}, Shape{WeightFormat::kBF16, 100003, 264, "many rows"},
                           Shape{WeightFormat::kFp8Block32, 5, 65536, "long rows"}})
      for (int T : {1, 3, 5, 9, 16}) {
        CAPTURE(sms);
        CAPTURE(std::string(s.what));
        CAPTURE(T);
        const FastLinearPlan p = plan_fast_linear(s.rows, s.cols, T, s.f, sms);
        REQUIRE_MESSAGE(p.ok, p.reason);
        check_limits(p, kFastSharedBudget);
        check_covers(p);
      }
}

TEST_CASE("fast plan: rejects what the fast kernel does not take") {
  CHECK_FALSE(plan_fast_linear(1280, 5120, 17, WeightFormat::kFp8Block32, kH200Sms).ok);  // prefill
  CHECK_FALSE(plan_fast_linear(1280, 5120, 0, WeightFormat::kFp8Block32, kH200Sms).ok);
  CHECK_FALSE(plan_fast_linear(0, 5120, 1, WeightFormat::kBF16, kH200Sms).ok);
  CHECK_FALSE(plan_fast_linear(4096, 5120, 1, WeightFormat::kF32, kH200Sms).ok);           // f32: exact kernels
  CHECK_FALSE(plan_fast_linear(64, 40, 1, WeightFormat::kFp8Block32, kH200Sms).ok);        // short scale block
  CHECK_FALSE(plan_fast_linear(64, 48, 1, WeightFormat::kFp4Block32, kH200Sms).ok);
  CHECK_FALSE(plan_fast_linear(64, 36, 1, WeightFormat::kBF16, kH200Sms).ok);              // half a chunk
  CHECK_FALSE(plan_fast_linear(64, 5120, 16, WeightFormat::kFp4Block32, kH200Sms, 1024).ok);  // no span fits
  const FastLinearPlan p = plan_fast_linear(64, 5120, 17, WeightFormat::kBF16, kH200Sms);
  CHECK(std::strlen(p.reason) > 0);
}

TEST_CASE("fast atoms: e2m1 and e4m3 decoding by bit placement give the reference's values") {
  for (uint32_t c = 0; c < 16; ++c) {
    CAPTURE(c);
    CHECK(f32_bits(e2m1_decode_shift(c)) == f32_bits(e2m1_decode(static_cast<uint8_t>(c))));
  }
  for (uint32_t c = 0; c < 256; ++c) {
    FastChunk ch{{c << 8, 0, 0, 0}};  // byte 1 of word 0: column 1
    const float a = fast_chunk_value<WeightFormat::kFp8Block32>(ch, 1), b = e4m3_decode(static_cast<uint8_t>(c));
    CAPTURE(c);
    CHECK((f32_bits(a) == f32_bits(b) || (a != a && b != b)));
  }
  FastChunk nib{{0x76543210u, 0xFEDCBA98u, 0, 0}};
  for (int j = 0; j < 16; ++j) CHECK(fast_chunk_value<WeightFormat::kFp4Block32>(nib, j) == e2m1_decode(static_cast<uint8_t>(j)));
  FastChunk h{{0x3F80BF80u, 0, 0, 0}};  // bf16 -1 (low half), 1 (high half)
  CHECK(fast_chunk_value<WeightFormat::kBF16>(h, 0) == -1.0f);
  CHECK(fast_chunk_value<WeightFormat::kBF16>(h, 1) == 1.0f);
}

namespace {

struct HostMatrix {
  std::vector<uint8_t> payload;
  std::vector<float> scales;
  MatrixView view;
};

HostMatrix random_matrix(WeightFormat f, int rows, int cols, std::mt19937& rng) {
  HostMatrix m;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(1e-3f, 4e-2f);
  m.payload.resize(row_major_row_bytes(f, cols) * rows);
  if (f == WeightFormat::kBF16) {
    for (size_t i = 0; i < m.payload.size() / 2; ++i) {
      const uint16_t b = bf16_bits(normal(rng));
      std::memcpy(&m.payload[2 * i], &b, 2);
    }
  } else {
    for (auto& b : m.payload) {
      int v = byte(rng);
      if (f == WeightFormat::kFp8Block32 && (v & 0x7F) == 0x7F) v &= 0xFE;  // no NaN codes
      b = static_cast<uint8_t>(v);
    }
    m.scales.resize(static_cast<size_t>(f == WeightFormat::kFp8Block32 ? (rows + 31) / 32 : rows) * (cols / 32));
    for (auto& s : m.scales) s = scale(rng);
  }
  m.view.format = f;
  m.view.rows = rows;
  m.view.cols = cols;
  m.view.data = m.payload.data();
  m.view.scales = m.scales.empty() ? nullptr : m.scales.data();
  return m;
}

/// Output n of input row t as the fast kernel computes it (before the output rounding): `in` the
/// staged row (act_quant's q for fp8/fp4, x for bf16), `sx` its scales. Each lane's chunks in
/// order with the atoms, the lanes by the butterfly, then the splits in order.
template <WeightFormat F>
float emulate_fast(const FastLinearPlan& p, const MatrixView& w, const float* in, const float* sx, int n) {
  constexpr bool kScaled = F != WeightFormat::kBF16;
  const int cc = p.chunk_cols;
  std::vector<float> split_sums(p.splits);
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + row_major_row_bytes(F, w.cols) * n;
  for (int s = 0; s < p.splits; ++s) {
    const int k0 = p.slice_begin(s), nch = (p.slice_end(s) - k0) / cc;
    float lanes[32] = {};
    for (int lane = 0; lane < 32; ++lane)
      for (int c = lane; c < nch; c += 32) {
        const int kc = k0 + c * cc;  // the chunk's first column
        FastChunk ch;
        std::memcpy(ch.w, row + row_major_row_bytes(F, kc), 16);
        float part = kScaled ? 0.0f : lanes[lane];
        for (int g = 0; g < cc / 4; ++g) {
          float w4[4];
          for (int e = 0; e < 4; ++e) w4[e] = fast_chunk_value<F>(ch, 4 * g + e);
          part = fast_fma4(part, in + kc + 4 * g, w4);
        }
        lanes[lane] = kScaled ? fast_scaled_term(lanes[lane], part, sx[kc / 32], w.scale_row(n)[kc / 32]) : part;
      }
    split_sums[s] = fast_butterfly_sum(lanes);
  }
  return p.splits == 1 ? split_sums[0] : fast_split_sum(split_sums.data(), p.splits, 1);
}

/// Σ_k |term_k| of output n: the magnitude the reassociation bound scales with.
float abs_terms(const MatrixView& w, const float* in, const float* sx, int n) {
  double a = 0;
  for (int k = 0; k < w.cols; ++k)
    a += std::fabs(static_cast<double>(in[k]) * w.at(n, k) * (w.block_scaled() ? sx[k / 32] : 1.0f));
  return static_cast<float>(a);
}

template <WeightFormat F>
void check_emulation(int rows, int cols, int T, int sms, std::mt19937& rng) {
  CAPTURE(format_name(F));
  CAPTURE(rows);
  CAPTURE(cols);
  CAPTURE(T);
  CAPTURE(sms);
  const FastLinearPlan p = plan_fast_linear(rows, cols, T, F, sms);
  REQUIRE(p.ok);
  const HostMatrix m = random_matrix(F, rows, cols, rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(T) * cols), q(x.size()), sx(static_cast<size_t>(T) * (cols / 32));
  for (auto& v : x) v = bf16_round(normal(rng));  // activations reach Linears as bf16 values
  for (int t = 0; t < T; ++t) act_quant_row(x.data() + t * cols, cols, q.data() + t * cols, sx.data() + t * (cols / 32));
  const bool scaled = F != WeightFormat::kBF16;
  double num = 0, den = 0;
  long over = 0;
  for (int t = 0; t < T; ++t) {
    const float* xt = x.data() + static_cast<size_t>(t) * cols;
    const float* in = scaled ? q.data() + static_cast<size_t>(t) * cols : xt;
    const float* st = sx.data() + static_cast<size_t>(t) * (cols / 32);
    for (int n = 0; n < rows; ++n) {
      const float exact = m.view.dot(xt, n);  // the oracle: raw x, quantised inside
      const float fast = emulate_fast<F>(p, m.view, in, st, n);
      // Both are float32 evaluations of one sum of `cols` terms (exact products before the block
      // scales), so each is within (cols + 2)·2^-24·Σ|terms| of the exact real sum (recursive
      // summation's bound; an FMA only drops roundings; +2 for (part·s_x)·s_w), and they are
      // within twice that of each other, whatever the order.
      const double bound = 2.0 * (cols + 2) * 0x1p-24 * abs_terms(m.view, in, st, n) + 1e-30;
      if (std::fabs(static_cast<double>(fast) - exact) > bound) ++over;
      num += (static_cast<double>(fast) - exact) * (static_cast<double>(fast) - exact);
      den += static_cast<double>(exact) * exact;
    }
  }
  CHECK(over == 0);
  // and over the whole output, rel-L2 far below the policy's 1e-2 (typically ~1e-7: a few ulps)
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  CAPTURE(rel);
  CHECK(rel <= 1e-5);
}

}  // namespace

TEST_CASE("fast emulation: the kernel's sums agree with MatrixView::dot within the reassociation bound") {
  std::mt19937 rng(24);
  // V4.1 column counts, few rows (the sums are per row); sms chosen so that both one split and
  // several splits occur
  for (int T : {1, 3, 16}) {
    check_emulation<WeightFormat::kFp8Block32>(40, 5120, T, kH200Sms, rng);
    check_emulation<WeightFormat::kFp8Block32>(33, 8192, T, kH200Sms, rng);
    check_emulation<WeightFormat::kFp8Block32>(64, 1280, T, 1, rng);
    check_emulation<WeightFormat::kFp4Block32>(40, 5120, T, kH200Sms, rng);
    check_emulation<WeightFormat::kFp4Block32>(17, 2304, T, kH200Sms, rng);
    check_emulation<WeightFormat::kBF16>(40, 4096, T, kH200Sms, rng);
    check_emulation<WeightFormat::kBF16>(32, 5120, T, 1, rng);
    check_emulation<WeightFormat::kBF16>(8, 512, T, kH200Sms, rng);
  }
  // the plans above split K where the rows are few (this is what makes the splits' order matter)
  CHECK(plan_fast_linear(40, 5120, 1, WeightFormat::kFp8Block32, kH200Sms).splits > 1);
  CHECK(plan_fast_linear(64, 1280, 1, WeightFormat::kFp8Block32, 1).splits == 1);
}

}  // namespace test_fast_plan
