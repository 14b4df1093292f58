// tests/nine_sequences.hpp — nine sequences of a golden's tokens (shifted, prompts of four lengths),
// the serving tests' workload: test_golden_cuda (batch = alone = host on the device) and test_topk
// (the device's top-k rule on the host).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>
#include "ds41/testing/golden.hpp"

namespace ds41::testing {

/// Nine sequences of the golden's tokens (shifted), the prompt then one decode step per token.
struct NineSequences {
  static constexpr int kSeqs = 9;
  std::vector<std::vector<int32_t>> prompts, rest;
  explicit NineSequences(const golden::Golden& g) : prompts(kSeqs), rest(kSeqs) {
    const long V = g.config.vocab_size;
    for (int q = 0; q < kSeqs; ++q) {
      const size_t len = std::max<size_t>(1, g.prompt_tokens.size() - static_cast<size_t>(q) % 4);
      for (size_t j = 0; j < len; ++j) prompts[q].push_back(static_cast<int32_t>((g.prompt_tokens[j] + 7 * q) % V));
      for (int32_t t : g.decode_tokens) rest[q].push_back(static_cast<int32_t>((t + 11 * q) % V));
    }
  }
  /// Each sequence alone: its decode steps' logits.
  template <class ModelT>
  std::vector<std::vector<std::vector<float>>> alone(ModelT& m) const {
    std::vector<std::vector<std::vector<float>>> out(kSeqs);
    for (int q = 0; q < kSeqs; ++q) {
      auto s = m.make_sequence();
      m.extend(s, prompts[q]);
      for (int32_t t : rest[q]) out[q].push_back(m.extend(s, {t}).logits);
    }
    return out;
  }
};

}  // namespace ds41::testing
