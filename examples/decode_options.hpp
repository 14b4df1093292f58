// decode_options.hpp — ds41-decode's command line: every option, parsed once for every model source,
// checked up front (bad input: one line on stderr, exit 2).
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <locale>
#include <optional>
#include <sstream>
#include <string>
#include <vector>
#include "ds41/text/sampler.hpp"

inline constexpr const char* kDecodeUsage =
    "ds41-decode [--golden FILE | --gguf FIRST_SHARD [--gguf-draft FILE] | --checkpoint DIR] [--prompt 1,2,3 | --prompt-text TEXT | "
    "--chat TEXT | --messages FILE] [--tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] ...";

inline constexpr const char* kDecodeHelp =
    "usage: ds41-decode [MODEL] [PROMPT] [OPTIONS]\n"
    "Decodes a prompt with a ds41 model on the host and prints what it generates (text when a tokenizer\n"
    "is known, token ids always) and tokens/s.\n"
    "MODEL (default: the embedded tiny model, regenerated from the tiny golden's fixture):\n"
    "  --golden FILE        a golden whose fixture model is regenerated; with --checkpoint: the engram hash\n"
    "                       parameters and max_seq_len (a golden's own parameters win over derived ones)\n"
    "  --checkpoint DIR     DeepSeek's release layout (docs/SAFETENSORS.md): config.json (HF form) and/or\n"
    "                       inference/config.json (ModelArgs form), shards + index, tokenizer.json; the engram\n"
    "                       hash parameters are derived from the tokenizer and the config as engram.py does\n"
    "  --gguf FIRST_SHARD   GGUF shards (docs/GGUF.md); the tokenizer from the file's tokenizer.ggml.* metadata\n"
    "  --gguf-draft FILE    with --gguf and --dspark: the DSpark draft head's own GGUF file (llama.cpp's dflash\n"
    "                       or ds4's support GGUF; docs/GGUF.md \"DSpark draft files\")\n"
    "  --tokenizer FILE     a tokenizer.json or a GGUF file to tokenize with (overrides the model's own)\n"
    "PROMPT (default: the golden's prompt, or 0,1,2,3 for files):\n"
    "  --prompt 1,2,3       prompt token ids\n"
    "  --prompt-text TEXT   plain text, tokenized; <｜begin▁of▁sentence｜> is put first unless --no-bos\n"
    "  --chat TEXT          one user turn in DeepSeek-V4.1's chat format (docs/TEXT.md); --system TEXT adds a\n"
    "                       system turn, --thinking selects thinking mode (default: chat mode)\n"
    "  --messages FILE      a JSON list of messages ({\"role\", \"content\", ...}) in the chat format\n"
    "  --reasoning-effort E with --thinking: low, high, max or 1-100 (the encoder's default otherwise)\n"
    "  --no-bos             with --prompt-text: no <｜begin▁of▁sentence｜> first\n"
    "GENERATION:\n"
    "  --tokens N           at most N new tokens (default 16; it stops earlier at end-of-sentence)\n"
    "  --ignore-eos         do not stop at end-of-sentence\n"
    "  --temperature T      0 (default) = argmax, the reference's choice; > 0 samples from softmax(logits/T)\n"
    "  --top-k K            with T > 0: only the K most likely tokens (0 = all, default)\n"
    "  --top-p P            with T > 0: the smallest set of most likely tokens whose probability reaches P\n"
    "                       (default 1 = all)\n"
    "  --seed S             the sampler's seed (default 0): the same seed gives the same tokens\n"
    "SPECULATIVE DECODING (a model with DSpark's draft head: config dspark_* keys and mtp.* weights):\n"
    "  --dspark             decode speculatively (docs/DSPARK.md): each round drafts a block, verifies it in\n"
    "                       one step and keeps what the target agrees with (greedy: exactly plain decoding's\n"
    "                       tokens; sampled: lossless rejection sampling). Plain decoding of the same prompt\n"
    "                       runs first, for the tokens/s and (greedy) the tokens to compare with\n"
    "  --draft-len N        draft tokens verified per round, 1 to the block size (default: the block size)\n"
    "  --confidence T       cut a draft before the first position whose sigmoid(confidence) < T (e.g. 0.5)\n"
    "FILES (--gguf / --checkpoint):\n"
    "  --max-seq-len N      with --checkpoint: the sequence limit (default: the golden's, else 4096)\n"
    "  --cache-experts N    routed experts in the streaming cache (default: half of one layer's)\n"
    "  --cache-bytes N      the streaming cache's budget in bytes instead (suffix K, M, G or T: binary\n"
    "                       multiples; at least one layer's n_activated_experts experts)\n"
    "  --direct-io          read experts with O_DIRECT, bypassing the page cache (pread + fadvise(DONTNEED)\n"
    "                       where the file system refuses it)\n"
    "  --readers N          prefetch reader threads, 1 to 64 (default 1): expert reads in flight at once\n"
    "  -h, --help           this text\n"
    "Exit 0 on success, 2 on bad input (one line on stderr).\n";

/// How the expert cache reads (--direct-io, --readers).
struct DecodeReadOptions {
  bool direct_io = false;
  int readers = 1;
};

struct DecodeOptions {
  std::string golden, gguf, gguf_draft, checkpoint, tokenizer;
  std::string prompt_ids, prompt_text, chat, system, messages, reasoning_effort;
  bool has_prompt_text = false, has_chat = false, has_system = false;
  bool thinking = false, no_bos = false, ignore_eos = false;
  long n_tokens = 16;
  bool tokens_given = false;
  long max_seq_len = 0, cache_experts = 0;
  uint64_t cache_bytes = 0;
  DecodeReadOptions read;
  ds41::text::SamplerOptions sampling;
  bool dspark = false;
  long draft_len = 0;
  double confidence = -1;
  bool help = false;

  bool from_files() const { return !gguf.empty() || !checkpoint.empty(); }
  bool wants_text() const { return has_prompt_text || has_chat || !messages.empty(); }
};

/// Parses argv into `o`; returns an error message ("" when fine).
inline std::string parse_decode_options(int argc, char** argv, DecodeOptions& o) {
  auto count = [](const std::string& v, long* out) {
    if (v.empty() || v.size() > 9 || v.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stol(v);
    return true;
  };
  auto real = [](const std::string& v, double* out) {
    if (v.empty() || v.size() > 32) return false;
    std::istringstream ss(v);
    ss.imbue(std::locale::classic());
    double d = 0;
    if (!(ss >> d) || !ss.eof() || !std::isfinite(d)) return false;
    *out = d;
    return true;
  };
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
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") { o.help = true; return ""; }
    if (a == "--direct-io") { o.read.direct_io = true; continue; }
    if (a == "--thinking") { o.thinking = true; continue; }
    if (a == "--no-bos") { o.no_bos = true; continue; }
    if (a == "--ignore-eos") { o.ignore_eos = true; continue; }
    if (a == "--dspark") { o.dspark = true; continue; }
    if (a.rfind("--", 0) != 0) return "unexpected argument '" + a + "'";
    if (i + 1 >= argc) return a + " needs a value";
    const std::string v = argv[++i];
    if (a == "--golden") o.golden = v;
    else if (a == "--gguf") o.gguf = v;
    else if (a == "--gguf-draft") o.gguf_draft = v;
    else if (a == "--checkpoint") o.checkpoint = v;
    else if (a == "--tokenizer") o.tokenizer = v;
    else if (a == "--prompt") o.prompt_ids = v;
    else if (a == "--prompt-text") { o.prompt_text = v; o.has_prompt_text = true; }
    else if (a == "--chat") { o.chat = v; o.has_chat = true; }
    else if (a == "--system") { o.system = v; o.has_system = true; }
    else if (a == "--messages") o.messages = v;
    else if (a == "--reasoning-effort") o.reasoning_effort = v;
    else if (a == "--draft-len") {
      if (!count(v, &o.draft_len) || o.draft_len < 1) return "--draft-len: not a count >= 1: " + v;
    } else if (a == "--confidence") {
      if (!real(v, &o.confidence) || o.confidence < 0 || o.confidence > 1) return "--confidence: not a number in [0, 1]: " + v;
    } else if (a == "--tokens") {
      if (!count(v, &o.n_tokens) || o.n_tokens < 1) return "--tokens: not a count >= 1: " + v;
      o.tokens_given = true;
    } else if (a == "--temperature") {
      if (!real(v, &o.sampling.temperature) || o.sampling.temperature < 0)
        return "--temperature: not a finite number >= 0: " + v;
    } else if (a == "--top-p") {
      if (!real(v, &o.sampling.top_p) || !(o.sampling.top_p > 0 && o.sampling.top_p <= 1))
        return "--top-p: not a number in (0, 1]: " + v;
    } else if (a == "--top-k") {
      long k = 0;
      if (!count(v, &k)) return "--top-k: not a count: " + v;
      o.sampling.top_k = static_cast<int>(k);
    } else if (a == "--seed") {
      if (v.empty() || v.size() > 20 || v.find_first_not_of("0123456789") != std::string::npos)
        return "--seed: not an unsigned integer: " + v;
      errno = 0;
      const unsigned long long s = std::strtoull(v.c_str(), nullptr, 10);
      if (errno == ERANGE) return "--seed: larger than 2^64-1: " + v;
      o.sampling.seed = s;
    } else if (a == "--max-seq-len") {
      if (!count(v, &o.max_seq_len) || o.max_seq_len < 1) return "--max-seq-len: not a count: " + v;
    } else if (a == "--cache-experts") {
      if (!count(v, &o.cache_experts) || o.cache_experts < 1) return "--cache-experts: not a count: " + v;
    } else if (a == "--cache-bytes") {
      if (!bytes(v, &o.cache_bytes)) return "--cache-bytes: not a byte count: " + v;
    } else if (a == "--readers") {
      long n = 0;
      if (!count(v, &n) || n < 1 || n > 64) return "--readers: not a thread count in [1, 64]: " + v;
      o.read.readers = static_cast<int>(n);
    } else {
      return "unknown argument " + a;
    }
  }
  const int prompts = !o.prompt_ids.empty() + o.has_prompt_text + o.has_chat + !o.messages.empty();
  if (prompts > 1) return "give one of --prompt, --prompt-text, --chat and --messages";
  if (!o.gguf.empty() && !o.checkpoint.empty()) return "give one of --gguf FIRST_SHARD and --checkpoint DIR";
  if (!o.from_files() && (o.cache_experts || o.cache_bytes || o.read.direct_io || o.read.readers != 1 || o.max_seq_len))
    return "--cache-experts, --cache-bytes, --direct-io, --readers and --max-seq-len go with --gguf FIRST_SHARD or "
           "--checkpoint DIR (the embedded model has no expert files)";
  if (o.cache_experts && o.cache_bytes) return "give one of --cache-experts and --cache-bytes";
  if (!o.gguf.empty() && (!o.golden.empty() || o.max_seq_len))
    return "--golden and --max-seq-len go with --checkpoint (a GGUF file carries both)";
  if ((o.has_system || o.thinking || !o.reasoning_effort.empty()) && !o.has_chat && o.messages.empty())
    return "--system, --thinking and --reasoning-effort go with --chat or --messages";
  if (!o.reasoning_effort.empty() && !o.thinking) return "--reasoning-effort goes with --thinking";
  if (o.no_bos && !o.has_prompt_text) return "--no-bos goes with --prompt-text";
  if ((o.sampling.top_k > 0 || o.sampling.top_p < 1) && o.sampling.temperature == 0)
    return "--top-k and --top-p sample: they need --temperature > 0 (temperature 0 is the argmax)";
  if (o.has_prompt_text && o.prompt_text.empty()) return "--prompt-text: empty text";
  if (o.has_chat && o.chat.empty()) return "--chat: empty text";
  if (!o.dspark && (o.draft_len || o.confidence >= 0)) return "--draft-len and --confidence go with --dspark";
  if (!o.gguf_draft.empty() && (o.gguf.empty() || !o.dspark)) return "--gguf-draft goes with --gguf FIRST_SHARD and --dspark";
  return "";
}

/// "1,2,3" → ids (range checks against the model's vocab come later).
inline std::string parse_token_ids(const std::string& s, std::vector<int32_t>& out) {
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos)
      return "--prompt: not a token id: '" + item + "'";
    if (item.size() > 9) return "--prompt: token id too large: " + item;
    out.push_back(static_cast<int32_t>(std::stol(item)));
  }
  if (out.empty()) return "--prompt: no token ids";
  return "";
}
