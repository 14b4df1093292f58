// bench/bench_v41.hpp — a whole DeepSeek-V4.1-Flash-shaped decode step with synthetic weights
// (bench_common.hpp's v41_config and V41SyntheticWeights), for any backend: bench_layer runs it on
// the host, bench_cuda on the device. Bytes/s counts the weight bytes one decode step reads.
#pragma once
#include <benchmark/benchmark.h>
#include <string>
#include <type_traits>
#include <vector>
#include "bench_common.hpp"
#include "ds41/model/model.hpp"

namespace ds41::bench {

/// Bytes of an r x k weight matrix in format f as a backend stores it: the host's packed panels
/// (`packed`: host_panels::packed_bytes, fp4 scales as e8m0 bytes), else payload and f32 block
/// scales.
inline double matrix_bytes(WeightFormat f, double r, double k, bool packed = false) {
  if (packed) return static_cast<double>(host_panels::packed_bytes(f, static_cast<int>(r), static_cast<int>(k)));
  return static_cast<double>(payload_bytes(f, static_cast<long>(r), static_cast<long>(k))) +
         (f == WeightFormat::kFp4Block32   ? r * ((k + 31) / 32) * 4
          : f == WeightFormat::kFp8Block32 ? ((r + 31) / 32) * ((k + 31) / 32) * 4
                                           : 0);
}

/// Weight bytes one decode step of one layer reads: attention, compressor/indexer, router, the
/// active routed experts and the shared one (`packed`: as matrix_bytes).
inline double layer_step_bytes(const ModelConfig& c, bool source, bool packed) {
  const auto mat = [&](WeightFormat f, double r, double k) { return matrix_bytes(f, r, k, packed); };
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

/// Decode steps after a prefill of `prompt` tokens on backend B. Args: layers, prompt tokens.
template <class B>
void v41_decode_steps(benchmark::State& st) {
  const int layers = static_cast<int>(st.range(0));
  const long prompt = st.range(1);
  const ModelConfig c = v41_config(layers);
  V41SyntheticWeights w;
  Model<B> model(c, w);
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
  const bool packed = std::is_same_v<B, HostBackend> && host_gemv::kVectorised;  // upload_linear_weights' panels
  for (int l = 0; l < layers; ++l) bytes += layer_step_bytes(c, l == 0, packed);
  bytes += matrix_bytes(WeightFormat::kF32, c.vocab_size, c.dim);  // the head (f32 here), read every step
  set_stream_counters(st, bytes, 2.0 * bytes);  // ~2 FLOP per weight byte at fp8
  st.counters["tokens/s"] = benchmark::Counter(static_cast<double>(st.iterations()), benchmark::Counter::kIsRate);
  st.SetLabel(std::to_string(layers) + " layer(s), 32 of 384 experts resident, prompt " + std::to_string(prompt));
}

}  // namespace ds41::bench
