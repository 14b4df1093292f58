// torch.topk's choice among tied scores (issue 42): core/topk.hpp's torch_topk_row and the paths the
// model takes through it, against vectors torch 1.13 itself made (tests/data/topk/make_topk_vectors.py,
// Debian bookworm's python3-torch, GCC 12's libstdc++): every index in torch's order, bit for bit.
#include <doctest/doctest.h>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>
#include "ds41/backend/host.hpp"
#include "ds41/core/compress_math.hpp"
#include "ds41/core/topk.hpp"
#include "ds41/testing/golden.hpp"
#include "ds41/model/model.hpp"
#include "device_topk_rule.hpp"
#include "nine_sequences.hpp"

namespace test_topk {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;

namespace {

/// One torch.topk call of model.py on one row, as the generator recorded it.
struct TopkVector {
  std::string kind;  // "router" (f32, sorted), "candidate" (bf16, sorted), "indexer" (bf16, sorted=False)
  bool bf16 = false, sorted = true;
  int n = 0, k = 0;
  std::vector<float> values;
  std::vector<int> indices;              // torch.topk(...).indices, torch's order
  std::vector<uint32_t> out_bits;        // torch.topk(...).values, as bit patterns of the dtype
  std::vector<int> sorted_indices;       // indexer: .indices.sort(dim=-1).values
};

std::vector<TopkVector> load_vectors() {
  const std::string path = std::string(DS41_TOPK_DATA) + "/topk_vectors.json";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  REQUIRE(doc.at("torch").get<std::string>().rfind("1.13", 0) == 0);
  std::vector<TopkVector> out;
  for (const auto& j : doc.at("vectors")) {
    TopkVector v;
    v.kind = j.at("kind").get<std::string>();
    v.bf16 = j.at("dtype").get<std::string>() == "bf16";
    v.sorted = j.at("sorted").get<bool>();
    v.n = j.at("n").get<int>();
    v.k = j.at("k").get<int>();
    for (const auto& b : j.at("values")) {
      const auto bits = b.get<uint32_t>();
      v.values.push_back(v.bf16 ? bf16_to_f32(static_cast<uint16_t>(bits)) : bits_f32(bits));
    }
    v.indices = j.at("indices").get<std::vector<int>>();
    v.out_bits = j.at("out_values").get<std::vector<uint32_t>>();
    if (j.contains("sorted_indices")) v.sorted_indices = j.at("sorted_indices").get<std::vector<int>>();
    REQUIRE(static_cast<int>(v.values.size()) == v.n);
    REQUIRE(static_cast<int>(v.indices.size()) == v.k);
    out.push_back(std::move(v));
  }
  return out;
}

const std::vector<TopkVector>& vectors() {
  static const std::vector<TopkVector> v = load_vectors();
  return v;
}

/// A value's bit pattern in the vector's dtype (torch writes NaN as a quiet NaN of either width).
uint32_t bits_of(float x, bool bf16) {
  if (bf16) return is_nan(x) ? 0x7FC0u : (f32_bits(x) >> 16);
  return f32_bits(x);
}
uint32_t canonical(uint32_t bits, bool bf16) {
  const bool nan = bf16 ? ((bits & 0x7F80u) == 0x7F80u && (bits & 0x7Fu)) : std::isnan(bits_f32(bits));
  return nan ? (bf16 ? 0x7FC0u : 0x7FC00000u) : bits;
}

/// What model.py keeps from the call: the router the order, the candidate blocks the set, the
/// indexer the set sorted by position.
std::vector<int> what_counts(const TopkVector& v, std::vector<int> idx) {
  if (v.kind != "router") std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace

TEST_CASE("torch_topk_row: torch 1.13's indices, order and values on every tie-heavy vector") {
  const auto& all = vectors();
  REQUIRE(all.size() >= 400);
  long partial = 0, select = 0, ties_at_boundary = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const TopkVector& v = all[i];
    CAPTURE(i);
    CAPTURE(v.kind);
    CAPTURE(v.n);
    CAPTURE(v.k);
    std::vector<int> idx(v.k);
    std::vector<float> val(v.k);
    std::vector<TopkEntry> scratch(v.n);
    torch_topk_row(v.values.data(), v.n, v.k, v.sorted, idx.data(), val.data(), scratch.data());
    CHECK(idx == v.indices);
    for (int j = 0; j < v.k; ++j) CHECK(bits_of(val[j], v.bf16) == canonical(v.out_bits[j], v.bf16));
    (static_cast<long long>(v.k) * 64 <= v.n ? partial : select) += 1;
    // a tie that decides membership: the k-th value also occurs outside the top k
    if (v.k < v.n) {
      const float kth = v.values[v.indices[v.k - 1]];
      int equal = 0;
      for (float x : v.values) equal += (x == kth || (is_nan(x) && is_nan(kth)));
      int inside = 0;
      for (int j : v.indices) inside += (v.values[j] == kth || (is_nan(v.values[j]) && is_nan(kth)));
      ties_at_boundary += equal > inside;
    }
  }
  MESSAGE(all.size(), " vectors: ", partial, " through partial_sort (k * 64 <= n), ", select,
          " through nth_element; ", ties_at_boundary, " with the k-th value tied outside the top k");
  CHECK(partial >= 50);
  CHECK(select >= 50);
  CHECK(ties_at_boundary >= 100);
}

TEST_CASE("the model's paths take torch's choice: router, candidate blocks, indexer") {
  for (const TopkVector& v : vectors()) {
    CAPTURE(v.kind);
    CAPTURE(v.n);
    CAPTURE(v.k);
    if (v.kind == "router" || v.kind == "candidate") {
      // MoeT::route and candidate_blocks_row: reference_topk_row, sorted
      std::vector<int> idx(v.k);
      reference_topk_row(v.values.data(), v.n, v.k, true, idx.data(), nullptr);
      CHECK(idx == v.indices);
    } else {
      // Indexer: HostBackend::topk_rows (torch's unsorted order), then the position sort
      std::vector<int32_t> raw(v.k);
      HostBackend::topk_rows(v.values.data(), 1, v.n, v.k, raw.data());
      CHECK(std::vector<int>(raw.begin(), raw.end()) == v.indices);
      std::vector<int32_t> sel(v.k);
      index_topk_row(v.values.data(), v.n, v.k, v.n, 0, sel.data());
      CHECK(std::vector<int>(sel.begin(), sel.end()) == v.sorted_indices);
    }
  }
}

TEST_CASE("candidate_blocks_row keeps torch's blocks when block maxima tie") {
  // blocks of 2 over 8 positions: maxima 1, 1, 1, 1 with the newest block (3) pinned; top 2 of 4.
  // torch.topk(2) of [1, 1, 1, inf] (4 blocks: 2 * 64 > 4, nth_element) keeps blocks 3 and 2
  // (the vectors cover this path at length; here the mask it expands to)
  const float s[] = {1, 0, 1, 0, 1, 0, 1, 0};
  float blocks[4];
  int idx[2];
  int32_t mask[8];
  candidate_blocks_row(s, 8, 8, 2, 2, blocks, idx, nullptr, mask);
  std::vector<float> b(blocks, blocks + 4);
  std::vector<int> want(2);
  std::vector<TopkEntry> scratch(4);
  torch_topk_row(b.data(), 4, 2, true, want.data(), nullptr, scratch.data());
  CHECK(want[0] == 3);
  for (int j = 0; j < 8; ++j) CHECK(mask[j] == ((j / 2 == want[0] || j / 2 == want[1]) ? 1 : 0));
}

TEST_CASE("the lowest-index rule (topk_row, the device's order) fails on these vectors") {
  // the rule ds41 used before issue 42; counted both strictly (indices in torch's order) and by
  // what model.py keeps (router: order; candidate blocks: the set; indexer: the set by position)
  long strict = 0, kept = 0;
  for (const TopkVector& v : vectors()) {
    std::vector<int> idx(v.k);
    topk_row(v.values.data(), v.n, v.k, idx.data(), nullptr);
    strict += idx != v.indices;
    kept += what_counts(v, idx) != what_counts(v, v.indices);
  }
  MESSAGE("the lowest-index rule differs from torch on ", strict, " of ", vectors().size(),
          " vectors (indices in torch's order), on ", kept, " in what model.py keeps");
  CHECK(strict >= 200);
  CHECK(kept >= 100);
}

TEST_CASE("torch_topk_row: k = 0 writes nothing, k = n keeps every index once, NaN first") {
  const float v[] = {1.0f, NAN, -INFINITY, 1.0f, INFINITY};
  int idx[5] = {-7, -7, -7, -7, -7};
  TopkEntry scratch[5];
  torch_topk_row(v, 5, 0, true, idx, nullptr, scratch);
  CHECK(idx[0] == -7);
  torch_topk_row(v, 5, 5, true, idx, nullptr, scratch);
  CHECK(idx[0] == 1);  // NaN before +inf, as torch (numpy's convention)
  CHECK(idx[1] == 4);
  std::vector<int> seen(idx, idx + 5);
  std::sort(seen.begin(), seen.end());
  CHECK(seen == std::vector<int>{0, 1, 2, 3, 4});
}

// ---------------------------------------------------------------------------- one source, both backends
// core/stdlib_select.hpp performs libstdc++'s steps itself (so that the device gives torch's answer):
// against the standard library on tie-heavy rows, every entry point, every position of the result.
namespace {

/// Rows whose values come from a few levels (ties everywhere), with NaN, infinities and both zeros.
std::vector<TopkEntry> tie_heavy_row(std::mt19937& rng, int n) {
  static const float levels[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 2.0f, 3.0f};
  const int used = 2 + static_cast<int>(rng() % 9);
  const bool specials = rng() % 3 == 0;
  std::vector<TopkEntry> row(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int l = static_cast<int>(rng() % static_cast<unsigned>(used));
    row[i] = {specials ? levels[l] : levels[3 + l % 7], i};
  }
  return row;
}

bool same_order(const std::vector<TopkEntry>& a, const std::vector<TopkEntry>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].index != b[i].index) return false;
  return a.size() == b.size();
}

}  // namespace

#if defined(__GLIBCXX__)
TEST_CASE("stdlib_select: libstdc++'s partial_sort, nth_element and sort, step for step, on tie-heavy rows") {
  std::mt19937 rng(4242);
  const auto less = [](const TopkEntry& a, const TopkEntry& b) { return torch_topk_before(a, b); };
  std::vector<int> sizes;
  for (int n = 0; n <= 70; ++n) sizes.push_back(n);
  for (int n : {100, 127, 128, 129, 255, 256, 257, 600, 1000, 4097, 20000}) sizes.push_back(n);
  long cases = 0;
  for (int n : sizes)
    for (int rep = 0; rep < (n < 100 ? 12 : 4); ++rep) {
      const auto row = tie_heavy_row(rng, n);
      const long k = n ? 1 + static_cast<long>(rng() % static_cast<unsigned>(n)) : 0;
      CAPTURE(n);
      CAPTURE(k);
      {
        auto mine = row, want = row;
        stdlib_select::partial_sort(mine.data(), k, n, less);
        std::partial_sort(want.begin(), want.begin() + k, want.end(), less);
        CHECK(same_order(mine, want));
      }
      if (n > 0) {
        auto mine = row, want = row;
        stdlib_select::nth_element(mine.data(), k - 1, n, less);
        std::nth_element(want.begin(), want.begin() + (k - 1), want.end(), less);
        CHECK(same_order(mine, want));
      }
      {
        auto mine = row, want = row;
        stdlib_select::sort(mine.data(), n, less);
        std::sort(want.begin(), want.end(), less);
        CHECK(same_order(mine, want));
      }
      ++cases;
    }
  // sorted rows and reversed ones drive introsort/introselect to their depth limits (heap paths)
  for (int n : {33, 200, 5000}) {
    std::vector<TopkEntry> up(static_cast<size_t>(n)), organ(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      up[i] = {static_cast<float>(i), i};
      organ[i] = {static_cast<float>(i < n / 2 ? i : n - i), i};
    }
    for (const auto& row : {up, organ}) {
      auto a = row, b = row;
      stdlib_select::sort(a.data(), n, less);
      std::sort(b.begin(), b.end(), less);
      CHECK(same_order(a, b));
      auto c = row, d = row;
      stdlib_select::nth_element(c.data(), n / 3, n, less);
      std::nth_element(d.begin(), d.begin() + n / 3, d.end(), less);
      CHECK(same_order(c, d));
    }
  }
  MESSAGE(cases, " rows x 3 algorithms compared with libstdc++");
}
#endif

/// CudaBackend::topk_rows's rule, on the host: the radix order (descending topk_order_key), the
/// first k, and torch_topk_row for a row where equal scores straddle the k-th place.
struct HostWithDeviceTopk : HostBackend {
  static bool redo_tied_rows;
  static void topk_rows(const float* v, long rows, int n, int k, int32_t* idx) {
    for (long r = 0; r < rows; ++r) testing::device_topk_row(v + r * n, n, k, redo_tied_rows, idx + r * k);
  }
};
bool HostWithDeviceTopk::redo_tied_rows = true;

TEST_CASE("the device's topk_rows rule keeps torch's set on every vector, and the radix order alone does not") {
  long differs_without_redo = 0, indexer = 0;
  for (const TopkVector& v : vectors()) {
    if (v.kind != "indexer") continue;
    ++indexer;
    CAPTURE(v.n);
    CAPTURE(v.k);
    std::vector<int32_t> got(v.k);
    HostWithDeviceTopk::redo_tied_rows = true;
    HostWithDeviceTopk::topk_rows(v.values.data(), 1, v.n, v.k, got.data());
    std::sort(got.begin(), got.end());
    CHECK(std::vector<int>(got.begin(), got.end()) == v.sorted_indices);
    HostWithDeviceTopk::redo_tied_rows = false;
    HostWithDeviceTopk::topk_rows(v.values.data(), 1, v.n, v.k, got.data());
    std::sort(got.begin(), got.end());
    differs_without_redo += std::vector<int>(got.begin(), got.end()) != v.sorted_indices;
  }
  HostWithDeviceTopk::redo_tied_rows = true;
  MESSAGE(indexer, " indexer vectors; the radix order alone misses torch's set on ", differs_without_redo);
  CHECK(differs_without_redo > 0);
}

TEST_CASE("nine sequences through the device's topk_rows rule give the host's logits (a host test of the device)") {
  // the tiny golden's model on shifted tokens: short contexts whose indexer rows straddle the k-th
  // place with equal (-inf and other) scores; the device run of 2026-12-04 (docs/device/) differed
  // from the host on 24 of 54 steps with the radix order alone
  const auto g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  const WeightSet w = golden::regenerate_weights(g);
  Model<HostBackend> host(g.config, w);
  Model<HostWithDeviceTopk> dev(g.config, w);
  const testing::NineSequences nine(g);
  const auto want = nine.alone(host);
  long steps = 0, differ_redo = 0, differ_plain = 0;
  for (bool redo : {true, false}) {
    HostWithDeviceTopk::redo_tied_rows = redo;
    const auto got = nine.alone(dev);
    for (int q = 0; q < testing::NineSequences::kSeqs; ++q)
      for (size_t i = 0; i < want[q].size(); ++i) {
        const auto &la = want[q][i], &lb = got[q][i];
        const bool same = la.size() == lb.size() && std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)) == 0;
        (redo ? differ_redo : differ_plain) += !same;
        steps += redo;
      }
  }
  HostWithDeviceTopk::redo_tied_rows = true;
  MESSAGE(steps, " steps: ", differ_redo, " differ with the tied rows redone, ", differ_plain, " with the radix order alone");
  CHECK(differ_redo == 0);
  CHECK(differ_plain > 0);  // the case is exercised: the rule matters here
}

}  // namespace test_topk
