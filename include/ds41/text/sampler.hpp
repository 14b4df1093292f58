// ds41/text/sampler.hpp — next-token choice from a row of logits: greedy (torch.argmax's rule) or
// temperature / top-k / top-p sampling with a seeded, platform-independent random stream
// (docs/TEXT.md, "Sampler").
//
// Greedy (temperature 0) is torch.argmax: the first maximal index, and a NaN counts as larger than
// everything (the first NaN wins), so it never fails on a non-empty row.
//
// Sampling, in Hugging Face's warper order (temperature, top-k, top-p), in double precision:
//  1. top-k (k > 0): keep every logit >= the k-th largest (HF's TopKLogitsWarper: ties with the
//     k-th value are all kept, so more than k may survive). Applied to the raw logits, which
//     order the same as logits / T.
//  2. softmax of (logit - max) / T over the kept tokens (the shift makes the largest weight exactly
//     1 and keeps tiny temperatures from overflowing).
//  3. top-p (p < 1): order the kept tokens by probability, descending (equal probabilities: the
//     lower id first); keep a token while the mass of the tokens before it is < p, so the smallest
//     prefix whose mass reaches p survives, and always the first. This is HF's TopPLogitsWarper
//     (it removes, in ascending order, the tokens whose cumulative mass is <= 1 - p: the same set
//     in exact arithmetic). p == 1 keeps everything (no cumulative-sum rounding can cut the tail).
//  4. draw: u = (SplitMix64 >> 11) * 2^-53 in [0, 1); walk the kept tokens in id order and return
//     the first whose cumulative weight exceeds u * (total weight). One draw per call.
// Every step uses IEEE +, -, *, / and an exp() built from them (not the platform libm, whose last
// bit varies), and the library compiles with -ffp-contract=off: the same seed and logits give the
// same tokens on every platform. No std:: distribution is used: their outputs are
// implementation-defined.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

/// SplitMix64 (Steele, Lea, Flood 2014; Vigna's reference constants): a 64-bit stream fully
/// determined by its seed.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// A double in [0, 1): the top 53 bits, each value k * 2^-53 equally likely.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

/// exp(x) for x <= 0 from IEEE basic operations only, so that it gives the same bits everywhere
/// (std::exp's last bit depends on the libm). Cody-Waite reduction x = k ln2 + r, |r| <= ln2/2,
/// a degree-13 Taylor polynomial (truncation < 2^-56 relative), then an exact scaling by 2^k.
/// Within a few ulp of the true value; 0 below -745.2 (where the double result underflows).
inline double deterministic_exp(double x) {
  if (!(x > -745.2)) return 0.0;  // also NaN → 0 (callers never pass one)
  if (x > 0.0) x = 0.0;           // callers pass (logit - max) / T <= 0
  constexpr double kLog2e = 1.4426950408889634;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // 32 significant bits: k * hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double k = std::floor(x * kLog2e + 0.5);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  constexpr double kInvFact[] = {1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0,
                                 1.0 / 40320.0,     1.0 / 5040.0,     1.0 / 720.0,     1.0 / 120.0,
                                 1.0 / 24.0,        1.0 / 6.0,        0.5,             1.0,   1.0};
  for (double c : kInvFact) p = p * r + c;
  return std::ldexp(p, static_cast<int>(k));  // exact (rounded once if the result is subnormal)
}

/// Where a draw lands among n weighted entries (weight w(i), in order): the first whose running
/// sum exceeds `target` (a uniform draw times the weights' total). Where rounding takes `target`
/// to the total itself, the last entry with any weight (the last entry when none has).
template <class Weight>
size_t weighted_index(size_t n, Weight w, double target) {
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += w(i);
    if (target < cum) return i;
  }
  for (size_t i = n; i-- > 0;)
    if (w(i) > 0.0) return i;
  return n - 1;
}

struct SamplerOptions {
  double temperature = 0;  ///< 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
  int top_k = 0;           ///< keep the k largest logits (ties with the k-th kept); 0: all
  double top_p = 1.0;      ///< nucleus mass in (0, 1]; 1: all
  uint64_t seed = 0;       ///< the random stream's seed (unused when greedy)
};

class Sampler {
 public:
  explicit Sampler(SamplerOptions opt) : opt_(opt), rng_(opt.seed) {
    DS41_CHECK(std::isfinite(opt.temperature) && opt.temperature >= 0.0, "Sampler: temperature must be finite and >= 0, got ",
               opt.temperature);
    DS41_CHECK(opt.top_p > 0.0 && opt.top_p <= 1.0, "Sampler: top_p must be in (0, 1], got ", opt.top_p);
    DS41_CHECK(opt.top_k >= 0, "Sampler: top_k must be >= 0 (0 = off), got ", opt.top_k);
  }

  const SamplerOptions& options() const { return opt_; }

  /// torch.argmax(logits): the first maximal index, a NaN counting as the maximum.
  static int32_t argmax(std::span<const float> logits) {
    check_size(logits);
    size_t best = 0;
    for (size_t i = 1; i < logits.size() && !std::isnan(logits[best]); ++i)
      if (std::isnan(logits[i]) || logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }

  /// The tokens that can be drawn and their probabilities (summing to 1), in id order. Greedy:
  /// the argmax with probability 1.
  std::vector<std::pair<int32_t, double>> distribution(std::span<const float> logits) const {
    std::vector<std::pair<int32_t, double>> out;
    if (opt_.temperature == 0.0) {
      out.emplace_back(argmax(logits), 1.0);
      return out;
    }
    const Kept kept = filter(logits);
    for (size_t i = 0; i < kept.ids.size(); ++i) out.emplace_back(kept.ids[i], kept.weights[i] / kept.total);
    return out;
  }

  /// The next token. Greedy consumes no randomness; sampling consumes one draw.
  int32_t sample(std::span<const float> logits) {
    if (opt_.temperature == 0.0) return argmax(logits);
    const Kept kept = filter(logits);  // never empty: the largest logit has weight 1
    const double target = rng_.uniform() * kept.total;
    return kept.ids[weighted_index(kept.ids.size(), [&](size_t i) { return kept.weights[i]; }, target)];
  }

 private:
  struct Kept {
    std::vector<int32_t> ids;     // ascending
    std::vector<double> weights;  // exp((logit - max) / T), the largest exactly 1
    double total = 0;             // their sum, in id order
  };

  static void check_size(std::span<const float> logits) {
    DS41_CHECK(!logits.empty(), "Sampler: empty logits");
    DS41_CHECK(logits.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()), "Sampler: ", logits.size(),
               " logits exceed the int32 token id range");
  }

  Kept filter(std::span<const float> logits) const {
    check_size(logits);
    float max = -std::numeric_limits<float>::infinity();
    size_t finite = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      const float v = logits[i];
      DS41_CHECK(!std::isnan(v), "Sampler: logit ", i, " is NaN (sampling with temperature ", opt_.temperature,
                 " needs finite logits)");
      DS41_CHECK(v != std::numeric_limits<float>::infinity(), "Sampler: logit ", i, " is +inf");
      if (v == -std::numeric_limits<float>::infinity()) continue;
      ++finite;
      max = std::max(max, v);
    }
    DS41_CHECK(finite > 0, "Sampler: all ", logits.size(), " logits are -inf: no token can be drawn");

    // top-k: the k-th largest finite logit is the threshold (ties kept); -inf never survives
    float threshold = -std::numeric_limits<float>::infinity();
    if (opt_.top_k > 0 && static_cast<size_t>(opt_.top_k) < finite) {
      std::vector<float> vals;
      vals.reserve(finite);
      for (float v : logits)
        if (v != -std::numeric_limits<float>::infinity()) vals.push_back(v);
      auto kth = vals.begin() + (opt_.top_k - 1);
      std::nth_element(vals.begin(), kth, vals.end(), std::greater<float>());
      threshold = *kth;
    }
    Kept kept;
    for (size_t i = 0; i < logits.size(); ++i) {
      const float v = logits[i];
      if (v == -std::numeric_limits<float>::infinity() || v < threshold) continue;
      kept.ids.push_back(static_cast<int32_t>(i));
      kept.weights.push_back(deterministic_exp((static_cast<double>(v) - static_cast<double>(max)) / opt_.temperature));
    }
    for (double w : kept.weights) kept.total += w;

    if (opt_.top_p < 1.0) {
      std::vector<size_t> order(kept.ids.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      // descending probability; ids ascending already, so a stable sort puts equal ones lower-id first
      std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return kept.weights[a] > kept.weights[b]; });
      std::vector<char> keep(order.size(), 0);
      double mass_before = 0.0;
      for (size_t j = 0; j < order.size(); ++j) {
        if (j > 0 && !(mass_before < opt_.top_p)) break;
        keep[order[j]] = 1;
        mass_before += kept.weights[order[j]] / kept.total;
      }
      Kept nucleus;
      for (size_t i = 0; i < keep.size(); ++i)
        if (keep[i]) {
          nucleus.ids.push_back(kept.ids[i]);
          nucleus.weights.push_back(kept.weights[i]);
          nucleus.total += kept.weights[i];
        }
      return nucleus;
    }
    return kept;
  }

  SamplerOptions opt_;
  SplitMix64 rng_;
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
