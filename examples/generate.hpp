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
#include "ds41/model/speculative.hpp"
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

/// Speculative decoding with the model's DSpark head (--dspark), after plain decoding of the same
/// prompt for the comparison: tokens per round (the acceptance length), drafted and accepted
/// tokens, tokens/s of both, and under greedy whether the tokens are plain decoding's.
template <class M>
void generate_speculative(M& model, const std::vector<int32_t>& prompt, const GenerateOptions& opt, int draft_len,
                          double confidence) {
  std::printf("plain decoding first (the reference for the comparison):\n");
  const GenerateResult plain = generate(model, prompt, opt);
  ds41::SpeculativeOptions so;
  so.draft_len = draft_len;
  so.confidence = confidence;
  so.sampling = opt.sampling;
  ds41::Speculator<M> spec(model, so);
  std::printf("speculative decoding (DSpark, block %d, %d drafted per round%s):\n", model.draft_head().block_size(),
              draft_len ? draft_len : model.draft_head().block_size(), confidence >= 0 ? ", confidence cut" : "");
  auto t0 = std::chrono::steady_clock::now();
  typename M::Sequence s = model.make_sequence();
  const ds41::StepResult first = model.extend(s, prompt);
  auto t1 = std::chrono::steady_clock::now();
  std::vector<int32_t> out{spec.acceptor().choose(first.logits)};
  auto stop = [&] { return (opt.eos && out.back() == *opt.eos) || static_cast<long>(out.size()) >= opt.n_tokens; };
  while (!stop()) {
    // the next round appends the anchor out.back() and its accepted drafts: out ends with the
    // token after them
    const ds41::SpecRound r = spec.round(s, out.back());
    for (size_t i = 1; i < r.tokens.size() && !stop(); ++i) out.push_back(r.tokens[i]);
    if (!stop()) out.push_back(r.next);
  }
  auto t2 = std::chrono::steady_clock::now();
  const double dec = std::chrono::duration<double>(t2 - t1).count();
  std::printf("generated (%zu):", out.size());
  for (int32_t t : out) std::printf(" %d", t);
  std::printf("\n");
  const long decoded = static_cast<long>(out.size()) - 1;
  const ds41::SpecStats& k = spec.stats();
  std::printf("speculative: %ld rounds, %ld drafted, %ld accepted (%.1f%%), %.2f tokens per round; time: draft %.3f ms, "
              "verify %.3f ms, rewind %.3f ms\n",
              k.rounds, k.drafted, k.accepted, k.drafted ? 100.0 * k.accepted / k.drafted : 0.0, k.tokens_per_round(),
              k.draft_s * 1e3, k.verify_s * 1e3, k.rewind_s * 1e3);
  if (decoded > 0 && dec > 0) {
    const double plain_tps = plain.decode_s > 0 ? (plain.tokens.size() - 1) / plain.decode_s : 0;
    std::printf("decode: %ld tokens in %.3f ms (%.0f tokens/s; plain %.0f tokens/s, %.2fx)\n", decoded, dec * 1e3,
                decoded / dec, plain_tps, plain_tps > 0 ? decoded / dec / plain_tps : 0.0);
  }
  (void)t0;
  if (opt.sampling.temperature == 0)
    std::printf("greedy: the tokens %s plain decoding's\n", out == plain.tokens ? "are" : "DIFFER FROM");
  DS41_CHECK(opt.sampling.temperature != 0 || out == plain.tokens,
             "speculative decoding gave other tokens than plain decoding (a bug: please report it)");
}
