// Whole-layer and whole-decode-step benchmarks at DeepSeek-V4.1-Flash shapes with synthetic weights
// (dim 5120, 64 heads x 512, q rank 1280, o 8 x 1024, top-6 experts x 2304, index 32 x 128 top 512,
// window 128, hc 4), dense weights fp8 32x32-block, experts fp4 per-32, as the released model.
// To fit this machine, a layer holds 32 routed experts instead of 384 (a decode step touches 6 +
// the shared one either way) and the vocabulary is 8192 (the head is a separate GEMV benchmark).
// Bytes/s counts the weight bytes one decode step reads (attention, router, active experts, the
// head).
#include <benchmark/benchmark.h>
#include <map>
#include <mutex>
#include <string>
#include "bench_common.hpp"
#include "ds41/ds41.hpp"

using namespace ds41;

namespace {

/// Bytes of an r x k weight matrix in format f: payload and f32 block scales.
double matrix_bytes(WeightFormat f, double r, double k) {
  return static_cast<double>(bench::payload_bytes(f, static_cast<long>(r), static_cast<long>(k))) +
         (f == WeightFormat::kFp4Block32 ? r * ((k + 31) / 32) * 4 : f == WeightFormat::kFp8Block32 ? ((r + 31) / 32) * ((k + 31) / 32) * 4 : 0);
}

/// Weight bytes one decode step of one layer reads: attention, compressor/indexer, router, the
/// active routed experts and the shared one.
double layer_step_bytes(const ModelConfig& c, bool source) {
  const auto mat = matrix_bytes;
  const double H = c.n_heads, D = c.head_dim, dim = c.dim, I = c.moe_inter_dim;
  double b = mat(WeightFormat::kFp8Block32, c.q_lora_rank, dim) + mat(WeightFormat::kFp8Block32, H * D, c.q_lora_rank) +
             mat(WeightFormat::kFp8Block32, D, dim) + mat(WeightFormat::kBF16, c.o_groups * c.o_lora_rank, H * D / c.o_groups) +
             mat(WeightFormat::kFp8Block32, dim, c.o_groups * c.o_lora_rank) + mat(WeightFormat::kBF16, c.n_routed_experts, dim) +
             2 * mat(WeightFormat::kF32, c.mix_hc(), c.hc_mult * dim);
  if (source)
    b += 2 * mat(WeightFormat::kF32, D, dim) + mat(WeightFormat::kFp8Block32, c.index_n_heads * c.index_head_dim, c.q_lora_rank) +
         mat(WeightFormat::kBF16, c.index_n_heads, dim) + mat(WeightFormat::kBF16, c.index_head_dim, D);
  b += (c.n_activated_experts) * (2 * mat(WeightFormat::kFp4Block32, I, dim) + mat(WeightFormat::kFp4Block32, dim, I));
  b += 2 * mat(WeightFormat::kFp8Block32, I, dim) + mat(WeightFormat::kFp8Block32, dim, I);  // shared expert
  return b;
}

/// Decode steps after a prefill of `prompt` tokens. Args: layers, prompt tokens.
void BM_V41DecodeStep(benchmark::State& st) {
  const int layers = static_cast<int>(st.range(0));
  const long prompt = st.range(1);
  const ModelConfig c = bench::v41_config(layers);
  bench::V41SyntheticWeights w;
  Model<HostBackend> model(c, w);
  std::vector<int32_t> toks(prompt);
  for (long i = 0; i < prompt; ++i) toks[i] = static_cast<int32_t>((i * 7919) % c.vocab_size);
  model.prefill(toks);
  int32_t t = 1;
  for (auto _ : st) {
    if (model.position() >= c.max_seq_len) {
      st.PauseTiming();
      model.release();
      model.prefill(toks);
      st.ResumeTiming();
    }
    t = model.decode(t).argmax;
  }
  double bytes = 0;
  for (int l = 0; l < layers; ++l) bytes += layer_step_bytes(c, l == 0);
  bytes += matrix_bytes(WeightFormat::kF32, c.vocab_size, c.dim);  // the head (f32 here), read every step
  bench::set_stream_counters(st, bytes, 2.0 * bytes);  // ~2 FLOP per weight byte at fp8
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.SetLabel(std::to_string(layers) + " layer(s), 32 of 384 experts resident, prompt " + std::to_string(prompt));
}
// one layer (the kv/index source) and a two-layer step (source + consumer) after a 256-token prompt
BENCHMARK(BM_V41DecodeStep)->Args({1, 256})->Args({2, 256})->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(5);

BENCHMARK(bench::BM_StreamRead)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
