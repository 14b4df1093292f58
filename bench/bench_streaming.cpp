// Streamed expert reads vs a raw sequential read of the same GGUF shards (same run, same page
// cache state): the tiny golden's model is written to a temp directory, then
//   BM_RawSequentialRead        pread of every shard front to back in 1 MiB chunks
//   BM_StreamedExperts/0        every (layer, expert) through a 1-expert cache: pread + convert + upload
//   BM_StreamedExperts/1        the same with layer l+1's experts prefetched while layer l is consumed
// Counters report bytes/s (wall clock: the prefetch thread works off the main thread).
#include <benchmark/benchmark.h>
#include <cstdlib>
#include <filesystem>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/io/golden.hpp"
#include "ds41/model/streamed_experts.hpp"

using namespace ds41;

namespace {

struct Fixture {
  std::filesystem::path dir;
  std::vector<std::string> shards;
  Fixture() {
    std::string t = (std::filesystem::temp_directory_path() / "ds41-bench-XXXXXX").string();
    if (!::mkdtemp(t.data())) std::abort();
    dir = t;
    const golden::Golden g = golden::load(DS41_BENCH_GOLDEN);
    shards = gguf::write_model(g.config, golden::regenerate_weights(g), (dir / "tiny").string(), 2);
  }
  ~Fixture() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};
Fixture& fixture() {
  static Fixture f;
  return f;
}

void BM_RawSequentialRead(benchmark::State& st) {
  std::vector<gguf::PosixFile> files;
  for (const auto& p : fixture().shards) files.emplace_back(p);
  std::vector<uint8_t> buf(1 << 20);
  uint64_t bytes = 0;
  for (auto _ : st) {
    for (const auto& f : files)
      for (uint64_t at = 0; at < f.size(); at += buf.size()) {
        const uint64_t n = std::min<uint64_t>(buf.size(), f.size() - at);
        f.read_at(buf.data(), n, at, "bench");
        bytes += n;
      }
    benchmark::DoNotOptimize(buf.data());
  }
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_RawSequentialRead)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_StreamedExperts(benchmark::State& st) {
  const bool prefetch = st.range(0) != 0;
  GgufWeights w(fixture().shards[0]);
  const ModelConfig& c = w.config();
  ExpertCache<HostBackend> cache(w, {.capacity_experts = 1});
  std::vector<int> all(c.n_routed_experts);
  for (int e = 0; e < c.n_routed_experts; ++e) all[e] = e;
  for (auto _ : st) {
    for (int l = 0; l < c.n_layers; ++l) {
      if (prefetch && l + 1 < c.n_layers) cache.prefetch(l + 1, all);
      for (int e = 0; e < c.n_routed_experts; ++e) benchmark::DoNotOptimize(cache.get(l, e).w1.view().data);
    }
  }
  const ExpertCounters k = cache.counters();
  st.counters["bytes/s"] = benchmark::Counter(static_cast<double>(k.bytes_read), benchmark::Counter::kIsRate);
  st.counters["prefetch_hit_rate"] = k.prefetch_hit_rate();
}
BENCHMARK(BM_StreamedExperts)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
