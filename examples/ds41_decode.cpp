// ds41-decode — the demo decoder: the embedded tiny model (weights regenerated from the public
// golden's fixture, SCHEMA.md §1), a GGUF model or a checkpoint in DeepSeek's release layout, on a
// prompt of token ids, plain text or a chat turn; greedy (the reference's argmax) or sampled.
//
//   ds41-decode [--golden FILE | --gguf FIRST_SHARD [--gguf-draft FILE] | --checkpoint DIR] [--prompt 1,2,3 |
//               --prompt-text TEXT | --chat TEXT | --messages FILE] [--tokens N] [--temperature T] ...
// `ds41-decode --help` lists every option (decode_options.hpp). Prints the prompt, the generated text
// as it comes (when a tokenizer is known) and the token ids, tokens/s. Exit 2 on bad input.
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include "decode_files.hpp"
#include "decode_options.hpp"
#include "ds41/ds41.hpp"
#include "ds41/testing/golden.hpp"
#include "generate.hpp"
#if DS41_WITH_TEXT
#include "decode_text.hpp"
#endif

#ifndef DS41_DEFAULT_GOLDEN
#define DS41_DEFAULT_GOLDEN "golden/ds41_tiny_golden.json"
#endif

namespace {

// bad input: exit code 2 and one line on stderr
int usage(const std::string& msg) {
  std::fprintf(stderr, "ds41-decode: %s (usage: %s; --help lists every option)\n", msg.c_str(), kDecodeUsage);
  return 2;
}

/// The embedded model (a golden's fixture, weights regenerated).
int decode_golden(const DecodeOptions& o, std::vector<int32_t> prompt, GenerateOptions gen) {
  ds41::golden::Golden g = ds41::golden::load(o.golden.empty() ? DS41_DEFAULT_GOLDEN : o.golden);
  if (prompt.empty()) prompt = g.prompt_tokens;
  for (int32_t t : prompt)
    DS41_CHECK(t >= 0 && t < g.config.vocab_size, "prompt: token id ", t, " outside the model's vocab [0, ",
               g.config.vocab_size, ")");
  const long room = g.config.max_seq_len - static_cast<long>(prompt.size());
  DS41_CHECK(room >= 1, "prompt: ", prompt.size(), " tokens leave no room in the model's max_seq_len ",
             g.config.max_seq_len);
  if (gen.n_tokens > room) {
    DS41_CHECK(!o.tokens_given, "--tokens ", gen.n_tokens, ": the model's max_seq_len ", g.config.max_seq_len,
               " leaves room for ", room, " after the ", prompt.size(), "-token prompt");
    gen.n_tokens = room;
  }
  std::printf("model: %s (%d layers, dim %d, hc %d, %d experts top-%d, vocab %ld)\n", g.name.c_str(),
              g.config.n_layers, g.config.dim, g.config.hc_mult, g.config.n_routed_experts,
              g.config.n_activated_experts, g.config.vocab_size);
  ds41::WeightSet w = ds41::golden::regenerate_weights(g);
  ds41::Model<ds41::HostBackend> model(model_config(g.config, o), w);
  std::printf("prompt (%zu):", prompt.size());
  for (int32_t t : prompt) std::printf(" %d", t);
  std::printf("\n");
  if (o.dspark) generate_speculative(model, prompt, gen, static_cast<int>(o.draft_len), o.confidence);
  else generate(model, prompt, gen);
  return 0;
}

int run(const DecodeOptions& o) {
  auto t0 = std::chrono::steady_clock::now();
  auto progress = [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };
  std::vector<int32_t> prompt;
  if (!o.prompt_ids.empty()) {
    const std::string err = parse_token_ids(o.prompt_ids, prompt);
    if (!err.empty()) return usage(err);
  }
  GenerateOptions gen;
  gen.n_tokens = o.n_tokens;
  gen.sampling = o.sampling;
  std::optional<ds41::EngramHashParams> engram;
#if DS41_WITH_TEXT
  const std::string tok_path = decode_text::tokenizer_path(o);
  std::unique_ptr<ds41::text::Tokenizer> tok;
  if (!tok_path.empty()) {
    tok = decode_text::load_tokenizer(tok_path);
    std::printf("tokenizer: %s (%ld tokens)\n", tok_path.c_str(), tok->vocab_size());
  }
  if (o.wants_text()) {
    DS41_CHECK(tok != nullptr, "--prompt-text, --chat and --messages need a tokenizer: ",
               !o.checkpoint.empty() ? "the checkpoint has no tokenizer.json"
               : !o.gguf.empty()     ? "the GGUF file has no tokenizer.ggml.* metadata"
                                     : "the embedded model has none",
               "; give --tokenizer FILE (a tokenizer.json or a GGUF file)");
    prompt = decode_text::prompt_ids(o, *tok, tok_path);
    DS41_CHECK(!prompt.empty(), "the prompt has no tokens");
  }
  gen.tokenizer = tok.get();
  if (!o.ignore_eos) gen.eos = decode_text::eos_id(o, tok.get(), tok_path);
  // a checkpoint without a golden: the engram hash parameters from its tokenizer and config
  if (!o.checkpoint.empty() && o.golden.empty() && ds41::safetensors::checkpoint_has_engram(o.checkpoint)) {
    DS41_CHECK(tok != nullptr, "checkpoint ", o.checkpoint, ": its engram layers need the hash parameters, "
               "derived from the tokenizer (engram.py), and it has no tokenizer.json; give --tokenizer FILE or "
               "--golden FILE");
    engram = ds41::text::derive_checkpoint_engram(o.checkpoint, *tok);
    std::printf("engram hash parameters derived from %s (%zu token ids)\n", tok_path.c_str(), engram->token_map.size());
  }
#else
  if (o.wants_text() || !o.tokenizer.empty())
    return usage("this ds41-decode was built without the text layer (PCRE2 and utf8proc): token ids only");
#endif
  if (!o.gguf.empty()) {
    if (prompt.empty()) prompt = {0, 1, 2, 3};
    ds41::GgufWeights w(o.gguf, progress, o.gguf_draft);
    return ds41_decode_from(w, o.gguf, prompt, gen, o, t0);
  }
  if (!o.checkpoint.empty()) {
    if (prompt.empty()) prompt = {0, 1, 2, 3};
    long seq = 4096;  // model.py's ModelArgs.max_seq_len
    if (!o.golden.empty()) {
      const ds41::golden::Golden g = ds41::golden::load(o.golden);
      engram = g.config.engram;  // a golden's own parameters win
      seq = g.config.max_seq_len;
    }
    if (o.max_seq_len) seq = o.max_seq_len;
    ds41::SafetensorsWeights w(o.checkpoint, seq, engram, progress);
    return ds41_decode_from(w, o.checkpoint, prompt, gen, o, t0);
  }
  return decode_golden(o, prompt, gen);
}

}  // namespace

int main(int argc, char** argv) {
  DecodeOptions o;
  const std::string err = parse_decode_options(argc, argv, o);
  if (!err.empty()) return usage(err);
  if (o.help) {
    std::fputs(kDecodeHelp, stdout);
    return 0;
  }
  try {
    return run(o);
  } catch (const ds41::Error& e) {
    std::fprintf(stderr, "ds41-decode: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ds41-decode: unexpected error: %s\n", e.what());
    return 2;
  }
}
