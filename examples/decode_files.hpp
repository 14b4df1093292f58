// decode_files.hpp — ds41-decode on a model read from files: GGUF shards, or a safetensors checkpoint
// directory in DeepSeek's release layout (config.json in the HF form and/or inference/config.json,
// shards + index, tokenizer.json). Routed experts are streamed through an expert cache (default:
// half of one layer's experts, at least 1) with next-layer prefetch, engram rows read on demand;
// --cache-bytes gives the cache a byte budget instead; --direct-io reads experts with O_DIRECT,
// --readers N prefetches on N threads. A GGUF model's DSpark draft head comes from its own file
// (--gguf-draft, GgufWeights' draft: gguf_draft.hpp). Progress lines while indexing and loading; cache counters at
// the end, with the hit rate of every layer.
#pragma once
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>
#include "decode_options.hpp"
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/testing/golden.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"
#include "generate.hpp"

/// The configuration the model is built with: DSpark's draft head only for --dspark (its stages'
/// experts are resident: gigabytes at the released size), which then needs one.
inline ds41::ModelConfig model_config(ds41::ModelConfig c, const DecodeOptions& o) {
  if (o.dspark) {
    DS41_CHECK(c.has_dspark(), "--dspark: the model has no DSpark draft head (its configuration has n_mtp_layers ",
               c.n_mtp_layers, ", dspark_block_size ", c.dspark_block_size, ")",
               !o.gguf.empty() && o.gguf_draft.empty()
                   ? "; a GGUF model's draft head is a file of its own: give --gguf-draft FILE"
                   : "");
    DS41_CHECK(o.draft_len <= c.dspark_block_size, "--draft-len ", o.draft_len, " exceeds the draft block size ",
               c.dspark_block_size);
  } else {
    c.dspark_block_size = 0;
  }
  return c;
}

/// Loads the model from `w` (GgufWeights or SafetensorsWeights), generates, prints.
template <class W>
int ds41_decode_from(const W& w, const std::string& what, const std::vector<int32_t>& prompt, GenerateOptions gen,
                     const DecodeOptions& o, std::chrono::steady_clock::time_point t0) {
  using HB = ds41::HostBackend;
  const ds41::ModelConfig& c = w.config();
  std::printf("model: %s (%d layers, dim %d, hc %d, %d experts top-%d, vocab %ld), %d shards\n", what.c_str(),
              c.n_layers, c.dim, c.hc_mult, c.n_routed_experts, c.n_activated_experts, c.vocab_size,
              w.shards().shard_count());
  if constexpr (requires { w.draft(); })
    if (const auto* d = w.draft()) {
      std::printf("draft: %s (DSpark draft file, %s family, %d stages, block size %d, %d experts top-%d)\n",
                  d->shards().path().c_str(), ds41::gguf::draft_family_name(d->family()), c.n_mtp_layers,
                  c.dspark_block_size, c.dspark_experts(), c.dspark_active_experts());
    }
  for (int32_t t : prompt)
    DS41_CHECK(t >= 0 && t < c.vocab_size, "prompt: token id ", t, " outside the model's vocab [0, ", c.vocab_size, ")");
  const long room = c.max_seq_len - static_cast<long>(prompt.size());
  DS41_CHECK(room >= 1, "prompt: ", prompt.size(), " tokens leave no room in the model's max_seq_len ", c.max_seq_len);
  if (gen.n_tokens > room) {
    DS41_CHECK(!o.tokens_given, "--tokens ", gen.n_tokens, ": the model's max_seq_len ", c.max_seq_len,
               " leaves room for ", room, " after the ", prompt.size(), "-token prompt");
    gen.n_tokens = room;
  }
  ds41::StreamOptions opt;
  if (o.cache_bytes) opt.capacity_bytes = o.cache_bytes;
  else opt.capacity_experts = o.cache_experts ? o.cache_experts : std::max(1, c.n_routed_experts / 2);
  opt.direct_io = o.read.direct_io;
  opt.readers = o.read.readers;
  ds41::StreamedExperts<HB>::Cache cache(w, opt);
  if (o.cache_bytes) ds41::StreamedExperts<HB>::check_budget(cache, c.n_activated_experts);
  std::printf("loading dense weights (experts streamed, cache of %ld experts of %llu bytes, %s, %d reader%s)...\n",
              cache.capacity(), static_cast<unsigned long long>(cache.slices().max_expert_bytes()),
              !o.read.direct_io ? "buffered reads" : cache.direct_io() ? "O_DIRECT" : "pread + DONTNEED (O_DIRECT refused)",
              o.read.readers, o.read.readers == 1 ? "" : "s");
  std::fflush(stdout);
  ds41::Model<HB, ds41::StreamedExperts<HB>, ds41::RowReaderTable<HB>> model(model_config(c, o), w, cache);
  auto t1 = std::chrono::steady_clock::now();
  std::printf("loaded in %.3f s\nprompt (%zu):", std::chrono::duration<double>(t1 - t0).count(), prompt.size());
  for (int32_t t : prompt) std::printf(" %d", t);
  std::printf("\n");
  if (o.dspark) DS41_CHECK(model.has_draft_head(), "--dspark: ", what, " carries no DSpark draft head (no mtp.* tensors)");
  if (o.dspark) generate_speculative(model, prompt, gen, static_cast<int>(o.draft_len), o.confidence);
  else generate(model, prompt, gen);
  const ds41::ExpertCounters k = cache.counters();
  std::printf("expert cache: %lu hits, %lu misses, %lu prefetch hits (prefetch hit rate %.2f), %lu bytes read\n",
              static_cast<unsigned long>(k.hits), static_cast<unsigned long>(k.misses),
              static_cast<unsigned long>(k.prefetch_hits), k.prefetch_hit_rate(), static_cast<unsigned long>(k.bytes_read));
  std::printf("expert reads: %.3f s reading, %.3f s waited for (%.0f%% hidden behind compute)\n", k.read_seconds,
              k.wait_seconds, 100.0 * k.hidden_share());
  std::printf("hit rate by layer:");
  for (size_t l = 0; l < k.layer_hits.size(); ++l)
    std::printf(" %zu:%.2f(%lu/%lu)", l, k.hit_rate(static_cast<int>(l)), static_cast<unsigned long>(k.layer_hits[l]),
                static_cast<unsigned long>(k.layer_hits[l] + k.layer_misses[l]));
  std::printf("\n");
  return 0;
}
