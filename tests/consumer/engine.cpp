// engine.cpp — the consumer project's main: loads each golden given on the command line, runs it on
// the host backend and counts the captures that are not bit-identical to the reference.
// Exit 0: every capture of every golden bit-identical; 1: some differ; 2: ds41 refused (its
// ds41::Error, e.g. a compiler whose contraction it cannot confine) or bad input.
#include <cstdio>
#include <exception>
#include "ds41/ds41.hpp"
#include "ds41/testing/golden_run.hpp"

// The engine's own arithmetic, compiled with its own flags: with -ffp-contract=fast this fuses.
// ds41's headers above must not have changed that (their pragmas end with each header).
float engine_axpy(float a, float x, float y) { return a * x + y; }

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: engine GOLDEN.json...\n");
    return 2;
  }
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      const ds41::golden::Golden g = ds41::golden::load(argv[i]);
      const ds41::WeightSet weights = ds41::golden::regenerate_weights(g);
      ds41::Model<ds41::HostBackend> model(g.config, weights);
      long total = 0, differ = 0;
      for (const auto& rep : ds41::golden::run(g, model))
        for (const auto& r : rep.results) {
          ++total;
          if (!r.exact) {
            ++differ;
            if (differ <= 5) std::printf("  differs: step %d %s\n", rep.step, r.name.c_str());
          }
        }
      std::printf("%s: %ld of %ld captures bit-identical\n", argv[i], total - differ, total);
      if (differ || total == 0) status = status ? status : 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", argv[i], e.what());
      return 2;
    }
  }
  return status;
}
