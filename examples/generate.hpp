// generate.hpp — ds41-decode's generation loop, shared by every model source (the embedded golden
// model, GGUF shards, a safetensors checkpoint): prefill, then one decode step per token, each token
// chosen by the sampler (temperature 0: the argmax, the reference's choice), stopping at the
// end-of-sentence token or after n_tokens. With a tokenizer the text is printed as it comes (a
// StreamDecoder never prints half a UTF-8 character); without one, the ids.
#pragma once
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>
#include "ds41/text/sampler.hpp"
#if DS41_WITH_TEXT
#include "ds41/text/tokenizer.hpp"
#endif

struct GenerateOptions {
  long n_tokens = 16;                 // at most this many new tokens
  ds41::text::SamplerOptions sampling;
  std::optional<int32_t> eos;         // stop after emitting it (it is printed as a token id, not as text)
#if DS41_WITH_TEXT
  const ds41::text::Tokenizer* tokenizer = nullptr;  // text out when set
#endif
};

struct GenerateResult {
  std::vector<int32_t> tokens;
  bool stopped_at_eos = false;
  double prefill_s = 0, decode_s = 0;
};

/// Runs `model` (a ds41::Model with its one-sequence API) on `prompt` and prints what it generates.
template <class M>
GenerateResult generate(M& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt) {
  GenerateResult r;
  ds41::text::Sampler sampler(opt.sampling);
#if DS41_WITH_TEXT
  std::optional<ds41::text::StreamDecoder> text;
  if (opt.tokenizer) {
    text.emplace(*opt.tokenizer);
    std::printf("---\n");
    std::fflush(stdout);
  }
#endif
  auto emit = [&](int32_t t) {
    r.tokens.push_back(t);
    if (opt.eos && t == *opt.eos) r.stopped_at_eos = true;
#if DS41_WITH_TEXT
    if (text && !r.stopped_at_eos) {
      const std::string s = text->push(t);
      std::fwrite(s.data(), 1, s.size(), stdout);
      std::fflush(stdout);
    }
#endif
  };
  auto t0 = std::chrono::steady_clock::now();
  ds41::StepResult step = model.prefill(prompt);
  auto t1 = std::chrono::steady_clock::now();
  emit(sampler.sample(step.logits));
  while (!r.stopped_at_eos && static_cast<long>(r.tokens.size()) < opt.n_tokens) {
    step = model.decode(r.tokens.back());
    emit(sampler.sample(step.logits));
  }
  auto t2 = std::chrono::steady_clock::now();
  model.release();
#if DS41_WITH_TEXT
  if (text) {
    const std::string s = text->finish();
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::printf("\n---\n");
  }
#endif
  r.prefill_s = std::chrono::duration<double>(t1 - t0).count();
  r.decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::printf("generated (%zu):", r.tokens.size());
  for (int32_t t : r.tokens) std::printf(" %d", t);
  std::printf("\n%s", r.stopped_at_eos ? "stopped at end-of-sentence\n" : "");
  std::printf("prefill: %zu tokens in %.3f ms (%.0f tokens/s)\n", prompt.size(), r.prefill_s * 1e3,
              prompt.size() / r.prefill_s);
  const long decoded = static_cast<long>(r.tokens.size()) - 1;
  if (decoded > 0)
    std::printf("decode: %ld tokens in %.3f ms (%.0f tokens/s)\n", decoded, r.decode_s * 1e3, decoded / r.decode_s);
  return r;
}
