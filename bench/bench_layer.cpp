// Whole-layer and whole-decode-step benchmarks at DeepSeek-V4.1-Flash shapes with synthetic weights
// (dim 5120, 64 heads x 512, q rank 1280, o 8 x 1024, top-6 experts x 2304, index 32 x 128 top 512,
// window 128, hc 4), dense weights fp8 32x32-block, experts fp4 per-32, as the released model.
// To fit this machine, a layer holds 32 routed experts instead of 384 (a decode step touches 6 +
// the shared one either way) and the vocabulary is 8192 (the head is a separate GEMV benchmark).
// Bytes/s counts the weight bytes one decode step reads (attention, router, active experts).
#include <benchmark/benchmark.h>
#include <map>
#include <mutex>
#include <string>
#include "bench_common.hpp"
#include "ds41/ds41.hpp"

using namespace ds41;

namespace {

/// Synthetic V4.1-shaped config: layer 0 a ratio-4 kv/index source, layer 1 (when present) a
/// ratio-4 consumer.
ModelConfig v41_config(int n_layers) {
  ModelConfig c;
  c.max_seq_len = 4096;
  c.vocab_size = 8192;
  c.dim = 5120;
  c.moe_inter_dim = 2304;
  c.n_layers = n_layers;
  c.n_heads = 64;
  c.n_routed_experts = 32;
  c.n_activated_experts = 6;
  c.route_scale = 2.5;
  c.swiglu_limit = 10.0;
  c.q_lora_rank = 1280;
  c.head_dim = 512;
  c.rope_head_dim = 64;
  c.o_groups = 8;
  c.o_lora_rank = 1024;
  c.window_size = 128;
  c.compress_ratios.assign(n_layers, 4);
  c.kv_source_layers = {0};
  c.index_source_layers = {0};
  c.original_seq_len = 65536;
  c.rope_factor = 16;
  c.index_n_heads = 32;
  c.index_head_dim = 128;
  c.index_topk = 512;
  c.hc_mult = 4;
  c.hc_sinkhorn_iters = 20;
  return c;
}

/// Weights made on request, in the released model's formats; nothing is held twice.
class SyntheticWeights : public WeightSource {
 public:
  bool has(const std::string&) const override { return true; }
  HostTensor load(const std::string& name, const std::vector<long>& shape) const override {
    const uint64_t seed = std::hash<std::string>{}(name);
    if (shape.size() == 2) {
      WeightFormat f = WeightFormat::kFp8Block32;
      if (name.find(".experts.") != std::string::npos) f = WeightFormat::kFp4Block32;
      if (name.find("hc_") != std::string::npos || name.find("compressor.w") != std::string::npos ||
          name == "head.weight")
        f = WeightFormat::kF32;
      if (name == "embed.weight" || name.find("gate.weight") != std::string::npos ||
          name.find("weights_proj") != std::string::npos || name.find("wo_a") != std::string::npos ||
          name.find("indexer.wk") != std::string::npos)
        f = WeightFormat::kBF16;
      return bench::random_matrix(f, shape[0], shape[1], seed);
    }
    std::vector<float> v(shape.empty() ? 1 : shape[0], 1.0f);  // norm weights, scales: 1
    if (name.find("bias") != std::string::npos || name.find("base") != std::string::npos ||
        name.find("attn_sink") != std::string::npos)
      std::fill(v.begin(), v.end(), 0.0f);
    return HostTensor::from_f32(shape, v);
  }
};

/// Weight bytes one decode step of one layer reads: attention, compressor/indexer, router, the
/// active routed experts and the shared one.
double layer_step_bytes(const ModelConfig& c, bool source) {
  auto mat = [](WeightFormat f, double r, double k) {
    return static_cast<double>(bench::payload_bytes(f, static_cast<long>(r), static_cast<long>(k))) +
           (f == WeightFormat::kFp4Block32 ? r * ((k + 31) / 32) * 4 : f == WeightFormat::kFp8Block32 ? ((r + 31) / 32) * ((k + 31) / 32) * 4 : 0);
  };
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
  const ModelConfig c = v41_config(layers);
  SyntheticWeights w;
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
  bench::set_stream_counters(st, bytes, 2.0 * bytes);  // ~2 FLOP per weight byte at fp8
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.SetLabel(std::to_string(layers) + " layer(s), 32 of 384 experts resident, prompt " + std::to_string(prompt));
}
// one layer (the kv/index source) and a two-layer step (source + consumer) after a 256-token prompt
BENCHMARK(BM_V41DecodeStep)->Args({1, 256})->Args({2, 256})->UseRealTime()->Unit(benchmark::kMillisecond)->Iterations(5);

BENCHMARK(bench::BM_StreamRead)->Arg(1024)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
