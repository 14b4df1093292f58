// ds41/testing/golden_run.hpp — run a golden's prefill and decode steps on a model and compare every
// capture (what ds41-golden and the golden tests share).
#pragma once
#include <algorithm>
#include <set>
#include <string>
#include <vector>
#include "../model/model.hpp"
#include "golden.hpp"

#include "../core/fp_exact_begin.hpp"
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
  // Serving checks (the prompt stays one prefill: the reference's prefill and its token-by-token
  // decode are different computations):
  std::vector<int> chunks;  // the decode tokens fed as chunks of these sizes, cycling (empty: one a step)
  bool rewind = false;      // after each chunk: checkpoint, two more tokens, rollback
  int batch_with = 0;       // run in one batch with this many other sequences (the golden's own
                            // tokens shifted, at other lengths, some joining later)
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

/// Whether a capture comes from a DSpark draft call (SCHEMA §11.4.2-11.4.4) rather than from the
/// target step itself (dspark.main_hidden, dspark.main_x and the stages' ring rows window_kv).
inline bool is_draft_capture(const std::string& name) {
  if (name.rfind("dspark.", 0) != 0) return false;
  if (name == "dspark.main_hidden" || name == "dspark.main_x") return false;
  const size_t n = name.size();
  return !(name.rfind("dspark.mtp.", 0) == 0 && n > 10 && name.compare(n - 10, 10, ".window_kv") == 0);
}

/// Compare one step's captures (collected in `sink`) and its argmax with the golden's step.
/// `drafted`: whether the DSpark draft call of the step ran (fed in chunks, only a chunk's last
/// row drafts: the rings have moved on past the others).
inline StepReport compare_step(const Golden& g, const Step& st, const CollectSink& sink, int32_t argmax,
                               const RunOptions& opt, bool drafted = true) {
  StepReport rep;
  rep.step = st.index;
  rep.kind = st.kind;
  rep.argmax_mine = argmax;
  rep.argmax_gold = st.argmax;
  for (const std::string& name : st.order) {
    if (!wanted(opt, st.index, name, g.config.n_layers)) continue;
    if (!drafted && is_draft_capture(name)) continue;
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
    if (name == "logits" && argmax != st.argmax) {
      rep.results.back().pass = false;
      rep.results.back().note = "argmax " + std::to_string(argmax) + " != golden " + std::to_string(st.argmax);
    }
  }
  for (const std::string& name : sink.order) {  // captures the golden says must be absent
    if (st.captures.count(name) || !wanted(opt, st.index, name, g.config.n_layers)) continue;
    Result r;
    r.name = name;
    r.shape = sink.items.at(name).shape;
    r.dtype = sink.items.at(name).type;
    r.note = "produced here but absent in the golden";
    rep.results.push_back(r);
  }
  return rep;
}

/// The sequences a golden shares its batch with (RunOptions::batch_with): sequence k takes the
/// golden's tokens shifted by k + 1 (mod vocab), a prompt k + 1 tokens shorter (at least 1), and
/// odd ones join one step late, so a batch mixes prompts and decode steps of other lengths.
struct Companion {
  std::vector<int32_t> prompt, decode;
  int join = 0;  // the golden's step at which its prompt goes in
  size_t next = 0;
};
inline std::vector<Companion> companions(const Golden& g, int k) {
  std::vector<Companion> out;
  const long V = g.config.vocab_size;
  auto shift = [&](int32_t t, int by) { return static_cast<int32_t>((t + by) % V); };
  for (int i = 0; i < k; ++i) {
    Companion c;
    const size_t plen = std::max<size_t>(1, g.prompt_tokens.size() > static_cast<size_t>(i + 1)
                                                ? g.prompt_tokens.size() - (i + 1)
                                                : 1);
    for (size_t j = 0; j < plen; ++j) c.prompt.push_back(shift(g.prompt_tokens[j], i + 1));
    for (int32_t t : g.decode_tokens) c.decode.push_back(shift(t, i + 1));
    c.join = i % 2;
    out.push_back(std::move(c));
  }
  return out;
}

/// Run every step of `g` on a fresh sequence of `model` and compare. Steps always run in order;
/// options only choose what is compared and how the decode tokens are fed (chunks, rewind, batch).
template <class ModelT>
std::vector<StepReport> run(const Golden& g, ModelT& model, const RunOptions& opt = {}) {
  using Sequence = typename ModelT::Sequence;
  using Segment = typename ModelT::Segment;
  std::vector<StepReport> out;
  if (model.active()) model.release();
  Sequence seq = model.make_sequence();
  std::vector<Companion> others = companions(g, opt.batch_with);
  std::vector<Sequence> other_seqs;
  for (size_t i = 0; i < others.size(); ++i) other_seqs.push_back(model.make_sequence());

  // one batched step: the golden's segment (tokens of steps first..first+n-1, each row into its
  // own sink) plus one segment of every companion that is due
  auto batch_step = [&](int first, const std::vector<int32_t>& tokens, std::vector<CollectSink>& sinks) {
    std::vector<Segment> batch(1);
    batch[0].seq = &seq;
    batch[0].tokens = tokens;
    batch[0].all_logits = first > 0;  // decode rows each compare their logits; a prompt its last
    // a prompt's captures come with its last row (one sink); decode rows each have their own
    batch[0].sinks = [&sinks, first](long row) -> CaptureSink* {
      return &sinks.at(first == 0 ? 0 : static_cast<size_t>(row));
    };
    for (size_t i = 0; i < others.size(); ++i) {
      Companion& c = others[i];
      Sequence& s = other_seqs[i];
      if (first < c.join) continue;
      Segment o;
      o.seq = &s;
      if (s.length() == 0) {
        o.tokens = c.prompt;
      } else {
        const long room = model.config().max_seq_len - s.length();
        for (size_t j = 0; j < tokens.size() && c.next < c.decode.size() && static_cast<long>(j) < room; ++j)
          o.tokens.push_back(c.decode[c.next++]);
        if (o.tokens.empty()) continue;
      }
      batch.push_back(std::move(o));
    }
    return model.step(batch).at(0);
  };

  size_t step = 0, chunk = 0;
  while (step < g.steps.size()) {
    const bool prefill = step == 0;
    size_t n = 1;
    if (!prefill && !opt.chunks.empty()) n = static_cast<size_t>(opt.chunks[chunk++ % opt.chunks.size()]);
    n = std::min(n, g.steps.size() - step);
    std::vector<int32_t> tokens;
    for (size_t j = 0; j < n; ++j)
      for (int32_t t : g.steps[step + j].tokens) tokens.push_back(t);
    std::vector<CollectSink> sinks(prefill ? 1 : n);
    for (size_t j = 0; j < sinks.size(); ++j) {
      sinks[j].force = opt.force_inputs;
      sinks[j].step = &g.steps[step + j];
    }
    std::vector<StepResult> rows;
    if (opt.batch_with > 0) {
      rows = batch_step(static_cast<int>(step), tokens, sinks);
    } else if (prefill) {
      rows = {model.extend(seq, tokens, &sinks[0])};
    } else {
      rows = model.extend_rows(seq, tokens, [&sinks](long row) -> CaptureSink* { return &sinks.at(row); });
    }
    // DSpark (SCHEMA §11.3): after a decode step, a draft anchored on the step's own argmax; fed
    // in chunks, at the chunk's end only (the sequence's end)
    const bool dspark = g.config.has_dspark() && !prefill;
    if (dspark && model.has_draft_head()) model.draft(seq, rows.back().argmax, &sinks.back());
    for (size_t j = 0; j < sinks.size(); ++j)
      out.push_back(compare_step(g, g.steps[step + j], sinks[j], rows.at(prefill ? rows.size() - 1 : j).argmax, opt,
                                 !dspark || j + 1 == sinks.size()));
    step += prefill ? 1 : n;
    if (opt.rewind && step < g.steps.size()) {  // a rejected draft of two tokens, taken back
      seq.checkpoint();
      model.extend(seq, {rows.back().argmax, g.steps[step].tokens.at(0)});
      seq.rollback();
    }
  }
  return out;
}

}  // namespace ds41::golden
#include "../core/fp_exact_end.hpp"
