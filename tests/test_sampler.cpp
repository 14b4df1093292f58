// The sampler (ds41/text/sampler.hpp): torch.argmax's greedy rule, the exact support of top-k and
// top-p, a seeded stream that a separate Python implementation reproduces, and draw frequencies
// against the target distribution (chi-square).
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>
#include "ds41/text/sampler.hpp"

namespace test_sampler {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using ds41::text::Sampler;
using ds41::text::SamplerOptions;

namespace {
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Sampler make(double t, int k = 0, double p = 1.0, uint64_t seed = 0) { return Sampler(SamplerOptions{t, k, p, seed}); }

std::set<int32_t> support(const Sampler& s, const std::vector<float>& logits) {
  std::set<int32_t> ids;
  for (const auto& [id, prob] : s.distribution(logits)) ids.insert(id);
  return ids;
}

// the ids drawn in n draws
std::set<int32_t> drawn(Sampler s, const std::vector<float>& logits, int n) {
  std::set<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.insert(s.sample(logits));
  return ids;
}

// softmax((l - max) / t) restricted to `ids`, in long double with std::exp: an independent
// reference for the probabilities
std::vector<long double> target(const std::vector<float>& logits, double t, const std::vector<int32_t>& ids) {
  long double m = -INFINITY, z = 0;
  for (int32_t i : ids) m = std::max<long double>(m, logits[static_cast<size_t>(i)]);
  std::vector<long double> p;
  for (int32_t i : ids) p.push_back(std::exp((static_cast<long double>(logits[static_cast<size_t>(i)]) - m) / t));
  for (long double v : p) z += v;
  for (long double& v : p) v /= z;
  return p;
}

// Pearson's statistic of `counts` against probabilities `p` over n draws
double chi_square(const std::vector<long>& counts, const std::vector<long double>& p, long n) {
  double x = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = static_cast<double>(p[i] * n);
    const double o = static_cast<double>(counts[i]);
    x += (o - e) * (o - e) / e;
  }
  return x;
}

// the non-centrality a wrong sampler drawing from q would add to the statistic: E[X] ≈ df + λ
double noncentrality(const std::vector<long double>& q, const std::vector<long double>& p, long n) {
  double l = 0;
  for (size_t i = 0; i < p.size(); ++i) l += static_cast<double>(n * (q[i] - p[i]) * (q[i] - p[i]) / p[i]);
  return l;
}
}  // namespace

TEST_CASE("sampler: options are validated") {
  CHECK_THROWS_AS(make(-0.5), ds41::Error);
  CHECK_THROWS_AS(make(std::nan("")), ds41::Error);
  CHECK_THROWS_AS(make(INFINITY), ds41::Error);
  CHECK_THROWS_AS(make(1.0, -1), ds41::Error);
  CHECK_THROWS_AS(make(1.0, 0, 0.0), ds41::Error);
  CHECK_THROWS_AS(make(1.0, 0, 1.5), ds41::Error);
  CHECK_THROWS_AS(make(1.0, 0, std::nan("")), ds41::Error);
  CHECK_NOTHROW(make(0.0, 0, 1e-9));
}

TEST_CASE("sampler: greedy is torch.argmax (first maximum; NaN is the maximum)") {
  auto g = make(0.0);
  CHECK(g.sample(std::vector<float>{1, 3, 2}) == 1);
  CHECK(g.sample(std::vector<float>{3, 1, 3, 3}) == 0);  // ties: the first
  CHECK(g.sample(std::vector<float>{-1, 2, 2}) == 1);
  CHECK(g.sample(std::vector<float>{1, kNaN, 5, kNaN}) == 1);  // the first NaN, however large the rest
  CHECK(g.sample(std::vector<float>{kNaN, 1}) == 0);
  CHECK(g.sample(std::vector<float>{-kInf, kInf, kInf}) == 1);
  CHECK(g.sample(std::vector<float>{-kInf, -kInf}) == 0);  // torch.argmax of all -inf: 0
  CHECK(g.sample(std::vector<float>{7}) == 0);
  CHECK_THROWS_AS(g.sample(std::vector<float>{}), ds41::Error);
  // greedy ignores top-k/top-p and the seed
  CHECK(make(0.0, 1, 0.1, 99).sample(std::vector<float>{0, 0, 4, 1}) == 2);
}

TEST_CASE("sampler: bad logits give one clear error when sampling") {
  auto s = make(1.0);
  CHECK_THROWS_WITH_AS(s.sample(std::vector<float>{}), "Sampler: empty logits", ds41::Error);
  CHECK_THROWS_WITH_AS(s.sample(std::vector<float>{-kInf, -kInf}), doctest::Contains("all 2 logits are -inf"), ds41::Error);
  CHECK_THROWS_WITH_AS(s.sample(std::vector<float>{0, kNaN}), doctest::Contains("logit 1 is NaN"), ds41::Error);
  CHECK_THROWS_WITH_AS(s.sample(std::vector<float>{0, kInf}), doctest::Contains("logit 1 is +inf"), ds41::Error);
}

TEST_CASE("sampler: deterministic_exp agrees with exp to a few ulp") {
  double worst = 0;
  for (double x = 0.0; x > -745.0; x -= 0.0137) {
    const double ref = std::exp(x);
    if (ref < 1e-300) break;  // subnormal results: relative error is meaningless there
    worst = std::max(worst, std::fabs(ds41::text::deterministic_exp(x) - ref) / ref);
  }
  CHECK(worst < 4 * std::numeric_limits<double>::epsilon());
  CHECK(ds41::text::deterministic_exp(0.0) == 1.0);
  CHECK(ds41::text::deterministic_exp(-800.0) == 0.0);
  CHECK(ds41::text::deterministic_exp(-INFINITY) == 0.0);
}

TEST_CASE("sampler: SplitMix64 is Vigna's reference stream") {
  // splitmix64.c (prng.di.unimi.it) with x = 0; the same values from a Python transcription
  ds41::text::SplitMix64 r(0);
  CHECK(r.next() == 0xe220a8397b1dcdafULL);
  CHECK(r.next() == 0x6e789e6aa1b965f4ULL);
  CHECK(r.next() == 0x06c45d188009454fULL);
  ds41::text::SplitMix64 u(1);
  for (int i = 0; i < 1000; ++i) {
    const double v = u.uniform();
    REQUIRE((v >= 0.0 && v < 1.0));
  }
}

TEST_CASE("sampler: top-k keeps the k largest, ties with the k-th included (HF TopKLogitsWarper)") {
  const std::vector<float> l = {1, 3, 3, 2, -kInf, 0};
  CHECK(support(make(1.0, 1), l) == std::set<int32_t>{1, 2});  // the 1st largest is tied
  CHECK(support(make(1.0, 2), l) == std::set<int32_t>{1, 2});
  CHECK(support(make(1.0, 3), l) == std::set<int32_t>{1, 2, 3});
  CHECK(support(make(1.0, 4), l) == std::set<int32_t>{0, 1, 2, 3});
  CHECK(support(make(1.0, 5), l) == std::set<int32_t>{0, 1, 2, 3, 5});  // -inf is never kept
  CHECK(support(make(1.0, 50), l) == std::set<int32_t>{0, 1, 2, 3, 5});
  CHECK(support(make(1.0, 0), l) == std::set<int32_t>{0, 1, 2, 3, 5});
  CHECK(support(make(1.0, 1), std::vector<float>{5, 5, 5, 1}) == std::set<int32_t>{0, 1, 2});
  // what sample() draws is exactly that set (p >= 0.05 each: 3000 draws miss none)
  CHECK(drawn(make(2.0, 3, 1.0, 5), l, 3000) == std::set<int32_t>{1, 2, 3});
  CHECK(drawn(make(1.0, 0, 1.0, 6), l, 3000) == std::set<int32_t>{0, 1, 2, 3, 5});
}

TEST_CASE("sampler: top-p keeps the smallest most-probable prefix reaching p (HF TopPLogitsWarper)") {
  // probabilities 0.5, 0.3, 0.15, 0.05 (as logs); the cut points stay clear of float rounding
  const std::vector<float> l = {std::log(0.3f), std::log(0.05f), std::log(0.5f), std::log(0.15f)};
  CHECK(support(make(1.0, 0, 1e-9), l) == std::set<int32_t>{2});  // at least one
  CHECK(support(make(1.0, 0, 0.4), l) == std::set<int32_t>{2});
  CHECK(support(make(1.0, 0, 0.6), l) == std::set<int32_t>{0, 2});
  CHECK(support(make(1.0, 0, 0.85), l) == std::set<int32_t>{0, 2, 3});
  CHECK(support(make(1.0, 0, 0.96), l) == std::set<int32_t>{0, 1, 2, 3});
  CHECK(support(make(1.0, 0, 1.0), l) == std::set<int32_t>{0, 1, 2, 3});
  // exact boundary: four equal tokens, p = 0.5: the mass before the third is 0.5, not < 0.5; equal
  // probabilities go lower id first
  CHECK(support(make(1.0, 0, 0.5), std::vector<float>{2, 2, 2, 2}) == std::set<int32_t>{0, 1});
  CHECK(support(make(1.0, 0, 0.5000001), std::vector<float>{2, 2, 2, 2}) == std::set<int32_t>{0, 1, 2});
  // temperature sharpens before the cut: at T = 0.25 token 2 alone holds > 0.85
  CHECK(support(make(0.25, 0, 0.85), l) == std::set<int32_t>{2});
  // top-k first, then top-p over the renormalised survivors: {2: 0.625, 0: 0.375}
  CHECK(support(make(1.0, 2, 0.6), l) == std::set<int32_t>{2});
  CHECK(support(make(1.0, 2, 0.7), l) == std::set<int32_t>{0, 2});
  CHECK(drawn(make(1.0, 0, 0.85, 11), l, 3000) == std::set<int32_t>{0, 2, 3});
  // probabilities renormalised over the nucleus
  const auto d = make(1.0, 0, 0.85).distribution(l);
  REQUIRE(d.size() == 3);
  CHECK(d[0].second == doctest::Approx(0.3 / 0.95).epsilon(1e-6));  // float logits: 1e-7 relative
  CHECK(d[1].second == doctest::Approx(0.5 / 0.95).epsilon(1e-6));
  CHECK(d[2].second == doctest::Approx(0.15 / 0.95).epsilon(1e-6));
}

TEST_CASE("sampler: a seed gives one stream, the same a separate implementation draws") {
  const std::vector<float> l = {1.0f, 2.5f, -0.5f, 2.0f, 0.25f, -3.0f, 1.75f, 0.0f};
  // from a separate Python transcription of the documented draw (CPython 3.11, math.exp):
  //   s = (s + 0x9e3779b97f4a7c15) mod 2^64; z = s; z = (z ^ z >> 30) * 0xbf58476d1ce4e5b9;
  //   z = (z ^ z >> 27) * 0x94d049bb133111eb; x = z ^ z >> 31; u = (x >> 11) * 2**-53
  //   w = [math.exp((li - max(l)) / T) for li in l]; the first i with u * sum(w) < w[0] + ... + w[i]
  const std::vector<int32_t> seed42_t1 = {4, 1, 1, 1, 0, 6, 1, 6, 1, 3, 1, 2, 3, 3, 3, 1, 1, 2, 1, 3, 6, 0, 3, 3};
  const std::vector<int32_t> seed2024_t05 = {1, 1, 1, 1, 3, 1, 1, 1, 1, 1, 1, 3, 3, 3, 1, 3, 6, 1, 3, 1, 1, 3, 1, 1};
  auto a = make(1.0, 0, 1.0, 42), b = make(0.5, 0, 1.0, 2024);
  std::vector<int32_t> got_a, got_b;
  for (size_t i = 0; i < seed42_t1.size(); ++i) {
    got_a.push_back(a.sample(l));
    got_b.push_back(b.sample(l));
  }
  CHECK(got_a == seed42_t1);
  CHECK(got_b == seed2024_t05);
  // same seed, same logits: same tokens; another seed: another stream
  auto c = make(1.0, 0, 1.0, 42), d = make(1.0, 0, 1.0, 43);
  std::vector<int32_t> got_c, got_d;
  for (size_t i = 0; i < seed42_t1.size(); ++i) {
    got_c.push_back(c.sample(l));
    got_d.push_back(d.sample(l));
  }
  CHECK(got_c == seed42_t1);
  CHECK(got_d != seed42_t1);
}

TEST_CASE("sampler: draw frequencies match the target distribution (chi-square)") {
  // Bound: under a correct sampler Pearson's X² over m cells is ~ chi²(m - 1); the bounds below are
  // its upper 1e-6 quantiles (df 7: 40.52, df 2: 27.63), so a correct sampler fails with odds of
  // one in a million for a random seed, and the fixed seeds make the outcome fixed. A wrong sampler
  // adds its non-centrality λ = n Σ (q - p)² / p to X²'s mean; the test computes λ for an off-by-one
  // id and for a draw against unnormalised weights (u instead of u * total) and requires it to
  // exceed 100 times the bound, so those bugs cannot pass.
  const std::vector<float> l = {1.0f, 2.5f, -0.5f, 2.0f, 0.25f, -3.0f, 1.75f, 0.0f};
  constexpr long n = 200000;
  {
    const double t = 0.8;
    const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7};
    const auto p = target(l, t, ids);
    auto s = make(t, 0, 1.0, 7);
    std::vector<long> counts(ids.size(), 0);
    for (long i = 0; i < n; ++i) ++counts[static_cast<size_t>(s.sample(l))];
    const double x = chi_square(counts, p, n);
    MESSAGE("chi-square, 8 cells: ", x);
    CHECK(x < 40.52);
    // the sampler's own probabilities agree with the long double reference
    const auto d = s.distribution(l);
    for (size_t i = 0; i < ids.size(); ++i) CHECK(d[i].second == doctest::Approx(static_cast<double>(p[i])).epsilon(1e-12));
    // power: an off-by-one id (token i drawn where i + 1 should be)
    std::vector<long double> shifted(p.size());
    for (size_t i = 0; i < p.size(); ++i) shifted[i] = p[(i + 1) % p.size()];
    CHECK(noncentrality(shifted, p, n) > 100 * 40.52);
    // power: u compared with unnormalised cumulative weights (the largest weight is 1, the total > 1)
    std::vector<long double> w(p.size()), unnorm(p.size());
    long double cum = 0;
    for (size_t i = 0; i < p.size(); ++i) w[i] = p[i] / p[1];  // token 1 has the largest logit
    for (size_t i = 0; i < p.size(); ++i) {
      unnorm[i] = std::max<long double>(0, std::min<long double>(1, cum + w[i]) - std::min<long double>(1, cum));
      cum += w[i];
    }
    CHECK(noncentrality(unnorm, p, n) > 100 * 40.52);
  }
  {
    // top-k 4 at T 1.3 keeps {1, 3, 6, 0}; top-p 0.75 then keeps the three most probable {1, 3, 6}
    const double t = 1.3;
    auto s = make(t, 4, 0.75, 8);
    const std::vector<int32_t> ids = {1, 3, 6};
    CHECK(support(s, l) == std::set<int32_t>(ids.begin(), ids.end()));
    const auto p = target(l, t, ids);
    std::vector<long> counts(ids.size(), 0);
    for (long i = 0; i < n; ++i) {
      const int32_t tok = s.sample(l);
      const auto it = std::find(ids.begin(), ids.end(), tok);
      REQUIRE(it != ids.end());
      ++counts[static_cast<size_t>(it - ids.begin())];
    }
    const double x = chi_square(counts, p, n);
    MESSAGE("chi-square, nucleus of 3: ", x);
    CHECK(x < 27.63);
    // power: an off-by-one id inside the nucleus
    std::vector<long double> shifted = {p[1], p[2], p[0]};
    CHECK(noncentrality(shifted, p, n) > 100 * 27.63);
  }
}

}  // namespace test_sampler
