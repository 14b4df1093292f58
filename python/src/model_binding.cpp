// python/src/model_binding.cpp — ds41._ds41.Model and .Sequence: loading, serving (extend, step,
// checkpoint / rollback / truncate, snapshot / restore) and checking (captures of any tap, and
// values forced into any tap: a component run on the caller's inputs). Arrays cross as numpy
// arrays that own the C++ vectors (no copy of logits or captures); the Python layer
// (python/ds41/__init__.py) takes array-likes (lists, numpy, torch) and wraps the results.
#include <chrono>
#include <map>
#include <set>
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include "model_handle.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace ds41::python {
namespace {

/// A numpy array that owns `v` (moved to the heap, freed with the array).
template <class T>
nb::object owned_array(std::vector<T>&& v, std::vector<size_t> shape) {
  auto* heap = new std::vector<T>(std::move(v));
  nb::capsule owner(heap, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return nb::cast(nb::ndarray<nb::numpy, T>(heap->data(), shape.size(), shape.data(), owner));
}

/// A sequence of a model, as Python holds it: the model stays alive while any of its sequences is.
struct PySequence {
  std::shared_ptr<ModelHandle> model;
  std::optional<Sequence> seq;  // empty once closed

  Sequence& get(const char* what) {
    DS41_CHECK(seq.has_value(), what, ": the sequence is closed");
    return *seq;
  }
};

/// Collects the captures of one row (or a whole prompt) and forces caller values into taps.
class PySink : public CaptureSink {
 public:
  struct Item {
    std::string name;
    std::vector<long> shape;
    CapType type;
    std::vector<float> f32;
    std::vector<int32_t> i32;
  };
  PySink(const std::optional<std::vector<std::string>>* select, const std::map<std::string, std::vector<float>>* force,
         std::set<std::string>* forced)
      : select_(select), force_(force), forced_(forced) {}

  void put(const std::string& name, const std::vector<long>& shape, CapType type, const std::vector<float>* f,
           const std::vector<int32_t>* i) override {
    if (!select_->has_value() || !selected(name)) return;
    items.push_back({name, shape, type, f ? *f : std::vector<float>{}, i ? *i : std::vector<int32_t>{}});
  }
  bool override_f32(const std::string& name, std::vector<float>& values) override {
    auto it = force_->find(name);
    if (it == force_->end()) return false;
    DS41_CHECK(it->second.size() == values.size(), "force: '", name, "' has ", values.size(),
               " values in this step, the array given ", it->second.size());
    values = it->second;
    forced_->insert(name);
    return true;
  }
  std::vector<Item> items;

 private:
  bool selected(const std::string& name) const {
    const std::vector<std::string>& s = **select_;
    if (s.empty()) return true;
    for (const std::string& p : s)
      if (name.rfind(p, 0) == 0) return true;
    return false;
  }
  const std::optional<std::vector<std::string>>* select_;
  const std::map<std::string, std::vector<float>>* force_;
  std::set<std::string>* forced_;
};

using TokenArray = nb::ndarray<const int64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using ValueArray = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

/// Token ids, checked against the vocabulary (as int32, what the model takes).
std::vector<int32_t> token_ids(const TokenArray& a, long vocab, const char* what) {
  std::vector<int32_t> out(a.shape(0));
  const int64_t* p = a.data();
  for (size_t i = 0; i < out.size(); ++i) {
    DS41_CHECK(p[i] >= 0 && p[i] < vocab, what, ": token ", i, " is ", p[i], ", outside the model's vocab [0, ", vocab, ")");
    out[i] = static_cast<int32_t>(p[i]);
  }
  return out;
}

/// Runs f() with the GIL released and the model's mutex held (in that order: a thread holding the
/// mutex never waits for the GIL, so two Python threads on one model cannot deadlock).
template <class F>
auto locked(ModelHandle& m, F&& f) {
  nb::gil_scoped_release unlocked;
  std::lock_guard<std::mutex> lock(m.mutex);
  return f();
}

nb::object logits_array(std::vector<StepResult>&& rows, bool all, long V) {
  if (!all) return owned_array(std::move(rows.back().logits), {static_cast<size_t>(V)});
  std::vector<float> flat;
  flat.reserve(rows.size() * static_cast<size_t>(V));
  for (StepResult& r : rows) flat.insert(flat.end(), r.logits.begin(), r.logits.end());
  return owned_array(std::move(flat), {rows.size(), static_cast<size_t>(V)});
}

nb::tuple captures_of(std::vector<PySink>& sinks) {
  nb::list values, types;
  for (PySink& s : sinks) {
    nb::dict v, t;
    for (PySink::Item& it : s.items) {
      std::vector<size_t> shape(it.shape.begin(), it.shape.end());
      nb::str name(it.name.c_str());
      if (it.type == CapType::kI32 || it.type == CapType::kBool) v[name] = owned_array(std::move(it.i32), shape);
      else v[name] = owned_array(std::move(it.f32), shape);
      t[name] = nb::str(cap_type_name(it.type));
    }
    values.append(v);
    types.append(t);
  }
  return nb::make_tuple(values, types);
}

/// Sequence.extend: tokens continue the sequence (a prompt when it is empty). Returns
/// (logits, captures, capture dtypes): logits [V] of the last row, or [T, V] of every row with
/// all_logits; captures one dict per step (a prompt is one step, each continuation token one).
nb::tuple extend(PySequence& ps, TokenArray tokens, bool all_logits, std::optional<std::vector<std::string>> capture,
                 std::map<std::string, ValueArray> force_arrays) {
  ModelHandle& m = *ps.model;
  const long V = m.config().vocab_size;
  std::vector<int32_t> ids = token_ids(tokens, V, "extend");
  DS41_CHECK(!ids.empty(), "extend: no tokens");
  std::map<std::string, std::vector<float>> force;
  for (const auto& [name, a] : force_arrays) force[name].assign(a.data(), a.data() + a.size());
  std::vector<std::vector<StepResult>> rows;
  std::vector<PySink> sinks;
  std::set<std::string> forced;
  locked(m, [&] {
    Sequence& s = ps.get("extend");
    const bool prompt = s.length() == 0;
    const size_t n_sinks = prompt ? 1 : ids.size();
    sinks.reserve(n_sinks);
    for (size_t i = 0; i < n_sinks; ++i) sinks.emplace_back(&capture, &force, &forced);
    std::vector<SegmentIn> one(1);
    one[0].seq = &s;
    one[0].tokens = std::move(ids);
    // a continuation's rows reach their sinks only when their logits are kept (Model::step): with
    // captures or forced values every row is kept, and the logits of all but the last dropped below
    one[0].all_logits = all_logits || capture || !force.empty();
    if (capture || !force.empty())
      one[0].sinks = [&sinks, prompt](long row) -> CaptureSink* { return &sinks.at(prompt ? 0 : static_cast<size_t>(row)); };
    // a forced name that matches no capture is refused after the step, which is then taken back
    // (a step that moved the sequence on while ignoring the caller's input would be silent garbage)
    const bool guard = !force.empty() && !s.has_checkpoint() && !s.broken();
    const long before = s.length();
    if (guard) s.checkpoint();
    try {
      rows = m.step(one);
    } catch (...) {
      if (guard) s.rollback();
      throw;
    }
    std::string unknown;
    for (const auto& [name, v] : force)
      if (!forced.count(name)) unknown += (unknown.empty() ? "'" : ", '") + name + "'";
    if (!unknown.empty()) {
      if (guard) s.rollback();
      else if (s.has_checkpoint()) s.truncate(before);
      fail("force: no capture named ", unknown, " in this step (names as the golden's captures: 'layers.3.attn_in'; ",
           "the step was taken back)");
    }
    if (guard) s.commit();
  });
  std::vector<StepResult>& r = rows.at(0);
  if (!all_logits && r.size() > 1) r.erase(r.begin(), r.end() - 1);
  nb::object logits = logits_array(std::move(r), all_logits, V);
  nb::tuple caps = captures_of(sinks);
  return nb::make_tuple(logits, caps[0], caps[1]);
}

/// Model.step: one batched step over (sequence, tokens) segments; per segment its last row's
/// logits [V] (or every row's, [T, V]).
nb::list step(ModelHandle& m, std::vector<std::pair<PySequence*, TokenArray>> segs, bool all_logits) {
  std::vector<SegmentIn> batch(segs.size());
  for (size_t i = 0; i < segs.size(); ++i) {
    DS41_CHECK(segs[i].first != nullptr, "step: segment ", i, " has no sequence");
    DS41_CHECK(segs[i].first->model.get() == &m, "step: segment ", i, "'s sequence belongs to another model");
    batch[i].tokens = token_ids(segs[i].second, m.config().vocab_size, "step");
    DS41_CHECK(!batch[i].tokens.empty(), "step: segment ", i, " has no tokens");
    batch[i].all_logits = all_logits;
  }
  std::vector<std::vector<StepResult>> rows = locked(m, [&] {
    for (size_t i = 0; i < segs.size(); ++i) batch[i].seq = &segs[i].first->get("step");
    return m.step(batch);
  });
  nb::list out;
  for (auto& r : rows) out.append(logits_array(std::move(r), all_logits, m.config().vocab_size));
  return out;
}

/// Sequence.draft: DSpark's draft at the end of the sequence for `anchor` → (tokens [B+1] int32,
/// logits [B, V], confidence [B], captures, dtypes).
nb::tuple draft(PySequence& ps, int64_t anchor, std::optional<std::vector<std::string>> capture) {
  ModelHandle& m = *ps.model;
  const long V = m.config().vocab_size;
  DS41_CHECK(anchor >= 0 && anchor < V, "draft: anchor token ", anchor, " is outside the model's vocab [0, ", V, ")");
  std::map<std::string, std::vector<float>> none;
  std::set<std::string> forced;
  std::vector<PySink> sinks;
  sinks.emplace_back(&capture, &none, &forced);
  DraftResult d = locked(m, [&] { return m.draft(ps.get("draft"), static_cast<int32_t>(anchor), capture ? &sinks[0] : nullptr); });
  const size_t B = d.confidence.size();
  nb::tuple caps = captures_of(sinks);
  return nb::make_tuple(owned_array(std::move(d.tokens), {B + 1}), owned_array(std::move(d.logits), {B, static_cast<size_t>(V)}),
                        owned_array(std::move(d.confidence), {B}), caps[0][0], caps[1][0]);
}

/// A speculative decoder of a model (Model.speculator), holding its sampler's random stream.
struct PySpeculator {
  std::shared_ptr<ModelHandle> model;
  std::unique_ptr<SpeculatorHandle> spec;
};

nb::dict round_dict(SpecRound&& r, long V) {
  nb::dict d;
  d["tokens"] = owned_array(std::move(r.tokens), {r.tokens.size()});
  std::vector<float> flat;
  for (StepResult& x : r.logits) flat.insert(flat.end(), x.logits.begin(), x.logits.end());
  d["logits"] = owned_array(std::move(flat), {r.logits.size(), static_cast<size_t>(V)});
  d["drafted"] = r.drafted;
  d["accepted"] = r.accepted;
  d["next"] = r.next;
  return d;
}

nb::list spec_round(PySpeculator& sp, std::vector<std::pair<PySequence*, int64_t>> items) {
  ModelHandle& m = *sp.model;
  const long V = m.config().vocab_size;
  std::vector<std::pair<Sequence*, int32_t>> batch;
  for (size_t i = 0; i < items.size(); ++i) {
    DS41_CHECK(items[i].first != nullptr && items[i].first->model.get() == &m, "speculator: item ", i,
               "'s sequence belongs to another model");
    DS41_CHECK(items[i].second >= 0 && items[i].second < V, "speculator: item ", i, "'s anchor ", items[i].second,
               " is outside the model's vocab [0, ", V, ")");
    for (size_t j = 0; j < i; ++j)
      DS41_CHECK(items[j].first != items[i].first, "speculator: items ", j, " and ", i, " are the same sequence");
  }
  std::vector<SpecRound> rounds = locked(m, [&] {
    for (auto& [ps, a] : items) batch.push_back({&ps->get("speculator"), static_cast<int32_t>(a)});
    return sp.spec->round(batch);
  });
  nb::list out;
  for (SpecRound& r : rounds) out.append(round_dict(std::move(r), V));
  return out;
}

nb::dict config_dict(const ModelConfig& c) {
  nb::dict d;
  d["max_seq_len"] = c.max_seq_len;
  d["vocab_size"] = c.vocab_size;
  d["dim"] = c.dim;
  d["n_layers"] = c.n_layers;
  d["n_heads"] = c.n_heads;
  d["head_dim"] = c.head_dim;
  d["hc_mult"] = c.hc_mult;
  d["n_routed_experts"] = c.n_routed_experts;
  d["n_activated_experts"] = c.n_activated_experts;
  d["moe_inter_dim"] = c.moe_inter_dim;
  d["window_size"] = c.window_size;
  d["compress_ratios"] = c.compress_ratios;
  d["index_topk"] = c.index_topk;
  d["engram_layer_ids"] = c.engram_layer_ids;
  d["n_mtp_layers"] = c.n_mtp_layers;
  d["dspark_block_size"] = c.dspark_block_size;
  d["dspark_target_layer_ids"] = c.dspark_target_layer_ids;
  return d;
}

/// The same decode step as Sequence.extend([token]) timed from C++ (checkpoint, one token,
/// rollback, n times): what the Python call is measured against (python/bench/step_overhead.py).
double cxx_decode_seconds(PySequence& ps, int64_t token, int n) {
  ModelHandle& m = *ps.model;
  DS41_CHECK(token >= 0 && token < m.config().vocab_size, "cxx_decode_seconds: token out of range");
  return locked(m, [&] {
    Sequence& s = ps.get("cxx_decode_seconds");
    DS41_CHECK(s.length() > 0 && !s.has_checkpoint(), "cxx_decode_seconds: needs a started sequence with no open checkpoint");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      s.checkpoint();
      std::vector<SegmentIn> one(1);
      one[0].seq = &s;
      one[0].tokens = {static_cast<int32_t>(token)};
      m.step(one);
      s.rollback();
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  });
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<ModelHandle>(m, "Model")
      .def_static("from_golden", &load_golden, "path"_a, nb::call_guard<nb::gil_scoped_release>(),
                  "The model of a golden file, weights regenerated (host backend).")
      .def_static("from_gguf", &load_gguf, "path"_a, "cache_experts"_a = 0, "draft"_a = "",
                  nb::call_guard<nb::gil_scoped_release>(),
                  "A GGUF model (its first shard); cache_experts > 0 streams the routed experts through a cache; "
                  "draft: a DSpark draft file.")
      .def_static("from_checkpoint", &load_checkpoint, "dir"_a, "max_seq_len"_a = 4096, "golden"_a = "",
                  "tokenizer"_a = "", "cache_experts"_a = 0, nb::call_guard<nb::gil_scoped_release>(),
                  "A safetensors checkpoint in DeepSeek's release layout.")
      .def_prop_ro("config", [](const ModelHandle& h) { return config_dict(h.config()); })
      .def_prop_ro("source", &ModelHandle::source)
      .def_prop_ro("has_draft_head", [](const ModelHandle& h) { return h.has_draft_head(); })
      .def("speculator",
           [](std::shared_ptr<ModelHandle> h, int draft_len, double confidence, double temperature, int top_k,
              double top_p, uint64_t seed) {
             SpeculativeOptions o;
             o.draft_len = draft_len;
             o.confidence = confidence;
             o.sampling = {temperature, top_k, top_p, seed};
             return locked(*h, [&] { return PySpeculator{h, h->speculator(o)}; });
           },
           "draft_len"_a = 0, "confidence"_a = -1.0, "temperature"_a = 0.0, "top_k"_a = 0, "top_p"_a = 1.0, "seed"_a = 0)
      .def("new_sequence",
           [](std::shared_ptr<ModelHandle> h) { return locked(*h, [&] { return PySequence{h, h->make_sequence()}; }); })
      .def("restore",
           [](std::shared_ptr<ModelHandle> h, nb::bytes b) {
             std::vector<uint8_t> v(static_cast<const uint8_t*>(b.data()), static_cast<const uint8_t*>(b.data()) + b.size());
             return locked(*h, [&] { return PySequence{h, h->restore(v)}; });
           },
           "data"_a)
      .def("snapshot",
           [](ModelHandle& h, PySequence& s) {
             DS41_CHECK(s.model.get() == &h, "snapshot: the sequence belongs to another model");
             std::vector<uint8_t> v = locked(h, [&] { return h.snapshot(s.get("snapshot")); });
             return nb::bytes(reinterpret_cast<const char*>(v.data()), v.size());
           },
           "sequence"_a)
      .def("step", &step, "segments"_a, "all_logits"_a = false);

  // every call on a sequence takes its model's lock (a step of the model may be using it)
  auto on = [](const char* what, auto f) {
    return [what, f](PySequence& s) { return locked(*s.model, [&] { return f(s.get(what)); }); };
  };
  nb::class_<PySequence>(m, "Sequence")
      .def_prop_ro("length", on("length", [](Sequence& q) { return q.length(); }))
      .def_prop_ro("closed", [](PySequence& s) { return locked(*s.model, [&] { return !s.seq.has_value(); }); })
      .def_prop_ro("broken", on("broken", [](Sequence& q) { return q.broken(); }))
      .def_prop_ro("checkpoint_length", on("checkpoint_length", [](Sequence& q) { return q.checkpoint_length(); }))
      .def_prop_ro("model", [](const PySequence& s) { return s.model; })
      .def("extend", &extend, "tokens"_a, "all_logits"_a = false, "capture"_a = nb::none(),
           "force"_a = std::map<std::string, ValueArray>{})
      .def("checkpoint", on("checkpoint", [](Sequence& q) { q.checkpoint(); }))
      .def("rollback", on("rollback", [](Sequence& q) { q.rollback(); }))
      .def("commit", on("commit", [](Sequence& q) { q.commit(); }))
      .def("reset", on("reset", [](Sequence& q) { q.reset(); }))
      .def("truncate", [](PySequence& s, long n) { locked(*s.model, [&] { s.get("truncate").truncate(n); }); }, "n"_a)
      .def("close", [](PySequence& s) { locked(*s.model, [&] { s.seq.reset(); }); })
      .def("draft", &draft, "anchor"_a, "capture"_a = nb::none())
      .def("_cxx_decode_seconds", &cxx_decode_seconds, "token"_a, "n"_a);

  nb::class_<PySpeculator>(m, "Speculator")
      .def("round", &spec_round, "items"_a)
      .def("choose",
           [](PySpeculator& sp, ValueArray logits) {
             std::vector<float> v(logits.data(), logits.data() + logits.size());
             DS41_CHECK(static_cast<long>(v.size()) == sp.model->config().vocab_size, "choose: ", v.size(),
                        " logits for a vocab of ", sp.model->config().vocab_size);
             return locked(*sp.model, [&] { return sp.spec->choose(v); });
           },
           "logits"_a)
      .def_prop_ro("stats", [](PySpeculator& sp) {
        const SpecStats k = locked(*sp.model, [&] { return sp.spec->stats(); });
        nb::dict d;
        d["rounds"] = k.rounds;
        d["drafted"] = k.drafted;
        d["accepted"] = k.accepted;
        d["tokens_per_round"] = k.tokens_per_round();
        d["draft_s"] = k.draft_s;
        d["verify_s"] = k.verify_s;
        d["rewind_s"] = k.rewind_s;
        return d;
      });
}

}  // namespace ds41::python
