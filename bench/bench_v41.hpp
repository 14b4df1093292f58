// bench/bench_v41.hpp — a whole DeepSeek-V4.1-Flash-shaped decode step with synthetic weights
// (bench_common.hpp's v41_config and V41SyntheticWeights), for any backend: bench_layer runs it on
// the host, bench_cuda on the device. Bytes/s counts the weight bytes one decode step reads.
#pragma once
#include <benchmark/benchmark.h>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <vector>
#include "bench_common.hpp"
#include "bench_peak.hpp"
#include "ds41/model/model.hpp"
#include "ds41/model/speculative.hpp"

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

/// One model of `layers` V4.1 layers and a sequence after a `prompt`-token prefill, as bytes
/// (Model::snapshot), made once per process and shared by the batch benchmarks: each restores
/// as many sequences as it needs from the bytes instead of running the prefill again.
template <class B>
struct V41Served {
  ModelConfig cfg;
  V41SyntheticWeights w;
  std::unique_ptr<Model<B>> model;
  std::vector<uint8_t> after_prompt;

  /// `cfg_of`: the configuration of a layer count (v41_config, or v41_dspark_config).
  static V41Served& get(int layers, long prompt, ModelConfig (*cfg_of)(int) = v41_config) {
    static std::map<std::tuple<int, long, ModelConfig (*)(int)>, std::unique_ptr<V41Served>> made;
    auto& p = made[{layers, prompt, cfg_of}];
    if (!p) {
      p = std::make_unique<V41Served>();
      p->cfg = cfg_of(layers);
      p->model = std::make_unique<Model<B>>(p->cfg, p->w);
      auto s = p->model->make_sequence();
      std::vector<int32_t> toks(prompt);
      for (long i = 0; i < prompt; ++i) toks[i] = static_cast<int32_t>((i * 7919) % p->cfg.vocab_size);
      p->model->extend(s, toks);
      p->after_prompt = p->model->snapshot(s);
    }
    return *p;
  }
};

/// Decode steps of a batch of `batch` sequences, one token each (Model::step: every weight pass
/// once over the rows), side by side with steps of one more sequence alone: each iteration runs
/// one step of each, timed apart, so that the ratio is taken under the same conditions (this VM's
/// speed drifts by tens of percent within minutes). Every sequence is the same 256-token prompt's
/// state (restored from its snapshot) and takes its own token each step, so rows route to
/// different experts. Args: layers, batch. Counters: tokens/s (the batch's rows), batch1_tokens/s,
/// vs_batch1 (their ratio), GFLOP/s (~2 per weight byte of the batch-1 step, per row: fp8 weights;
/// a rough count) and on the host its of_peak (bench_peak.hpp, measured in this process); bytes/s
/// counts the weights a batch-1 step reads (not the extra experts a wider batch routes to).
template <class B>
void v41_batch_steps(benchmark::State& st) {
  const int layers = static_cast<int>(st.range(0));
  const long batch = st.range(1);
  V41Served<B>& m = V41Served<B>::get(layers, 256);
  using Seq = typename Model<B>::Sequence;
  std::vector<Seq> seqs;
  for (long r = 0; r <= batch; ++r) seqs.push_back(m.model->restore(m.after_prompt));  // the last: alone
  std::vector<typename Model<B>::Segment> segs(batch), one(1);
  long step = 0;
  double batch_s = 0, alone_s = 0;
  for (auto _ : st) {
    if (seqs[0].length() >= m.cfg.max_seq_len) {
      st.PauseTiming();
      for (long r = 0; r <= batch; ++r) seqs[r] = m.model->restore(m.after_prompt);
      st.ResumeTiming();
    }
    for (long r = 0; r < batch; ++r) {
      segs[r].seq = &seqs[r];
      segs[r].tokens = {static_cast<int32_t>((r * 1009 + step * 31 + 1) % m.cfg.vocab_size)};
    }
    one[0].seq = &seqs[batch];
    one[0].tokens = {static_cast<int32_t>((step * 31 + 1) % m.cfg.vocab_size)};
    const auto t0 = std::chrono::steady_clock::now();
    m.model->step(segs);
    const auto t1 = std::chrono::steady_clock::now();
    m.model->step(one);
    const auto t2 = std::chrono::steady_clock::now();
    batch_s += std::chrono::duration<double>(t1 - t0).count();
    alone_s += std::chrono::duration<double>(t2 - t1).count();
    st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    ++step;
  }
  double bytes = 0;
  const bool packed = std::is_same_v<B, HostBackend> && host_gemv::kVectorised;
  for (int l = 0; l < layers; ++l) bytes += layer_step_bytes(m.cfg, l == 0, packed);
  bytes += matrix_bytes(WeightFormat::kF32, m.cfg.vocab_size, m.cfg.dim);
  const double it = static_cast<double>(st.iterations());
  st.SetBytesProcessed(static_cast<int64_t>(bytes * it));
  st.counters["tokens/s"] = it * static_cast<double>(batch) / batch_s;
  st.counters["batch1_tokens/s"] = it / alone_s;
  st.counters["vs_batch1"] = (it * static_cast<double>(batch) / batch_s) / (it / alone_s);
  st.counters["GFLOP/s"] = 2.0 * bytes * static_cast<double>(batch) * it / batch_s * 1e-9;
  if constexpr (std::is_same_v<B, HostBackend>)  // against the peak measured in this process
    st.counters["of_peak"] = 2.0 * bytes * static_cast<double>(batch) * it / batch_s / peak_mul_add_flops();
  st.SetLabel(std::to_string(layers) + " layer(s), batch " + std::to_string(batch) + " x 1 token, prompt 256");
}

/// Speculative verification: one sequence (after the 256-token prompt) checks a draft of
/// `draft` tokens in one segment with every row's logits, then rolls back to the checkpoint (as
/// a rejected draft). The draft's rows run as one batched step where ChunkPlan allows (here
/// always: one kv/index source). Side by side, each iteration verifies the same draft as `draft`
/// single-token steps (the reference's sequential definition; what ds41 did before chunks ran
/// batched) and rolls that back too. Counters: tokens/s (draft tokens verified),
/// sequential_tokens/s, vs_sequential (their ratio), rewind_us (checkpoint + rollback of the
/// batched verify). Args: layers, draft tokens.
template <class B>
void v41_verify_steps(benchmark::State& st) {
  const int layers = static_cast<int>(st.range(0));
  const long draft = st.range(1);
  V41Served<B>& m = V41Served<B>::get(layers, 256);
  auto s = m.model->restore(m.after_prompt);
  std::vector<int32_t> toks(draft);
  double rewind_s = 0, batched_s = 0, sequential_s = 0;
  long step = 0;
  for (auto _ : st) {
    for (long i = 0; i < draft; ++i) toks[i] = static_cast<int32_t>((step * 131 + i * 17 + 3) % m.cfg.vocab_size);
    auto t0 = std::chrono::steady_clock::now();
    s.checkpoint();
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(m.model->extend_rows(s, toks));
    auto t2 = std::chrono::steady_clock::now();
    s.rollback();
    auto t3 = std::chrono::steady_clock::now();
    s.checkpoint();
    for (long i = 0; i < draft; ++i) benchmark::DoNotOptimize(m.model->extend(s, {toks[i]}));
    auto t4 = std::chrono::steady_clock::now();
    s.rollback();
    rewind_s += std::chrono::duration<double>((t1 - t0) + (t3 - t2)).count();
    batched_s += std::chrono::duration<double>(t2 - t1).count();
    sequential_s += std::chrono::duration<double>(t4 - t3).count();
    st.SetIterationTime(std::chrono::duration<double>(t3 - t0).count());
    ++step;
  }
  const double it = static_cast<double>(st.iterations()), n = it * static_cast<double>(draft);
  st.counters["tokens/s"] = n / batched_s;
  st.counters["sequential_tokens/s"] = n / sequential_s;
  st.counters["vs_sequential"] = sequential_s / batched_s;
  st.counters["rewind_us"] = rewind_s * 1e6 / it;
  st.SetLabel(std::to_string(layers) + " layer(s), verify " + std::to_string(draft) + " tokens + rollback");
}

/// v41_config with one released-size DSpark stage (dim 5120, 128 experts top-3 x 2304, window
/// 128, block 5, Markov rank 256 as ModelArgs' default) reading every layer's input. The release
/// has 3 stages: its draft costs about 3 stages + the head.
inline ModelConfig v41_dspark_config(int n_layers) {
  ModelConfig c = v41_config(n_layers);
  c.n_mtp_layers = 1;
  c.dspark_block_size = 5;
  c.dspark_noise_token_id = 1;
  for (int l = 0; l < n_layers; ++l) c.dspark_target_layer_ids.push_back(l);
  c.dspark_markov_rank = 256;
  c.dspark_n_routed_experts = 128;
  c.dspark_n_activated_experts = 3;
  return c;
}

/// DSpark at the V4.1 shapes (v41_dspark_config), after a 256-token prompt: per iteration,
/// `tokens` tokens by plain greedy decoding (one step each), then the same tokens by speculative
/// rounds whose drafts are right `k` of 5 times (the head's draft runs and is timed, then its
/// tokens are replaced by plain decoding's next k and wrong ones: synthetic weights give no
/// meaningful acceptance of their own). Both from the same restored state, timed apart.
/// Counters: tokens/s, plain_tokens/s, vs_plain, draft_ms (a draft call), verify_ms (a verify
/// step of the anchor and 5 drafts), rewind_us (checkpoint + truncate + commit per round), tokens/round.
template <class B>
void v41_dspark_rounds(benchmark::State& st) {
  const int layers = static_cast<int>(st.range(0)), k = static_cast<int>(st.range(1));
  const long tokens = 12;
  V41Served<B>& served = V41Served<B>::get(layers, 256, v41_dspark_config);
  const ModelConfig& c = served.cfg;
  Model<B>& m = *served.model;
  const int block = c.dspark_block_size;
  double plain_s = 0, spec_s = 0;
  SpecStats total;
  for (auto _ : st) {
    // plain greedy decoding: the tokens speculation must give
    auto p = m.restore(served.after_prompt);
    std::vector<int32_t> plain{1};
    auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < tokens + block; ++i) plain.push_back(m.extend(p, {plain.back()}).argmax);
    auto t1 = std::chrono::steady_clock::now();
    plain_s += std::chrono::duration<double>(t1 - t0).count() * tokens / (tokens + block);
    // speculative rounds with forced drafts
    auto s = m.restore(served.after_prompt);
    Speculator<Model<B>> spec(m, {});
    size_t at = 0;  // plain[at] is the anchor
    t0 = std::chrono::steady_clock::now();
    while (static_cast<long>(at) < tokens) {
      DraftResult d = spec.draft(s, plain[at]);
      for (int i = 1; i < static_cast<int>(d.tokens.size()); ++i)
        d.tokens[i] = i <= k ? plain[at + i] : static_cast<int32_t>((plain[at + i] + 1) % c.vocab_size);
      const SpecRound r = spec.verify({{&s, plain[at]}}, {d}).at(0);
      DS41_CHECK(r.accepted == k && r.next == plain[at + k + 1], "bench: the forced draft was not accepted as planned");
      at += r.tokens.size();
    }
    t1 = std::chrono::steady_clock::now();
    spec_s += std::chrono::duration<double>(t1 - t0).count() * tokens / static_cast<double>(at);
    const SpecStats& k1 = spec.stats();
    total.rounds += k1.rounds;
    total.accepted += k1.accepted;
    total.draft_s += k1.draft_s;
    total.verify_s += k1.verify_s;
    total.rewind_s += k1.rewind_s;
    st.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
  const double it = static_cast<double>(st.iterations());
  st.counters["tokens/s"] = it * tokens / spec_s;
  st.counters["plain_tokens/s"] = it * tokens / plain_s;
  st.counters["vs_plain"] = plain_s / spec_s;
  st.counters["draft_ms"] = total.draft_s * 1e3 / static_cast<double>(total.rounds);
  st.counters["verify_ms"] = total.verify_s * 1e3 / static_cast<double>(total.rounds);
  st.counters["rewind_us"] = total.rewind_s * 1e6 / static_cast<double>(total.rounds);
  st.counters["tokens/round"] = total.tokens_per_round();
  st.SetLabel(std::to_string(layers) + " layer(s) + 1 DSpark stage (128 experts top-3), drafts right " +
              std::to_string(k) + " of 5");
}

}  // namespace ds41::bench
