// ds41-golden — run a golden file (SCHEMA.md) on a backend and compare every capture.
//
//   ds41-golden GOLDEN.json [--backend host|cuda] [--steps prefill,decode0,...] [--layers 0,1,...]
//                           [--quiet] [--verbose] [--force-inputs]
//                           [--checkpoint DIR [--streamed-experts N]] [--exact]
//                           [--chunks 3,1,4] [--rewind] [--batch-with K] [--numerics exact|fast]
// --verbose: the first differing samples of each capture. --force-inputs: teacher forcing — every
// float capture the golden holds in full replaces this run's tensor where it was taken, so each
// capture's error is the error of one component on exact inputs (a diagnosis mode).
// --graph-oracle (cuda): decode steps eager and as CUDA graph segments, compared bit for bit.
// --checkpoint DIR: the weights from an official-format safetensors checkpoint (the golden's
// weights_meta.checkpoint) instead of regenerated; --streamed-experts N: routed experts through
// StreamedExperts with an N-expert cache and engram rows read on demand; the cache counters last.
// --exact: a capture passes only when bit-identical (not merely within SCHEMA §9's bounds).
// Serving (the prompt stays one prefill): --chunks 3,1,4 feeds the decode tokens as chunks of those
// sizes (cycling) and compares every row with its decode step; --rewind decodes two more tokens
// after each step and rolls them back; --batch-with K runs the golden's sequence in one batch with
// K others (its own tokens shifted, at other lengths, some joining a step late).
// --numerics fast (with --backend cuda): CudaFastBackend, whose Linears sum in another order with
// fused multiply-adds (docs/NUMERICS.md, "The device's fast policy"): float captures pass within
// rel-L2 1e-2, discrete ones (expert ids, index top-k, candidates, argmax) must be identical except
// where the golden's recorded margin (SCHEMA §6) is below 1e-2 relative, counted apart. Default exact.
// Prints one row per capture (step, name, shape, dtype, rel-L2 or mismatches, exact, pass), then
// "N passed, M failed". Exit 0 when every compared capture passes, 1 on any mismatch, 2 on bad input.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/io/golden_run.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#if DS41_WITH_CUDA
#include "ds41/backend/cuda.hpp"
#include "graph_oracle.hpp"
#endif

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

constexpr const char* kUsage =
    "usage: ds41-golden GOLDEN.json [--backend host|cuda] [--steps prefill,decode0,...] [--layers 0,1,...] "
    "[--quiet] [--verbose] [--force-inputs] [--graph-oracle] [--checkpoint DIR] [--streamed-experts N] [--exact] "
    "[--chunks N,N,...] [--rewind] [--batch-with K] [--numerics exact|fast]";

constexpr const char* kHelp =
    "Runs a golden file (golden/SCHEMA.md) on a backend and compares every capture of every step.\n"
    "  --backend host|cuda     where to run (default host)\n"
    "  --steps prefill,decode0,...  compare only these steps (every step still runs)\n"
    "  --layers 0,1,...        compare only these layers' captures\n"
    "  --quiet                 print failing captures only\n"
    "  --verbose               the first differing samples of each capture\n"
    "  --force-inputs          teacher forcing: the golden's full captures replace this run's tensors\n"
    "  --exact                 a capture passes only when bit-identical\n"
    "  --checkpoint DIR        weights from an official-format safetensors checkpoint directory\n"
    "  --streamed-experts N    (with --checkpoint) experts through an N-expert cache, engram rows by row\n"
    "  --chunks N,N,...        feed the decode tokens as chunks of these sizes, cycling\n"
    "  --rewind                after each step, decode two more tokens and roll them back\n"
    "  --batch-with K          run in one batch with K other sequences\n"
    "  --graph-oracle          (cuda) decode eagerly and as CUDA graphs, compare bit for bit\n"
    "  --numerics exact|fast   (cuda) exact: bit-identical kernels (default); fast: reordered Linear sums,\n"
    "                          float captures within rel-L2 1e-2, discrete ones identical except where the\n"
    "                          golden's margin is below 1e-2 relative (counted apart)\n"
    "Prints one row per capture and 'N passed, M failed'. Exit 0 all pass, 1 any mismatch, 2 bad input.";

// bad input: exit code 2 and one line on stderr
int usage(const char* msg) {
  std::fprintf(stderr, "ds41-golden: %s (%s)\n", msg, kUsage);
  return 2;
}

bool g_exact = false;  // --exact
bool g_fast = false;   // --numerics fast
// --numerics fast: the policy's error bound, for float captures (rel-L2) and for the golden's
// selection margins (relative gap) alike (issue 24's bar)
constexpr double kFastBound = 1e-2;

/// The golden's selection margins (SCHEMA §6) as --numerics fast reads them: per kind, the smallest
/// relative gap of the whole run, and the selections it records one by one (below_rule, tightest).
struct Margins {
  struct Recorded {
    int step, layer;  // layer -1: none recorded (logits)
    double rel_gap;
  };
  struct Kind {
    bool present = false;
    double min_rel_gap = -1;  // < 0: no events
    std::vector<Recorded> recorded;
  };
  std::map<std::string, Kind> kinds;

  static Margins load(const std::string& path) {
    Margins m;
    std::ifstream f(path);
    const auto j = ds41::golden::json::parse(f, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("margins") || !j["margins"].contains("kinds")) return m;
    for (const auto& [name, k] : j["margins"]["kinds"].items()) {
      Kind kind;
      kind.present = true;
      if (k.contains("min_relative_gap") && k["min_relative_gap"].is_number()) kind.min_rel_gap = k["min_relative_gap"].get<double>();
      auto add = [&](const ds41::golden::json& e) {
        if (!e.is_object() || !e.contains("step") || !e.contains("selected") || !e.contains("first_unselected")) return;
        const double a = std::fabs(e["selected"].get<double>()), b = std::fabs(e["first_unselected"].get<double>());
        const double v = std::max(a, b), gap = e.contains("gap") ? e["gap"].get<double>() : a - b;
        kind.recorded.push_back({e["step"].value("index", -1), e.value("layer", -1), v > 0 ? gap / v : 0.0});
      };
      if (k.contains("tightest")) add(k["tightest"]);
      if (k.contains("below_rule") && k["below_rule"].is_array())
        for (const auto& e : k["below_rule"]) add(e);
      m.kinds[name] = kind;
    }
    return m;
  }
  /// The margins kind of a discrete capture ("" for captures no selection decides).
  static std::string kind_of(const std::string& capture) {
    auto ends = [&](const char* t) {
      const std::string s(t);
      return capture.size() >= s.size() && capture.compare(capture.size() - s.size(), s.size(), s) == 0;
    };
    if (ends("moe_indices")) return "moe_topk";
    if (ends("index_topk")) return "index_topk";
    if (ends("candidates")) return "candidate_blocks";
    if (capture == "logits") return "logits_argmax";
    return "";
  }
  /// Whether the golden's margin for this capture's selections may be below `bound`: a recorded
  /// selection of the kind at this step and layer is, or the kind's smallest margin is (the golden
  /// records selections one by one only below its rule, SCHEMA §6). `recorded` says which.
  bool below(const std::string& capture, int step, int layer, double bound, bool* recorded) const {
    *recorded = false;
    const auto it = kinds.find(kind_of(capture));
    if (it == kinds.end()) return false;
    for (const Recorded& r : it->second.recorded)
      if (r.step == step && (r.layer == layer || capture == "logits") && r.rel_gap < bound) return *recorded = true;
    return it->second.min_rel_gap >= 0 && it->second.min_rel_gap < bound;
  }
};
Margins g_margins;  // --numerics fast

template <class Backend, class ModelT>
int report(const ds41::golden::Golden& g, ModelT& model, const ds41::golden::RunOptions& opt, bool quiet, bool verbose) {
  auto reports = ds41::golden::run(g, model, opt);
  long passed = 0, failed = 0, exact = 0;
  long discrete_diffs = 0, discrete_low_margin = 0, low_margin_recorded = 0, downstream = 0;
  std::printf("%-8s %-28s %-14s %-5s %12s %10s %6s %s\n", "step", "capture", "shape", "dtype", "rel-L2/mism",
              "ck-rel", "exact", "result");
  for (const auto& rep : reports) {
    std::string step = rep.step == 0 ? "prefill" : "decode" + std::to_string(rep.step - 1);
    bool after_low_margin = false;  // an excused discrete difference earlier in this step
    for (auto r : rep.results) {
      if (g_fast) {
        const bool discrete = r.dtype == ds41::CapType::kI32 || r.dtype == ds41::CapType::kBool;
        const bool argmax_differs = r.name == "logits" && rep.argmax_mine != rep.argmax_gold;
        if (!r.pass && r.present_mine && r.shape_ok && !discrete && !argmax_differs && r.rel_l2 <= kFastBound && r.ck_rel <= kFastBound) {
          r.pass = true;  // the fast policy's bound for float captures
          r.note += std::string(r.note.empty() ? "" : "; ") + "within the fast bound 1e-2";
        }
        if ((discrete && r.mismatches > 0 && r.present_mine && r.shape_ok) || argmax_differs) {
          ++discrete_diffs;
          bool recorded = false;
          if (g_margins.below(r.name, rep.step, ds41::golden::capture_layer(r.name), kFastBound, &recorded)) {
            ++discrete_low_margin;
            low_margin_recorded += recorded;
            after_low_margin = true;
            const bool float_ok = !argmax_differs || (r.rel_l2 <= kFastBound && r.ck_rel <= kFastBound);
            r.pass = float_ok;
            r.note += std::string(r.note.empty() ? "" : "; ") + "discrete difference where the golden's margin is below 1e-2" +
                      (recorded ? " (recorded)" : " (the kind's minimum)");
          }
        } else if (!r.pass && after_low_margin && r.present_mine && r.shape_ok) {
          ++downstream;
          r.pass = true;
          r.note += std::string(r.note.empty() ? "" : "; ") + "downstream of a discrete difference the margin excuses";
        }
      }
      if (g_exact && r.pass && !r.exact) {
        r.pass = false;
        r.note += std::string(r.note.empty() ? "" : "; ") + "within bounds, not bit-identical (--exact)";
      }
      (r.pass ? passed : failed)++;
      exact += r.exact;
      if (quiet && r.pass) continue;
      std::string shape = ds41::shape_str({r.shape.begin(), r.shape.end()});
      char metric[32];
      if (r.dtype == ds41::CapType::kI32 || r.dtype == ds41::CapType::kBool)
        std::snprintf(metric, sizeof metric, "%ld", r.mismatches);
      else
        std::snprintf(metric, sizeof metric, "%.3e", r.rel_l2);
      std::printf("%-8s %-28s %-14s %-5s %12s %10.2e %6s %s%s%s\n", step.c_str(), r.name.c_str(), shape.c_str(),
                  ds41::cap_type_name(r.dtype), metric, r.ck_rel, r.exact ? "yes" : "no", r.pass ? "pass" : "FAIL",
                  r.note.empty() ? "" : "  ", r.note.c_str());
      if (verbose)
        for (const auto& d : r.first_diffs)
          std::printf("         [%ld] mine %.9g golden %.9g\n", d.index, d.mine, d.gold);
    }
  }
  std::printf("# %s on %s: %ld of %ld captures bit-identical to the reference\n", g.name.c_str(), Backend::kName,
              exact, passed + failed);
  if (g_fast)
    std::printf("# fast numerics: %ld discrete differences, %ld of them where the golden's margin is below 1e-2 relative "
                "(%ld at a selection the golden records, the rest by the kind's smallest margin); %ld later captures of "
                "those steps outside the bound, excused with them\n",
                discrete_diffs, discrete_low_margin, low_margin_recorded, downstream);
  std::printf("%ld passed, %ld failed\n", passed, failed);
  return failed ? 1 : 0;
}

template <class Backend>
int run(const ds41::golden::Golden& g, const ds41::golden::RunOptions& opt, bool quiet, bool verbose) {
  ds41::WeightSet w = ds41::golden::regenerate_weights(g);
  ds41::Model<Backend> model(g.config, w);
  return report<Backend>(g, model, opt, quiet, verbose);
}

/// The golden's model with its weights from a safetensors checkpoint directory; `streamed` > 0:
/// routed experts through an expert cache of that many experts, engram rows read on demand.
/// kStreamable = false compiles the resident model alone (--numerics fast: one more Model type only).
template <class Backend, bool kStreamable = true>
int run_checkpoint(const ds41::golden::Golden& g, const std::string& dir, long streamed,
                   const ds41::golden::RunOptions& opt, bool quiet, bool verbose) {
  ds41::SafetensorsWeights w(dir, g.config.max_seq_len, g.config.engram);
  const ds41::ModelConfig& c = w.config();
  if (c.n_layers != g.config.n_layers || c.dim != g.config.dim || c.vocab_size != g.config.vocab_size ||
      c.n_routed_experts != g.config.n_routed_experts)
    ds41::fail("checkpoint ", dir, ": config.json (", c.n_layers, " layers, dim ", c.dim, ", vocab ", c.vocab_size,
               ", ", c.n_routed_experts, " experts) is not the golden's model (", g.config.n_layers, " layers, dim ",
               g.config.dim, ", vocab ", g.config.vocab_size, ", ", g.config.n_routed_experts, " experts)");
  std::printf("# weights from checkpoint %s (%d shards, %zu tensors)\n", dir.c_str(), w.shards().shard_count(),
              w.shards().tensors().size());
  if (!kStreamable || streamed <= 0) {
    ds41::Model<Backend> model(c, w);
    return report<Backend>(g, model, opt, quiet, verbose);
  }
  if constexpr (kStreamable) {
    typename ds41::StreamedExperts<Backend>::Cache cache(w, {.capacity_experts = streamed});
    ds41::Model<Backend, ds41::StreamedExperts<Backend>, ds41::RowReaderTable<Backend>> model(c, w, cache);
    const int rc = report<Backend>(g, model, opt, quiet, verbose);
    const ds41::ExpertCounters k = cache.counters();
    std::printf("# expert cache (%ld experts): %lu hits, %lu misses, %lu prefetch hits (rate %.2f), %lu issued, "
                "%lu dropped, %lu bytes read\n",
                cache.capacity(), static_cast<unsigned long>(k.hits), static_cast<unsigned long>(k.misses),
                static_cast<unsigned long>(k.prefetch_hits), k.prefetch_hit_rate(),
                static_cast<unsigned long>(k.prefetch_issued), static_cast<unsigned long>(k.prefetch_dropped),
                static_cast<unsigned long>(k.bytes_read));
    return rc;
  }
  return 2;  // not reached: the resident branch above returns
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, backend = "host", checkpoint;
  long streamed = 0;
  std::vector<std::string> steps, layers;
  bool quiet = false, verbose = false, force = false, graph_oracle = false, rewind = false;
  std::string numerics = "exact";
  std::vector<int> chunks;
  int batch_with = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
      return argv[++i];
    };
    try {
      if (a == "--backend") backend = value("--backend");
      else if (a == "--steps") steps = split(value("--steps"));
      else if (a == "--layers") layers = split(value("--layers"));
      else if (a == "--quiet") quiet = true;
      else if (a == "--verbose") verbose = true;
      else if (a == "--force-inputs") force = true;
      else if (a == "--graph-oracle") graph_oracle = true;
      else if (a == "--checkpoint") checkpoint = value("--checkpoint");
      else if (a == "--exact") g_exact = true;
      else if (a == "--numerics") {
        numerics = value("--numerics");
        if (numerics != "exact" && numerics != "fast") return usage(("--numerics: not exact or fast: " + numerics).c_str());
      }
      else if (a == "--rewind") rewind = true;
      else if (a == "--chunks") {
        for (const std::string& c : split(value("--chunks"))) {
          if (c.size() > 6 || c.find_first_not_of("0123456789") != std::string::npos || std::stoi(c) < 1)
            return usage(("--chunks: not a list of positive sizes: '" + c + "'").c_str());
          chunks.push_back(std::stoi(c));
        }
        if (chunks.empty()) return usage("--chunks: no sizes given");
      } else if (a == "--batch-with") {
        const std::string v = value("--batch-with");
        if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos)
          return usage(("--batch-with: not a count in [0, 999]: " + v).c_str());
        batch_with = std::stoi(v);
      }
      else if (a == "--streamed-experts") {
        const std::string v = value("--streamed-experts");
        if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos || std::stol(v) < 1)
          return usage(("--streamed-experts: not a positive count: " + v).c_str());
        streamed = std::stol(v);
      }
      else if (a == "-h" || a == "--help") return std::printf("%s\n%s\n", kUsage, kHelp), 0;
      else if (!a.empty() && a[0] == '-') return usage(("unknown option " + a).c_str());
      else if (path.empty()) path = a;
      else return usage(("unexpected argument " + a).c_str());
    } catch (const std::exception& e) {
      return usage(e.what());
    }
  }
  if (path.empty()) return usage("no golden file given");
  try {
    ds41::golden::Golden g = ds41::golden::load(path);
    ds41::golden::RunOptions opt;
    opt.force_inputs = force;
    opt.chunks = chunks;
    opt.rewind = rewind;
    opt.batch_with = batch_with;
    for (const auto& s : steps) {
      int idx = -1;
      if (s == "prefill") idx = 0;
      else if (s.rfind("decode", 0) == 0 && s.size() > 6 && s.find_first_not_of("0123456789", 6) == std::string::npos)
        idx = 1 + std::stoi(s.substr(6));
      if (idx < 0 || idx >= static_cast<int>(g.steps.size()))
        return usage(("--steps: no step '" + s + "' in this golden").c_str());
      opt.steps.push_back(idx);
    }
    for (const auto& l : layers) {
      if (l.find_first_not_of("0123456789") != std::string::npos || std::stoi(l) >= g.config.n_layers)
        return usage(("--layers: no layer '" + l + "' in this golden").c_str());
      opt.layers.push_back(std::stoi(l));
    }
    if (graph_oracle && backend != "cuda") return usage("--graph-oracle needs --backend cuda");
    if (numerics == "fast" && backend != "cuda")
      return usage("--numerics fast needs --backend cuda (the host backend has the exact numerics only)");
    if (numerics == "fast" && (graph_oracle || streamed > 0 || g_exact))
      return usage("--numerics fast does not take --graph-oracle, --streamed-experts or --exact");
    if (streamed > 0 && checkpoint.empty()) return usage("--streamed-experts needs --checkpoint DIR");
    if (graph_oracle && !checkpoint.empty()) return usage("--graph-oracle does not take --checkpoint");
    if (graph_oracle && (!chunks.empty() || rewind || batch_with))
      return usage("--graph-oracle does not take --chunks, --rewind or --batch-with");
    if (backend == "host" && !checkpoint.empty())
      return run_checkpoint<ds41::HostBackend>(g, checkpoint, streamed, opt, quiet, verbose);
    if (backend == "host") return run<ds41::HostBackend>(g, opt, quiet, verbose);
#if DS41_WITH_CUDA
    if (backend == "cuda") {
      if (!ds41::CudaBackend::device_available()) {
        std::fprintf(stderr, "ds41-golden: no CUDA device available\n");
        return 2;
      }
      if (graph_oracle) return ds41::examples::graph_oracle(g, ds41::golden::regenerate_weights(g));
      if (numerics == "fast") {
        g_fast = true;
        g_margins = Margins::load(path);
        if (!checkpoint.empty()) return run_checkpoint<ds41::CudaFastBackend, false>(g, checkpoint, 0, opt, quiet, verbose);
        return run<ds41::CudaFastBackend>(g, opt, quiet, verbose);
      }
      if (!checkpoint.empty()) return run_checkpoint<ds41::CudaBackend>(g, checkpoint, streamed, opt, quiet, verbose);
      return run<ds41::CudaBackend>(g, opt, quiet, verbose);
    }
#endif
    return usage(("backend '" + backend + "' is not available in this build").c_str());
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-golden: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-golden: unexpected error: %s\n", e.what());
    return 2;
  }
}
