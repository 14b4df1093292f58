// Host microbenchmarks: a streaming-read bandwidth reference, the weight-streaming GEMV of each
// format at DeepSeek-V4.1-Flash shapes, and the tiny model's decode step. Counters report bytes/s
// (and FLOP/s) so every number can be read against the bandwidth measured in the same run.
#include <benchmark/benchmark.h>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/io/golden.hpp"

using namespace ds41;

namespace {

// Streaming read of a buffer far larger than the last-level cache.
void BM_MemoryReadBandwidth(benchmark::State& st) {
  const size_t n = static_cast<size_t>(st.range(0)) << 20 >> 3;  // MiB -> uint64 words
  std::vector<uint64_t> buf(n);
  std::iota(buf.begin(), buf.end(), 1);
  for (auto _ : st) {
    uint64_t acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
    for (size_t i = 0; i + 4 <= n; i += 4) {
      acc0 += buf[i];
      acc1 += buf[i + 1];
      acc2 += buf[i + 2];
      acc3 += buf[i + 3];
    }
    benchmark::DoNotOptimize(acc0 + acc1 + acc2 + acc3);
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * n * 8);
}
BENCHMARK(BM_MemoryReadBandwidth)->Arg(512)->Unit(benchmark::kMillisecond);

HostTensor random_matrix(WeightFormat f, int rows, int cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(0, 255);
  HostTensor t;
  t.shape = {rows, cols};
  t.format = f;
  size_t bytes = f == WeightFormat::kBF16 ? size_t(rows) * cols * 2
               : f == WeightFormat::kF32 ? size_t(rows) * cols * 4
               : f == WeightFormat::kFp8Block32 ? size_t(rows) * cols : size_t(rows) * cols / 2;
  t.payload.resize(bytes);
  for (auto& b : t.payload) b = static_cast<uint8_t>(byte(rng) & (f == WeightFormat::kFp8Block32 ? 0x77 : 0xFF));
  if (f == WeightFormat::kBF16) {  // keep values finite
    auto* p = reinterpret_cast<uint16_t*>(t.payload.data());
    for (size_t i = 0; i < size_t(rows) * cols; ++i) p[i] = bf16_bits((byte(rng) - 128) / 1024.0f);
  }
  if (f == WeightFormat::kFp8Block32) t.scales.assign(size_t((rows + 31) / 32) * ((cols + 31) / 32), 0.01f);
  if (f == WeightFormat::kFp4Block32) t.scales.assign(size_t(rows) * ((cols + 31) / 32), 0.01f);
  return t;
}

// y = W x for one token: the decode GEMV, weight-streaming bound. Args: rows, cols.
template <WeightFormat F>
void BM_Gemv(benchmark::State& st) {
  const int rows = static_cast<int>(st.range(0)), cols = static_cast<int>(st.range(1));
  HostTensor w = random_matrix(F, rows, cols, 1);
  Matrix<HostBackend> m(w);
  std::vector<float> x(cols), y(rows);
  for (int i = 0; i < cols; ++i) x[i] = bf16_round(std::sin(0.1f * i));
  for (auto _ : st) {
    HostBackend::linear(x.data(), 1, cols, m.view(), y.data(), rows, OutRound::kBF16);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * (w.payload.size() + w.scales.size() * 4));
  st.counters["FLOP/s"] = benchmark::Counter(2.0 * rows * cols * st.iterations(), benchmark::Counter::kIsRate);
}
// V4.1-Flash shapes: wq_a [1280, 5120], wq_b [64*512, 1280], an expert's w1 [2304, 5120]
BENCHMARK(BM_Gemv<WeightFormat::kBF16>)->Args({1280, 5120})->Args({2304, 5120})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemv<WeightFormat::kFp8Block32>)->Args({1280, 5120})->Args({32768, 1280})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Gemv<WeightFormat::kFp4Block32>)->Args({2304, 5120})->Args({5120, 2304})->Unit(benchmark::kMicrosecond);

// One decode step of the tiny golden model (all layers, head).
void BM_TinyDecodeStep(benchmark::State& st) {
  static golden::Golden g = golden::load(DS41_BENCH_GOLDEN);
  static WeightSet w = golden::regenerate_weights(g);
  Model<HostBackend> model(g.config, w);
  model.prefill(g.prompt_tokens);
  int32_t tok = 1;
  for (auto _ : st) {
    if (model.position() >= g.config.max_seq_len) {
      st.PauseTiming();
      model.release();
      model.prefill(g.prompt_tokens);
      st.ResumeTiming();
    }
    tok = model.decode(tok).argmax;
  }
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_TinyDecodeStep)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
