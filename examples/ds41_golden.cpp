// ds41-golden — run a golden file (SCHEMA.md) on a backend and compare every capture.
//
//   ds41-golden GOLDEN.json [--backend host|cuda] [--steps prefill,decode0,...] [--layers 0,1,...]
//                           [--quiet] [--verbose] [--force-inputs]
// --verbose: the first differing samples of each capture. --force-inputs: teacher forcing — every
// float capture the golden holds in full replaces this run's tensor where it was taken, so each
// capture's error is the error of one component on exact inputs (a diagnosis mode).
// --graph-oracle (cuda): decode steps eager and as CUDA graph segments, compared bit for bit.
// Prints one row per capture (step, name, shape, dtype, rel-L2 or mismatches, exact, pass), then
// "N passed, M failed". Exit 0 when every compared capture passes, 1 on any mismatch, 2 on bad input.
#include <cstdio>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/io/golden_run.hpp"
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
    "[--quiet] [--verbose] [--force-inputs] [--graph-oracle]";

// bad input: exit code 2 and one line on stderr
int usage(const char* msg) {
  std::fprintf(stderr, "ds41-golden: %s (%s)\n", msg, kUsage);
  return 2;
}

template <class Backend>
int run(const ds41::golden::Golden& g, const ds41::golden::RunOptions& opt, bool quiet, bool verbose) {
  ds41::WeightSet w = ds41::golden::regenerate_weights(g);
  ds41::Model<Backend> model(g.config, w);
  auto reports = ds41::golden::run(g, model, opt);
  long passed = 0, failed = 0, exact = 0;
  std::printf("%-8s %-28s %-14s %-5s %12s %10s %6s %s\n", "step", "capture", "shape", "dtype", "rel-L2/mism",
              "ck-rel", "exact", "result");
  for (const auto& rep : reports) {
    std::string step = rep.step == 0 ? "prefill" : "decode" + std::to_string(rep.step - 1);
    for (const auto& r : rep.results) {
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
  std::printf("%ld passed, %ld failed\n", passed, failed);
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, backend = "host";
  std::vector<std::string> steps, layers;
  bool quiet = false, verbose = false, force = false, graph_oracle = false;
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
      else if (a == "-h" || a == "--help") return std::printf("%s\n", kUsage), 0;
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
    if (backend == "host") return run<ds41::HostBackend>(g, opt, quiet, verbose);
#if DS41_WITH_CUDA
    if (backend == "cuda") {
      if (!ds41::CudaBackend::device_available()) {
        std::fprintf(stderr, "ds41-golden: no CUDA device available\n");
        return 2;
      }
      if (graph_oracle) return ds41::examples::graph_oracle(g, ds41::golden::regenerate_weights(g));
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
