// graph_oracle.hpp — ds41-golden --graph-oracle (CUDA builds): the decode steps of a golden run
// twice on the device, eagerly and as CUDA graph segments (CudaBackend::GraphScope), each layer's
// highway streams (h_mid, h_out), delayed mix (ffn_pre) and the final hidden state compared bit for
// bit; then the decode-step time of both modes without captures.
#pragma once
#include <chrono>
#include <cstdio>
#include <string>
#include "ds41/backend/cuda.hpp"
#include "ds41/testing/golden_run.hpp"

namespace ds41::examples {

inline int graph_oracle(const golden::Golden& g, const WeightSet& w) {
  Model<CudaBackend> eager(g.config, w), graphed(g.config, w);
  eager.prefill(g.prompt_tokens);
  graphed.prefill(g.prompt_tokens);
  long compared = 0, identical = 0;
  bool all_ok = true;
  std::printf("%-8s %-6s %-8s %-8s %-8s %s\n", "step", "layer", "h_mid", "h_out", "ffn_pre", "segments/nodes");
  for (size_t s = 1; s < g.steps.size(); ++s) {
    golden::CollectSink a, b;
    eager.decode(g.steps[s].tokens.at(0), &a);
    CudaBackend::take_graph_counters();
    {
      CudaBackend::GraphScope scope;
      graphed.decode(g.steps[s].tokens.at(0), &b);
    }
    auto [segments, nodes] = CudaBackend::take_graph_counters();
    auto same = [&](const std::string& name) {
      auto ia = a.items.find(name), ib = b.items.find(name);
      bool ok = ia != a.items.end() && ib != b.items.end() && ia->second.f32 == ib->second.f32 &&
                ia->second.i32 == ib->second.i32;
      ++compared;
      identical += ok;
      all_ok = all_ok && ok;
      return ok ? "same" : "DIFF";
    };
    for (int l = 0; l < g.config.n_layers; ++l) {
      const std::string p = "layers." + std::to_string(l) + ".";
      const char* hm = same(p + "h_mid");
      const char* ho = same(p + "h_out");
      const char* fp = same(p + "ffn_pre");
      std::printf("decode%-2zu %-6d %-8s %-8s %-8s %s\n", s - 1, l, hm, ho, fp,
                  l == 0 ? (std::to_string(segments) + "/" + std::to_string(nodes)).c_str() : "");
    }
    std::printf("decode%-2zu final  h_final %s, head_in %s, logits %s\n", s - 1, same("h_final"), same("head_in"),
                same("logits"));
  }
  // timing without captures: the segments then split only where routing goes to the host
  eager.release();
  graphed.release();
  CudaBackend::take_graph_reuse();
  eager.prefill(g.prompt_tokens);
  graphed.prefill(g.prompt_tokens);
  double t_eager = 0, t_graph = 0;
  const size_t steps = g.steps.size() - 1;
  for (size_t s = 1; s <= steps; ++s) {
    auto t0 = std::chrono::steady_clock::now();
    eager.decode(g.steps[s].tokens.at(0));
    auto t1 = std::chrono::steady_clock::now();
    {
      CudaBackend::GraphScope scope;
      graphed.decode(g.steps[s].tokens.at(0));
    }
    auto t2 = std::chrono::steady_clock::now();
    t_eager += std::chrono::duration<double>(t1 - t0).count();
    t_graph += std::chrono::duration<double>(t2 - t1).count();
  }
  auto [segments, nodes] = CudaBackend::take_graph_counters();
  auto [instantiated, updated] = CudaBackend::take_graph_reuse();
  std::printf("# decode step: eager %.3f ms, graph segments %.3f ms (%ld segments, %ld nodes over %zu steps; "
              "%ld instantiated, %ld reused by update)\n",
              1e3 * t_eager / steps, 1e3 * t_graph / steps, segments, nodes, steps, instantiated, updated);
  std::printf("# graph oracle: %ld of %ld compared tensors bit-identical\n", identical, compared);
  std::printf("%ld passed, %ld failed\n", identical, compared - identical);
  return all_ok ? 0 : 1;
}

}  // namespace ds41::examples
