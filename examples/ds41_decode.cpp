// ds41-decode — the demo decoder: the embedded tiny model (weights regenerated from the public
// golden's fixture, SCHEMA.md §1) on a prompt, greedy decoding.
//
//   ds41-decode [--golden FILE] [--prompt 1,2,3] [--tokens N]
//   ds41-decode --gguf FIRST_SHARD | --checkpoint DIR [...]   (decode_gguf.hpp: a model from files)
// Prints the prompt, the generated tokens and tokens/s. Exit 2 on bad input.
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/io/golden.hpp"
#include "decode_gguf.hpp"

#ifndef DS41_DEFAULT_GOLDEN
#define DS41_DEFAULT_GOLDEN "golden/ds41_tiny_golden.json"
#endif

// bad input: exit code 2 and one line on stderr
static int usage(const std::string& msg) {
  std::fprintf(stderr, "ds41-decode: %s (usage: ds41-decode [--golden FILE] [--prompt 1,2,3] [--tokens N])\n",
               msg.c_str());
  return 2;
}

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)  // a model from GGUF shards or a safetensors checkpoint (decode_gguf.hpp)
    if (std::string(argv[i]) == "--gguf" || std::string(argv[i]) == "--checkpoint") return ds41_decode_gguf(argc, argv);
  std::string path = DS41_DEFAULT_GOLDEN, prompt_arg;
  long n_tokens = 16;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--direct-io" || a == "--readers" || a == "--cache-bytes" || a == "--cache-experts")
      return usage(a + " goes with --gguf FIRST_SHARD or --checkpoint DIR (the embedded model has no expert files)");
    if ((a == "--golden" || a == "--prompt" || a == "--tokens") && i + 1 >= argc) return usage(a + " needs a value");
    if (a == "--golden") path = argv[++i];
    else if (a == "--prompt") prompt_arg = argv[++i];
    else if (a == "--tokens") {
      std::string v = argv[++i];
      if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return usage("--tokens: not a count: " + v);
      if (v.size() > 9) return usage("--tokens: too many: " + v);
      n_tokens = std::stol(v);
      if (n_tokens < 1) return usage("--tokens must be at least 1");
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: ds41-decode [--golden FILE] [--prompt 1,2,3] [--tokens N]\n"
                  "       %s\n"
                  "  --golden FILE       the golden whose fixture model is regenerated (default: the tiny golden);\n"
                  "                      with --checkpoint: the engram hash parameters and max_seq_len\n"
                  "  --prompt 1,2,3      prompt token ids\n"
                  "  --tokens N          tokens to generate (default 16)\n"
                  "  --gguf FIRST_SHARD  a model from GGUF shards (docs/GGUF.md)\n"
                  "  --checkpoint DIR    a model from an official safetensors checkpoint (docs/SAFETENSORS.md)\n"
                  "  --max-seq-len N     with --checkpoint: the sequence limit (default: the golden's, else 4096)\n"
                  "  --cache-experts N   with --gguf/--checkpoint: routed experts in the streaming cache\n"
                  "                      (default: half of one layer's)\n"
                  "  --cache-bytes N     with --gguf/--checkpoint: the streaming cache's budget in bytes instead\n"
                  "                      (suffix K, M, G or T: binary multiples; at least one layer's\n"
                  "                      n_activated_experts experts); the counters show the hit rate by layer\n"
                  "  --direct-io         with --gguf/--checkpoint: read experts with O_DIRECT, bypassing the page\n"
                  "                      cache (pread + fadvise(DONTNEED) where the file system refuses it)\n"
                  "  --readers N         with --gguf/--checkpoint: prefetch reader threads, 1 to 64 (default 1):\n"
                  "                      expert reads in flight at once\n",
                  kDecodeFilesUsage);
      return 0;
    }
    else return usage("unknown argument " + a);
  }
  try {
    ds41::golden::Golden g = ds41::golden::load(path);
    std::vector<int32_t> prompt = g.prompt_tokens;
    if (!prompt_arg.empty()) {
      prompt.clear();
      std::stringstream ss(prompt_arg);
      std::string item;
      while (std::getline(ss, item, ',')) {
        if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
          return usage("--prompt: not a token id: '" + item + "'");
        if (item.size() > 9) return usage("--prompt: token id too large: " + item);
        prompt.push_back(static_cast<int32_t>(std::stol(item)));
      }
    }
    const long room = g.config.max_seq_len - static_cast<long>(prompt.size());
    if (n_tokens > room)
      return usage("--tokens " + std::to_string(n_tokens) + ": the model's max_seq_len " +
                   std::to_string(g.config.max_seq_len) + " leaves room for " + std::to_string(room < 0 ? 0 : room));
    std::printf("model: %s (%d layers, dim %d, hc %d, %d experts top-%d, vocab %ld)\n", g.name.c_str(),
                g.config.n_layers, g.config.dim, g.config.hc_mult, g.config.n_routed_experts,
                g.config.n_activated_experts, g.config.vocab_size);
    ds41::WeightSet w = ds41::golden::regenerate_weights(g);
    ds41::Model<ds41::HostBackend> model(g.config, w);
    std::printf("prompt (%zu):", prompt.size());
    for (int32_t t : prompt) std::printf(" %d", t);
    std::printf("\n");
    auto t0 = std::chrono::steady_clock::now();
    ds41::StepResult r = model.prefill(prompt);
    auto t1 = std::chrono::steady_clock::now();
    std::vector<int32_t> out{r.argmax};
    for (long i = 1; i < n_tokens; ++i) out.push_back(model.decode(out.back()).argmax);
    auto t2 = std::chrono::steady_clock::now();
    model.release();
    std::printf("generated (%zu):", out.size());
    for (int32_t t : out) std::printf(" %d", t);
    std::printf("\n");
    double pre_s = std::chrono::duration<double>(t1 - t0).count();
    double dec_s = std::chrono::duration<double>(t2 - t1).count();
    std::printf("prefill: %zu tokens in %.3f ms (%.0f tokens/s)\n", prompt.size(), pre_s * 1e3,
                prompt.size() / pre_s);
    if (n_tokens > 1)
      std::printf("decode: %ld tokens in %.3f ms (%.0f tokens/s)\n", n_tokens - 1, dec_s * 1e3, (n_tokens - 1) / dec_s);
    return 0;
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-decode: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-decode: unexpected error: %s\n", e.what());
    return 2;
  }
}
