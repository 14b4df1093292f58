// The Linear over a GGUF file's blocks kept as stored (issue 39, items 1 and 3): HostBackend::linear
// on a WeightFormat::kGgmlBlocks matrix (host/gemv_ggml.hpp) must give, bit for bit, what the f32
// Linear gives on the blocks' values (the oracle: dequantize to f32, then today's path,
// which here is the host's own f32 panel kernels, code that shares nothing with the blocks' kernel),
// and what MatrixView::dot gives (the CUDA reference kernel's arithmetic). Random blocks of every
// kept type (random bytes, each f16 scale a random finite f16, subnormals and zero included), at
// awkward shapes (rows not a multiple of 8 or 32, one to 17 input rows, Q8_0 rows not a whole
// segment, F16 rows of any length) and at V4.1's.
#include <doctest/doctest.h>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>
#include "ds41/backend/host.hpp"
#include "ds41/model/weights.hpp"
#include "random_weights.hpp"

namespace test_ggml_linear {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

namespace {

/// rows x cols of `t` as a file holds them (tests/random_weights.hpp).
std::vector<uint8_t> random_blocks(GgmlType t, long rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  return testing::random_ggml_blocks(t, rows, cols, rng);
}

std::vector<float> random_input(long n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

/// How many outputs of a and b differ in their bits; the first one described in `first`.
long differing(const std::vector<float>& a, const std::vector<float>& b, std::string& first) {
  long n = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    uint32_t x, y;
    std::memcpy(&x, &a[i], 4), std::memcpy(&y, &b[i], 4);
    if (x != y && n++ == 0) first = "output " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " + std::to_string(b[i]);
  }
  return n;
}

constexpr const auto& kKept = testing::kKeptGgmlTypes;

/// The kept Linear, the f32 Linear on the values and MatrixView::dot agree at (rows, cols, T).
/// Inputs at the ends of float's range (the ternary types' factor path, gemv_ggml.hpp's
/// products_normal): kHuge, a zero and one value near float's largest in each row, whose products
/// with the larger scales overflow (0·(x·d) would be NaN where x·0 is 0); kTiny, whole rows below
/// 2^-100, whose products and sums lie below the normal range (2·(x·d) then differs from x·(2·d)).
enum class Extremes { kNone, kHuge, kTiny };
void check_shape(GgmlType t, long rows, int cols, long T, OutRound round, uint64_t seed, Extremes extremes = Extremes::kNone) {
  const std::string what = std::string(ggml_type_info(t).name) + " " + std::to_string(rows) + "x" +
                           std::to_string(cols) + " T=" + std::to_string(T) +
                           (extremes == Extremes::kHuge ? " huge" : extremes == Extremes::kTiny ? " tiny" : "");
  CAPTURE(what);
  const HostTensor kept = HostTensor::from_ggml_blocks({rows, cols}, t, random_blocks(t, rows, cols, seed));
  const Matrix<HostBackend> mk(kept), mf(HostTensor::from_f32({rows, cols}, kept.to_f32()));
  REQUIRE(mk.view().format == WeightFormat::kGgmlBlocks);
  // the file's bytes, no more (panels: the last 8-row panel's missing rows as zero blocks)
  const long stored_rows = mk.view().layout == WeightLayout::kPanels8 ? (rows + 7) / 8 * 8 : rows;
  CHECK(mk.payload.size() == static_cast<size_t>(stored_rows * ggml_row_bytes(t, cols)));
  std::vector<float> x = random_input(T * cols, seed + 1);
  for (long r = 0; r < T && extremes != Extremes::kNone; ++r) {
    float* xr = x.data() + r * cols;
    if (extremes == Extremes::kHuge) xr[11] = 0.0f, xr[13] = 0x1.ep127f;  // overflows with |d| >= 1.07
    else
      for (int k = 0; k < cols; ++k) xr[k] *= 0x1p-130f;  // x·d below 2^-126 for |d| < 8: every random scale
  }
  std::vector<float> yk(static_cast<size_t>(T * rows)), yf(yk.size()), yd(yk.size());
  HostBackend::linear(x.data(), T, cols, mk.view(), yk.data(), rows, round);
  HostBackend::linear(x.data(), T, cols, mf.view(), yf.data(), rows, round);
  for (long r = 0; r < T; ++r)
    for (long n = 0; n < rows; ++n)
      yd[r * rows + n] = apply_round(mk.view().dot(x.data() + r * cols, static_cast<int>(n)), round);
  std::string first;
  CHECK_MESSAGE(differing(yk, yf, first) == 0, "kept vs f32 Linear: ", first);
  CHECK_MESSAGE(differing(yd, yf, first) == 0, "MatrixView::dot vs f32 Linear: ", first);
  // the AVX2 kernel where the build has AVX-512 (whose T > 1 tiles apply 16-lane vectors): the same bits
  std::vector<float> ya(yk.size());
  host_gemv::linear(x.data(), T, cols, mk.view(), ya.data(), rows, round, HostThreadPool::global(),
                    host_gemv::VectorIsa::kAvx2);
  CHECK_MESSAGE(differing(ya, yf, first) == 0, "kept (AVX2 kernels) vs f32 Linear: ", first);
  // a row slice that starts inside a panel (wo_a's groups, an fp8-free slice anywhere)
  if (rows > 13) {
    const int r0 = 5, nr = static_cast<int>(rows) - 13;
    std::vector<float> sk(static_cast<size_t>(T * nr)), sf(sk.size());
    HostBackend::linear(x.data(), T, cols, mk.view().row_slice(r0, nr), sk.data(), nr, round);
    HostBackend::linear(x.data(), T, cols, mf.view().row_slice(r0, nr), sf.data(), nr, round);
    CHECK_MESSAGE(differing(sk, sf, first) == 0, "kept vs f32 Linear, rows from 5: ", first);
  }
}

}  // namespace

TEST_CASE("ggml linear: kept blocks give the f32 Linear's bits on their values, awkward shapes") {
  uint64_t seed = 39;
  for (GgmlType t : kKept) {
    const int be = ggml_block_elems(t) == 1 ? 1 : ggml_block_elems(t);
    const int k1 = t == GgmlType::kF16 ? 77 : be == 32 ? 96 : 256;  // F16: any length
    const int k2 = t == GgmlType::kF16 ? 517 : be == 32 ? 544 : 768;  // 32-value blocks: 2 segments + 1 block
    REQUIRE(k1 % be == 0);
    for (const auto& [rows, cols, T] : {std::tuple<long, int, long>{5, k1, 1}, {37, k1, 2}, {64, k2, 1}, {72, k2, 3},
                                        {41, k2, 17}, {96, k1, 16}}) {
      check_shape(t, rows, cols, T, OutRound::kF32, ++seed);
    }
    check_shape(t, 40, k2, 4, OutRound::kBF16, ++seed);
  }
}

TEST_CASE("ggml linear: kept blocks at V4.1 shapes, the decode GEMV and a 16-row tile") {
  // wq_a [1280, 5120] and an expert's w2 [5120, 2304]: the pool splits their rows between threads
  uint64_t seed = 4100;
  for (GgmlType t : kKept) {
    check_shape(t, 1280, 5120, 1, OutRound::kBF16, ++seed);
    check_shape(t, 512, 2304, 16, OutRound::kF32, ++seed);
  }
}

TEST_CASE("ggml linear: inputs at the ends of float's range give the f32 Linear's bits") {
  // the decode GEMV's 32-row tiles (TQ1_0's and TQ2_0's codes as factors only where every x·d is
  // normal or zero: gemv_ggml.hpp's products_normal), and a multi-row tile
  uint64_t seed = 4141;
  for (GgmlType t : kKept) {
    const int cols = t == GgmlType::kF16 ? 520 : ggml_block_elems(t) == 32 ? 544 : 768;
    for (Extremes e : {Extremes::kHuge, Extremes::kTiny}) {
      check_shape(t, 64, cols, 1, OutRound::kF32, ++seed, e);
      check_shape(t, 40, cols, 3, OutRound::kF32, ++seed, e);
    }
  }
}

TEST_CASE("ggml linear: the view's element, row slice and widening agree with the values") {
  for (GgmlType t : kKept) {
    const int cols = t == GgmlType::kF16 ? 40 : 256;
    const HostTensor kept = HostTensor::from_ggml_blocks({9, cols}, t, random_blocks(t, 9, cols, 7));
    const std::vector<float> v = kept.to_f32();
    std::vector<float> row(static_cast<size_t>(cols));
    host_ggml::decode_segment(t, kept.payload.data(), cols, row.data());  // row 0 by the kernel's decoder
    const MatrixView view = kept.view(), slice = view.row_slice(4, 3);
    std::string first;
    CHECK(differing(row, std::vector<float>(v.begin(), v.begin() + cols), first) == 0);
    long bad = 0;
    for (int n = 0; n < 9; ++n)
      for (int k = 0; k < cols; ++k) bad += f32_bits(view.at(n, k)) != f32_bits(v[static_cast<size_t>(n) * cols + k]);
    for (int n = 0; n < 3; ++n)
      for (int k = 0; k < cols; ++k) bad += f32_bits(slice.at(n, k)) != f32_bits(v[static_cast<size_t>(n + 4) * cols + k]);
    CHECK(bad == 0);
    const HostTensor wide = HostTensor(kept).widened();
    CHECK(wide.format == WeightFormat::kF32);
    CHECK(wide.to_f32() == v);
  }
}

TEST_CASE("ggml linear: the host's 8-row panels give every row's block back, byte for byte") {
  for (GgmlType t : kKept) {
    if (!ggml_panel_type(t)) continue;  // IQ2_XXS stays row-major
    const std::string name = ggml_type_info(t).name;
    CAPTURE(name);
    const int bb = ggml_block_bytes(t);
    const std::vector<uint8_t> b = random_blocks(t, 8, ggml_block_elems(t), 99);
    const uint8_t* rows[8];
    for (int i = 0; i < 8; ++i) rows[i] = b.data() + static_cast<long>(i) * bb;
    std::vector<uint8_t> packed(static_cast<size_t>(ggml_panel_block_bytes(t))), back(static_cast<size_t>(bb));
    ggml_panel_pack(t, rows, packed.data());
    long bad = 0;
    for (int i = 0; i < 8; ++i) {
      ggml_panel_unpack(t, packed.data(), i, back.data());
      bad += std::memcmp(back.data(), rows[i], static_cast<size_t>(bb)) != 0;
    }
    CHECK(bad == 0);
    // every bit of the block is placed somewhere: a pack of the blocks with one byte flipped differs
    std::vector<uint8_t> flipped = b, packed2(packed.size());
    for (int o = 0; o < bb; ++o) {
      flipped[static_cast<size_t>(3 * bb + o)] ^= 0x81;
      const uint8_t* rows2[8];
      for (int i = 0; i < 8; ++i) rows2[i] = flipped.data() + static_cast<long>(i) * bb;
      ggml_panel_pack(t, rows2, packed2.data());
      bad += packed2 == packed;
      flipped[static_cast<size_t>(3 * bb + o)] ^= 0x81;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("ggml linear: a matrix of blocks is refused when its bytes do not make the shape") {
  CHECK_THROWS_WITH_AS(HostTensor::from_ggml_blocks({2, 256}, GgmlType::kQ4_K, std::vector<uint8_t>(287)),
                       doctest::Contains("do not make a matrix"), ds41::Error);
  CHECK_THROWS_AS(HostTensor::from_ggml_blocks({2, 100}, GgmlType::kQ4_K, std::vector<uint8_t>(288)), ds41::Error);
  CHECK_THROWS_AS(HostTensor::from_ggml_blocks({2, 256}, GgmlType::kMXFP4, std::vector<uint8_t>(34 * 8)), ds41::Error);
}

}  // namespace test_ggml_linear
