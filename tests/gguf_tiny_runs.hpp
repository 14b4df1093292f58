// tests/gguf_tiny_runs.hpp — what the GGUF type suites (test_gguf_types.cpp, test_gguf_engram.cpp)
// share: the tiny golden, its weights by the golden's rules at any shapes a config asks for, and a
// run of its token sequence (logits and every capture of each step) compared bit for bit.
#pragma once
#include <doctest/doctest.h>
#include <cstring>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/testing/golden_run.hpp"

namespace gguf_test {
using namespace ds41;

/// The type names in DS41_TEST_GGUF_TYPES (comma-separated); none when it is unset: every type.
/// The sanitizer leg of CI (scripts/check_sanitizers.sh) names one type of each block size and
/// kind for the tiny models of both suites: what the sanitizers check there (the loader's, the
/// streamed experts' and the engram rows' reads) depends on those, and each type's kernels run
/// under them at awkward shapes in test_ggml_linear. The README's test command runs every type.
inline std::set<std::string> only_types() {
  std::set<std::string> out;
  const char* env = std::getenv("DS41_TEST_GGUF_TYPES");
  std::stringstream names(env ? env : "");
  for (std::string name; std::getline(names, name, ',');)
    if (!name.empty()) out.insert(name);
  return out;
}

inline const golden::Golden& tiny() {
  static const golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  return g;
}

/// The tiny golden's weights at the shapes a model asks for: each parameter from its rule (filler
/// by name, the golden's scale, offset and storage), whatever the shape. Lets the tests widen the
/// tiny config to rows the K-quants can hold (K % 256 == 0) and keep the golden's weights' rules.
class RuleSource : public WeightSource {
 public:
  explicit RuleSource(const golden::Golden& g) {
    for (const golden::ParamRule& p : g.params) rules_[p.name] = p;
  }
  bool has(const std::string& name) const override { return rules_.count(name) != 0; }
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    const golden::ParamRule& p = rules_.at(name);
    if (p.storage == "derived") {  // the scales of an e4m3 table, made with its codes
      const std::string base = name.substr(0, name.size() - std::string("scale").size());
      load(base + "weight", {shape.at(0), shape.at(1) * 32});
      HostTensor t = scales_.at(name);
      check_shape(name, t.shape, shape);
      return put(name, t);
    }
    long n = 1;
    for (long d : shape) n *= d;
    const uint64_t h = filler::fnv1a64(p.name);
    std::vector<float> v(n);
    for (long i = 0; i < n; ++i) v[i] = filler::fixed_value_h(h, static_cast<uint64_t>(i), p.scale, p.offset);
    if (p.storage == "f32") return put(name, HostTensor::from_f32(shape, v));
    if (p.storage == "bf16") {
      for (float& x : v) x = bf16_round(x);
      return put(name, HostTensor::from_bf16_values(shape, v));
    }
    REQUIRE(p.storage == "e4m3_pow2_block32");
    const long rows = shape.at(0), cols = shape.at(1), nb = (cols + 31) / 32;
    std::vector<float> sc(static_cast<size_t>(rows) * nb);
    for (long r = 0; r < rows; ++r) filler::quantize_e4m3_pow2_row(&v[r * cols], static_cast<int>(cols), &sc[r * nb]);
    const std::string scale = name.substr(0, name.size() - std::string("weight").size()) + "scale";
    scales_[scale] = HostTensor::from_f32({rows, nb}, sc);
    if (rules_.count(scale)) put(scale, scales_[scale]);
    return put(name, HostTensor::from_f32(shape, v));
  }
  /// Every tensor handed out, by name.
  const WeightSet& seen() const { return seen_; }

 private:
  HostTensor put(const std::string& name, HostTensor t) const {
    seen_.put(name, t);
    return t;
  }
  std::map<std::string, golden::ParamRule> rules_;
  mutable std::map<std::string, HostTensor> scales_;
  mutable WeightSet seen_;
};

/// `c`'s weights by the tiny golden's rules, at the shapes a model of `c` asks for (every parameter).
inline WeightSet rule_weights(const ModelConfig& c) {
  RuleSource src(tiny());
  { Model<HostBackend> m(c, src); }  // asks for every parameter at its shape
  return src.seen();
}

/// The logits and every capture of each step of the tiny golden's token sequence.
struct Run {
  std::vector<std::vector<float>> logits;
  std::vector<golden::CollectSink> caps;
};
template <class ModelT>
Run run(ModelT& model) {
  Run out;
  const golden::Golden& g = tiny();
  out.caps.resize(1 + g.decode_tokens.size());
  StepResult r = model.prefill(g.prompt_tokens, &out.caps[0]);
  out.logits.push_back(r.logits);
  for (size_t i = 0; i < g.decode_tokens.size(); ++i) {
    r = model.decode(g.decode_tokens[i], &out.caps[1 + i]);
    out.logits.push_back(r.logits);
  }
  model.release();
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

/// Bitwise equality of two runs; returns the number of captures compared.
inline long compare(const Run& want, const Run& got, const std::string& label) {
  REQUIRE(got.logits.size() == want.logits.size());
  for (size_t s = 0; s < want.logits.size(); ++s) {
    REQUIRE(!want.logits[s].empty());
    CHECK_MESSAGE(same_bits(want.logits[s], got.logits[s]), label, ": logits of step ", s);
  }
  long compared = 0;
  for (size_t s = 0; s < want.caps.size(); ++s) {
    REQUIRE(got.caps[s].order == want.caps[s].order);
    for (const std::string& name : want.caps[s].order) {
      const auto& a = want.caps[s].items.at(name);
      const auto& b = got.caps[s].items.at(name);
      CHECK_MESSAGE((a.shape == b.shape && a.i32 == b.i32 && same_bits(a.f32, b.f32)), label, ": step ", s, " ", name);
      ++compared;
    }
  }
  return compared;
}

}  // namespace gguf_test
