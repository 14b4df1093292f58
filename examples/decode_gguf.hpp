// ds41-decode --gguf FIRST_SHARD | --checkpoint DIR [--golden FILE] [--max-seq-len N]
//             [--prompt 1,2,3] [--tokens N] [--cache-experts N | --cache-bytes N[K|M|G|T]]
//             [--direct-io] [--readers N]
//
// Greedy decoding of a model read from files: GGUF shards, or an official-format safetensors
// checkpoint directory (config.json + model.safetensors.index.json + shards; --golden FILE
// supplies the engram hash parameters, which come from the tokenizer and are not in config.json,
// and the max_seq_len; --max-seq-len overrides it, default model.py's 4096). Routed experts are
// streamed through an expert cache (default: half of one layer's experts, at least 1) with
// next-layer prefetch, engram rows read on demand; --cache-bytes gives the cache a byte budget
// instead (it must hold one layer's n_activated_experts experts); --direct-io reads experts with
// O_DIRECT (pread + fadvise(DONTNEED) where refused), --readers N prefetches on N threads (1-64,
// default 1). Progress lines while indexing
// and loading; cache counters at the end, with the hit rate of every layer.
#pragma once
#include <chrono>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/io/gguf.hpp"
#include "ds41/io/golden.hpp"
#include "ds41/io/safetensors_weights.hpp"
#include "ds41/model/row_reader_table.hpp"
#include "ds41/model/streamed_experts.hpp"

inline constexpr const char* kDecodeFilesUsage =
    "ds41-decode --gguf FIRST_SHARD | --checkpoint DIR [--golden FILE] [--max-seq-len N] [--prompt 1,2,3] "
    "[--tokens N] [--cache-experts N | --cache-bytes N[K|M|G|T]] [--direct-io] [--readers N]";

/// How the expert cache reads (--direct-io, --readers).
struct DecodeReadOptions {
  bool direct_io = false;
  int readers = 1;
};

/// Loads the model from `w` (GgufWeights or SafetensorsWeights), decodes, prints.
template <class W>
int ds41_decode_from(const W& w, const std::string& what, const std::vector<int32_t>& prompt, long n_tokens,
                     long cache_experts, uint64_t cache_bytes, std::chrono::steady_clock::time_point t0,
                     const DecodeReadOptions& read = {}) {
  using HB = ds41::HostBackend;
  const ds41::ModelConfig& c = w.config();
  std::printf("model: %s (%d layers, dim %d, hc %d, %d experts top-%d, vocab %ld), %d shards\n", what.c_str(),
              c.n_layers, c.dim, c.hc_mult, c.n_routed_experts, c.n_activated_experts, c.vocab_size,
              w.shards().shard_count());
  if (static_cast<long>(prompt.size()) + n_tokens > c.max_seq_len) {
    std::fprintf(stderr, "ds41-decode: prompt + --tokens exceed the model's max_seq_len %ld (usage: %s)\n",
                 c.max_seq_len, kDecodeFilesUsage);
    return 2;
  }
  for (int32_t t : prompt)
    if (t < 0 || t >= c.vocab_size) {
      std::fprintf(stderr, "ds41-decode: --prompt: token id %d outside the vocab [0, %ld) (usage: %s)\n", t,
                   c.vocab_size, kDecodeFilesUsage);
      return 2;
    }
  ds41::StreamOptions opt;
  if (cache_bytes) opt.capacity_bytes = cache_bytes;
  else opt.capacity_experts = cache_experts ? cache_experts : std::max(1, c.n_routed_experts / 2);
  opt.direct_io = read.direct_io;
  opt.readers = read.readers;
  ds41::StreamedExperts<HB>::Cache cache(w, opt);
  if (cache_bytes) ds41::StreamedExperts<HB>::check_budget(cache, c.n_activated_experts);
  std::printf("loading dense weights (experts streamed, cache of %ld experts of %llu bytes, %s, %d reader%s)...\n",
              cache.capacity(), static_cast<unsigned long long>(cache.slices().max_expert_bytes()),
              !read.direct_io ? "buffered reads" : cache.direct_io() ? "O_DIRECT" : "pread + DONTNEED (O_DIRECT refused)",
              read.readers, read.readers == 1 ? "" : "s");
  std::fflush(stdout);
  ds41::Model<HB, ds41::StreamedExperts<HB>, ds41::RowReaderTable<HB>> model(c, w, cache);
  auto t1 = std::chrono::steady_clock::now();
  std::printf("loaded in %.3f s\nprompt (%zu):", std::chrono::duration<double>(t1 - t0).count(), prompt.size());
  for (int32_t t : prompt) std::printf(" %d", t);
  std::printf("\n");
  ds41::StepResult r = model.prefill(prompt);
  auto t2 = std::chrono::steady_clock::now();
  std::vector<int32_t> out{r.argmax};
  for (long i = 1; i < n_tokens; ++i) out.push_back(model.decode(out.back()).argmax);
  auto t3 = std::chrono::steady_clock::now();
  model.release();
  std::printf("generated (%zu):", out.size());
  for (int32_t t : out) std::printf(" %d", t);
  const double pre_s = std::chrono::duration<double>(t2 - t1).count(), dec_s = std::chrono::duration<double>(t3 - t2).count();
  std::printf("\nprefill: %zu tokens in %.3f ms\n", prompt.size(), pre_s * 1e3);
  if (n_tokens > 1) std::printf("decode: %ld tokens in %.3f ms (%.0f tokens/s)\n", n_tokens - 1, dec_s * 1e3, (n_tokens - 1) / dec_s);
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

inline int ds41_decode_gguf(int argc, char** argv) {
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "ds41-decode: %s (usage: %s)\n", msg.c_str(), kDecodeFilesUsage);
    return 2;
  };
  auto count = [](const std::string& v, long* out) {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stol(v);
    return true;
  };
  std::string gguf, checkpoint, golden_path, prompt_arg = "0,1,2,3";
  auto bytes = [](std::string v, uint64_t* out) {
    uint64_t mult = 1;
    if (!v.empty()) {
      const char u = v.back();
      const int shift = u == 'K' || u == 'k' ? 10 : u == 'M' || u == 'm' ? 20 : u == 'G' || u == 'g' ? 30 : u == 'T' || u == 't' ? 40 : 0;
      if (shift) {
        mult = uint64_t{1} << shift;
        v.pop_back();
      }
    }
    if (v.empty() || v.size() > 15 || v.find_first_not_of("0123456789") != std::string::npos) return false;
    const uint64_t n = std::stoull(v);
    if (n == 0 || n > (uint64_t{1} << 52) / mult) return false;
    *out = n * mult;
    return true;
  };
  long n_tokens = 16, cache_experts = 0, max_seq_len = 0;
  uint64_t cache_bytes = 0;
  DecodeReadOptions read;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--direct-io") {  // a flag: no value
      read.direct_io = true;
      continue;
    }
    if (i + 1 >= argc) return usage(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--gguf") gguf = v;
    else if (a == "--checkpoint") checkpoint = v;
    else if (a == "--golden") golden_path = v;
    else if (a == "--prompt") prompt_arg = v;
    else if (a == "--tokens") { if (!count(v, &n_tokens) || n_tokens < 1) return usage("--tokens: not a count: " + v); }
    else if (a == "--cache-experts") { if (!count(v, &cache_experts) || cache_experts < 1) return usage("--cache-experts: not a count: " + v); }
    else if (a == "--cache-bytes") { if (!bytes(v, &cache_bytes)) return usage("--cache-bytes: not a byte count: " + v); }
    else if (a == "--readers") {
      long n = 0;
      if (!count(v, &n) || n < 1 || n > 64) return usage("--readers: not a thread count in [1, 64]: " + v);
      read.readers = static_cast<int>(n);
    }
    else if (a == "--max-seq-len") { if (!count(v, &max_seq_len) || max_seq_len < 1) return usage("--max-seq-len: not a count: " + v); }
    else return usage("unknown argument " + a);
  }
  if (cache_experts && cache_bytes) return usage("give one of --cache-experts and --cache-bytes");
  if (gguf.empty() == checkpoint.empty()) return usage("give one of --gguf FIRST_SHARD and --checkpoint DIR");
  if (!gguf.empty() && (!golden_path.empty() || max_seq_len))
    return usage("--golden and --max-seq-len go with --checkpoint (a GGUF file carries both)");
  std::vector<int32_t> prompt;
  std::stringstream ss(prompt_arg);
  for (std::string item; std::getline(ss, item, ',');) {
    long t = 0;
    if (!count(item, &t)) return usage("--prompt: not a token id: '" + item + "'");
    prompt.push_back(static_cast<int32_t>(t));
  }
  if (prompt.empty()) return usage("--prompt: no token ids");
  try {
    auto t0 = std::chrono::steady_clock::now();
    auto progress = [](const std::string& s) {
      std::printf("%s\n", s.c_str());
      std::fflush(stdout);
    };
    if (!gguf.empty()) {
      ds41::GgufWeights w(gguf, progress);
      return ds41_decode_from(w, gguf, prompt, n_tokens, cache_experts, cache_bytes, t0, read);
    }
    std::optional<ds41::EngramHashParams> engram;
    long seq = 4096;  // model.py's ModelArgs.max_seq_len
    if (!golden_path.empty()) {
      const ds41::golden::Golden g = ds41::golden::load(golden_path);
      engram = g.config.engram;
      seq = g.config.max_seq_len;
    }
    if (max_seq_len) seq = max_seq_len;
    ds41::SafetensorsWeights w(checkpoint, seq, engram, progress);
    return ds41_decode_from(w, checkpoint, prompt, n_tokens, cache_experts, cache_bytes, t0, read);
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-decode: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-decode: unexpected error: %s\n", e.what());
    return 2;
  }
}
