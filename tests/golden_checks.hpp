// Golden checks shared by every backend's test binary: the same source instantiated with
// HostBackend (test_golden_host.cpp) and CudaBackend (test_golden_cuda.cu).
#pragma once
#include <doctest/doctest.h>
#include <map>
#include <memory>
#include <string>
#include "ds41/testing/golden_run.hpp"
#include "ds41/model/model.hpp"

namespace ds41::testing {

inline const golden::Golden& tiny_golden() {
  static golden::Golden g = golden::load(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  return g;
}
inline const WeightSet& tiny_weights() {
  static WeightSet w = golden::regenerate_weights(tiny_golden());
  return w;
}

struct Tally {
  long passed = 0, failed = 0, exact = 0;
};

inline Tally check_reports(const std::vector<golden::StepReport>& reports) {
  Tally t;
  for (const auto& rep : reports)
    for (const auto& r : rep.results) {
      CAPTURE(rep.step);
      CAPTURE(r.name);
      CAPTURE(r.rel_l2);
      CAPTURE(r.ck_rel);
      CAPTURE(r.mismatches);
      CAPTURE(r.note);
      CHECK(r.pass);
      (r.pass ? t.passed : t.failed)++;
      t.exact += r.exact;
    }
  return t;
}

/// Every capture of every step (prefill and each decode step) within the bounds of golden.hpp,
/// integer captures identical, logits argmax equal.
template <class B>
void check_full_golden() {
  const auto& g = tiny_golden();
  Model<B> model(g.config, tiny_weights());
  auto reports = golden::run(g, model);
  REQUIRE(reports.size() == g.steps.size());
  Tally t = check_reports(reports);
  long expected = 0;
  for (const auto& s : g.steps) expected += static_cast<long>(s.captures.size());
  CHECK(t.passed == expected);
  MESSAGE(std::string(B::kName) << ": " << t.passed << " of " << expected << " captures pass, " << t.exact << " bit-identical");
}

/// Layer 0 of every step: every bf16 and integer capture bit-identical (the reference's rounding
/// points reproduced exactly); f32 captures within their bound.
template <class B>
void check_layer0_exact() {
  const auto& g = tiny_golden();
  Model<B> model(g.config, tiny_weights());
  golden::RunOptions opt;
  opt.layers = {0};
  auto reports = golden::run(g, model, opt);
  long bf16 = 0;
  for (const auto& rep : reports)
    for (const auto& r : rep.results) {
      CAPTURE(rep.step);
      CAPTURE(r.name);
      CHECK(r.pass);
      if (r.dtype != CapType::kF32) {
        CHECK(r.exact);
        ++bf16;
      }
    }
  CHECK(bf16 > 0);
}

/// The same golden run twice gives bit-identical captures.
template <class B>
void check_deterministic() {
  const auto& g = tiny_golden();
  Model<B> model(g.config, tiny_weights());
  golden::CollectSink a, b;
  std::vector<std::map<std::string, golden::CollectSink::Item>> first;
  for (int round = 0; round < 2; ++round) {
    for (const auto& st : g.steps) {
      golden::CollectSink s;
      if (st.index == 0) model.prefill(st.tokens, &s);
      else model.decode(st.tokens[0], &s);
      if (round == 0) {
        first.push_back(s.items);
      } else {
        const auto& f = first.at(st.index);
        REQUIRE(f.size() == s.items.size());
        for (const auto& kv : s.items) {
          const std::string& name = kv.first;
          const auto& item = kv.second;
          CAPTURE(name);
          CHECK(item.f32 == f.at(name).f32);
          CHECK(item.i32 == f.at(name).i32);
        }
      }
    }
    model.release();
  }
}

}  // namespace ds41::testing
