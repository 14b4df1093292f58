// ds41/io/golden_run.hpp — run a golden's prefill and decode steps on a model and compare every
// capture (what ds41-golden and the golden tests share).
#pragma once
#include <algorithm>
#include <set>
#include <string>
#include <vector>
#include "../model/model.hpp"
#include "golden.hpp"

namespace ds41::golden {

/// Keeps host copies of every capture of one step.
class CollectSink : public CaptureSink {
 public:
  struct Item {
    std::vector<long> shape;
    CapType type;
    std::vector<float> f32;
    std::vector<int32_t> i32;
  };
  void put(const std::string& name, const std::vector<long>& shape, CapType type, const std::vector<float>* f,
           const std::vector<int32_t>* i) override {
    Item it{shape, type, f ? *f : std::vector<float>{}, i ? *i : std::vector<int32_t>{}};
    if (!items.count(name)) order.push_back(name);
    items[name] = std::move(it);
  }
  void clear() {
    items.clear();
    order.clear();
  }
  /// Teacher forcing: replace float captures the golden holds in full (stride 1) by its values.
  bool override_f32(const std::string& name, std::vector<float>& values) override {
    if (!force || !step) return false;
    auto it = step->captures.find(name);
    if (it == step->captures.end() || it->second.stride != 1 ||
        it->second.data.size() != values.size() || it->second.dtype == CapType::kI32)
      return false;
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(it->second.data[i]);
    return true;
  }
  bool force = false;
  const Step* step = nullptr;
  std::map<std::string, Item> items;
  std::vector<std::string> order;
};

struct RunOptions {
  bool force_inputs = false;  // teacher forcing of full float captures (isolates each component)
  std::vector<int> steps;   // step indices to compare (empty: all); every step still runs
  std::vector<int> layers;  // layers to compare (empty: all)
};

struct StepReport {
  int step = 0;
  std::string kind;
  std::vector<Result> results;
  int32_t argmax_mine = -1, argmax_gold = -1;
  bool compared = false;
};

/// Layer of a capture name ("layers.3.q" → 3), or -1 for top-level names; `after` tells whether a
/// top-level capture comes after the layers.
inline int capture_layer(const std::string& name, bool* after = nullptr) {
  if (after) *after = name == "h_final" || name == "head_in" || name == "logits";
  if (name.rfind("layers.", 0) != 0) return -1;
  return std::stoi(name.substr(7));
}

inline bool wanted(const RunOptions& o, int step, const std::string& name, int n_layers) {
  if (!o.steps.empty() && std::find(o.steps.begin(), o.steps.end(), step) == o.steps.end()) return false;
  if (o.layers.empty()) return true;
  bool after = false;
  int l = capture_layer(name, &after);
  if (l >= 0) return std::find(o.layers.begin(), o.layers.end(), l) != o.layers.end();
  if (!after) return true;
  std::set<int> all(o.layers.begin(), o.layers.end());  // the head needs every layer
  for (int i = 0; i < n_layers; ++i)
    if (!all.count(i)) return false;
  return true;
}

/// Run every step of `g` on `model` (a fresh runtime) and compare. Steps always run in order;
/// options only choose what is compared.
template <class ModelT>
std::vector<StepReport> run(const Golden& g, ModelT& model, const RunOptions& opt = {}) {
  std::vector<StepReport> out;
  CollectSink sink;
  sink.force = opt.force_inputs;
  if (model.active()) model.release();
  for (const Step& st : g.steps) {
    sink.clear();
    sink.step = &st;
    StepResult res = st.index == 0 ? model.prefill(st.tokens, &sink) : model.decode(st.tokens.at(0), &sink);
    StepReport rep;
    rep.step = st.index;
    rep.kind = st.kind;
    rep.argmax_mine = res.argmax;
    rep.argmax_gold = st.argmax;
    for (const std::string& name : st.order) {
      if (!wanted(opt, st.index, name, g.config.n_layers)) continue;
      rep.compared = true;
      const Capture& gold = st.captures.at(name);
      auto it = sink.items.find(name);
      if (it == sink.items.end()) {
        Result r;
        r.name = name;
        r.shape = gold.shape;
        r.dtype = gold.dtype;
        r.present_mine = false;
        r.note = "missing in this run";
        rep.results.push_back(r);
        continue;
      }
      const auto& m = it->second;
      rep.results.push_back(compare(name, gold, m.shape, m.type, m.f32.empty() && !m.i32.empty() ? nullptr : &m.f32,
                                    m.i32.empty() ? nullptr : &m.i32));
      if (name == "logits" && res.argmax != st.argmax) {
        rep.results.back().pass = false;
        rep.results.back().note = "argmax " + std::to_string(res.argmax) + " != golden " + std::to_string(st.argmax);
      }
    }
    for (const std::string& name : sink.order) {  // captures the golden says must be absent
      if (st.captures.count(name) || !wanted(opt, st.index, name, g.config.n_layers)) continue;
      Result r;
      r.name = name;
      r.shape = sink.items[name].shape;
      r.dtype = sink.items[name].type;
      r.note = "produced here but absent in the golden";
      rep.results.push_back(r);
    }
    out.push_back(std::move(rep));
  }
  model.release();
  return out;
}

}  // namespace ds41::golden
