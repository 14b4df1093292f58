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
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>
#include "golden_report.hpp"
#if DS41_WITH_CUDA
#include "golden_device.hpp"
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

}  // namespace

int main(int argc, char** argv) {
  std::string path, backend = "host", checkpoint;
  long streamed = 0;
  std::vector<std::string> steps, layers;
  bool force = false, graph_oracle = false, rewind = false;
  ds41::examples::ReportOptions ro;
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
      else if (a == "--quiet") ro.quiet = true;
      else if (a == "--verbose") ro.verbose = true;
      else if (a == "--force-inputs") force = true;
      else if (a == "--graph-oracle") graph_oracle = true;
      else if (a == "--checkpoint") checkpoint = value("--checkpoint");
      else if (a == "--exact") ro.exact = true;
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
    if (numerics == "fast" && (graph_oracle || streamed > 0 || ro.exact))
      return usage("--numerics fast does not take --graph-oracle, --streamed-experts or --exact");
    if (streamed > 0 && checkpoint.empty()) return usage("--streamed-experts needs --checkpoint DIR");
    if (graph_oracle && !checkpoint.empty()) return usage("--graph-oracle does not take --checkpoint");
    if (graph_oracle && (!chunks.empty() || rewind || batch_with))
      return usage("--graph-oracle does not take --chunks, --rewind or --batch-with");
    if (backend == "host" && !checkpoint.empty())
      return ds41::examples::run_checkpoint<ds41::HostBackend>(g, checkpoint, streamed, opt, ro);
    if (backend == "host") return ds41::examples::run_regenerated<ds41::HostBackend>(g, opt, ro);
#if DS41_WITH_CUDA
    if (backend == "cuda")
      return ds41::examples::run_on_device(g, path, {checkpoint, streamed, graph_oracle, numerics == "fast"}, opt, ro);
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
