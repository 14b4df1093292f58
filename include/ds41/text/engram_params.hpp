// ds41/text/engram_params.hpp — the Engram hash parameters, derived exactly as DeepSeek's
// inference/engram.py derives them from the tokenizer and the config (they are in no file of the
// release).
//
// - token map: every id decoded alone; text holding U+FFFD (a byte fragment) is keyed by its
//   byte-level token string, any other by engram_key() (engram_normalize.hpp); compressed ids are
//   handed out in first-seen order; pad = map[engram_pad_id].
// - multipliers: 2·v + 1 with v = default_rng(10007·layer).integers(0, bound, max_ngram, int64),
//   bound = max(1, (2^63-1) // compressed_vocab // 2) (numpy_random.hpp).
// - primes: over layers, then n-gram sizes 2..max, then heads, the next prime above
//   engram_vocab_size - 1 not handed out before (the search restarts at that start for every
//   n-gram size; the taken set makes the results distinct); offsets: the exclusive cumulative sum
//   of a layer's primes, n-gram major.
#pragma once
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>
#include <nlohmann/json.hpp>
#include "../core/error.hpp"
#include "../model/config.hpp"
#include "engram_normalize.hpp"
#include "numpy_random.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

/// The config fields the derivation needs (ModelArgs names: engram_layer_ids, ...).
struct EngramSpec {
  long vocab_size = 0;
  std::vector<int> layer_ids;
  long engram_vocab_size = 0;
  std::vector<long> num_embeddings;
  int max_ngram_size = 0;
  int n_heads = 0;
  long pad_id = 2;
  long compressed_vocab_size = 0;
};

/// Reads the spec from inference/config.json (ModelArgs names at the top level) or from the Hugging
/// Face config.json (the same names under "text_config"). `what` names the file in errors.
inline EngramSpec engram_spec_from_config(const nlohmann::json& j, const std::string& what) {
  DS41_CHECK(j.is_object(), what, ": the config is not a JSON object");
  const bool hf = j.contains("text_config");
  DS41_CHECK(!hf || j["text_config"].is_object(), what, ": key 'text_config' is not an object");
  const nlohmann::json& t = hf ? j["text_config"] : j;
  const std::string where = what + (hf ? ": text_config" : "");
  auto integer = [&](const char* key, long lo, long hi, const long* fallback = nullptr) -> long {
    if (!t.contains(key)) {
      DS41_CHECK(fallback != nullptr, where, ": key '", key, "' is missing (the Engram hash parameters need it)");
      return *fallback;
    }
    const nlohmann::json& v = t[key];
    DS41_CHECK(v.is_number_integer(), where, ": key '", key, "' must be an integer, got ", v.dump());
    const long x = v.get<long>();
    DS41_CHECK(x >= lo && x <= hi, where, ": key '", key, "' = ", x, " is outside [", lo, ", ", hi, "]");
    return x;
  };
  auto integers = [&](const char* key, long lo, long hi) {
    DS41_CHECK(t.contains(key), where, ": key '", key, "' is missing (the Engram hash parameters need it)");
    const nlohmann::json& v = t[key];
    DS41_CHECK(v.is_array(), where, ": key '", key, "' must be an array of integers, got ", v.dump());
    std::vector<long> out;
    for (const auto& e : v) {
      DS41_CHECK(e.is_number_integer(), where, ": key '", key, "' must hold integers, got ", e.dump());
      const long x = e.get<long>();
      DS41_CHECK(x >= lo && x <= hi, where, ": key '", key, "' holds ", x, ", outside [", lo, ", ", hi, "]");
      out.push_back(x);
    }
    return out;
  };
  // upper bounds keep the derivation finite and every product inside 64 bits
  constexpr long kBig = 1L << 40;
  EngramSpec s;
  s.vocab_size = integer("vocab_size", 1, 1L << 31);
  for (long l : integers("engram_layer_ids", 0, 1 << 20)) s.layer_ids.push_back(static_cast<int>(l));
  s.engram_vocab_size = integer("engram_vocab_size", 1, kBig);
  s.num_embeddings = integers("engram_num_embeddings", 1, 1L << 62);
  s.max_ngram_size = static_cast<int>(integer("engram_max_ngram_size", 1, 64));
  s.n_heads = static_cast<int>(integer("engram_n_heads", 1, 4096));
  const long default_pad = 2;  // ModelArgs' default
  // the HF form spells it engram_pad_token_id (the release's config.json); ModelArgs engram_pad_id
  const char* pad_key = hf && t.contains("engram_pad_token_id") ? "engram_pad_token_id" : "engram_pad_id";
  s.pad_id = integer(pad_key, 0, s.vocab_size - 1, &default_pad);
  s.compressed_vocab_size = integer("engram_compressed_vocab_size", 1, 1L << 31);
  DS41_CHECK(s.num_embeddings.size() == s.layer_ids.size(), where, ": 'engram_num_embeddings' has ",
             s.num_embeddings.size(), " entries for ", s.layer_ids.size(), " engram layers");
  return s;
}

/// Deterministic primality for 64-bit integers: Miller-Rabin with the seven bases known to decide
/// every n < 2^64 (as sympy.isprime decides these sizes exactly).
inline bool is_prime_u64(uint64_t n) {
  if (n < 2) return false;
  for (uint64_t p : {2ULL, 3ULL, 5ULL, 7ULL, 11ULL, 13ULL, 17ULL, 19ULL, 23ULL, 29ULL, 31ULL, 37ULL}) {
    if (n % p == 0) return n == p;
  }
  auto mulmod = [n](uint64_t a, uint64_t b) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % n);
  };
  auto powmod = [&](uint64_t a, uint64_t e) {
    uint64_t r = 1;
    for (a %= n; e; e >>= 1, a = mulmod(a, a))
      if (e & 1) r = mulmod(r, a);
    return r;
  };
  uint64_t d = n - 1;
  int s = 0;
  for (; (d & 1) == 0; d >>= 1) ++s;
  for (uint64_t base : {2ULL, 325ULL, 9375ULL, 28178ULL, 450775ULL, 9780504ULL, 1795265022ULL}) {
    const uint64_t a = base % n;
    if (a == 0) continue;
    uint64_t x = powmod(a, d);
    if (x == 1 || x == n - 1) continue;
    bool composite = true;
    for (int r = 1; r < s && composite; ++r) {
      x = mulmod(x, x);
      composite = x != n - 1;
    }
    if (composite) return false;
  }
  return true;
}

/// engram.py's build_compressed_token_map over ids 0..spec.vocab_size-1. decode_one(id) gives the
/// id decoded alone (skip_special_tokens=false) as UTF-8; token_string(id) its byte-level token
/// string. *n_compressed receives the number of distinct keys.
template <class DecodeOne, class TokenString>
std::vector<int32_t> compressed_token_map(const EngramSpec& spec, DecodeOne&& decode_one, TokenString&& token_string,
                                          long* n_compressed) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  DS41_CHECK(spec.vocab_size > 0 && spec.vocab_size <= (1L << 31), "engram: vocab_size ", spec.vocab_size,
             " is outside [1, 2^31]");
  std::unordered_map<std::string, int32_t> key_to_id;
  key_to_id.reserve(static_cast<size_t>(spec.vocab_size));
  std::vector<int32_t> map(static_cast<size_t>(spec.vocab_size));
  for (long i = 0; i < spec.vocab_size; ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const std::string text = decode_one(id);
    std::string key = text.find(kReplacement) != std::string::npos ? std::string(token_string(id)) : engram_key(text);
    auto it = key_to_id.try_emplace(std::move(key), static_cast<int32_t>(key_to_id.size())).first;
    map[static_cast<size_t>(i)] = it->second;
  }
  if (n_compressed) *n_compressed = static_cast<long>(key_to_id.size());
  return map;
}

/// The primes [layer][n-gram 2..max][head] flat, checked against each layer's table size.
inline std::vector<int64_t> engram_primes(const EngramSpec& spec) {
  DS41_CHECK(spec.engram_vocab_size >= 1 && spec.engram_vocab_size <= (1L << 40), "engram: engram_vocab_size ",
             spec.engram_vocab_size, " is outside [1, 2^40]");
  DS41_CHECK(spec.num_embeddings.size() == spec.layer_ids.size(), "engram: ", spec.num_embeddings.size(),
             " engram_num_embeddings entries for ", spec.layer_ids.size(), " engram layers");
  const long per_layer = static_cast<long>(spec.max_ngram_size - 1) * spec.n_heads;
  std::vector<int64_t> primes;
  std::vector<uint64_t> taken;  // handed out so far, ascending within each n-gram's search
  for (size_t l = 0; l < spec.layer_ids.size(); ++l) {
    int64_t sum = 0;
    for (int n = 0; n < spec.max_ngram_size - 1; ++n) {
      uint64_t current = static_cast<uint64_t>(spec.engram_vocab_size - 1);
      for (int h = 0; h < spec.n_heads; ++h) {
        uint64_t c = current + 1;
        while (!is_prime_u64(c) || std::find(taken.begin(), taken.end(), c) != taken.end()) ++c;
        taken.push_back(c);
        current = c;
        primes.push_back(static_cast<int64_t>(c));
        sum += static_cast<int64_t>(c);
      }
    }
    DS41_CHECK(sum == spec.num_embeddings[l], "engram: layer ", spec.layer_ids[l], "'s ", per_layer,
               " hash primes sum to ", sum, " rows, but the config's engram_num_embeddings gives it ",
               spec.num_embeddings[l]);
  }
  return primes;
}

/// The multipliers [layer][max_ngram] for a compressed vocabulary of `n_compressed` ids.
inline std::vector<int64_t> engram_multipliers(const EngramSpec& spec, long n_compressed) {
  DS41_CHECK(n_compressed >= 1, "engram: compressed vocab size ", n_compressed, " must be positive");
  const int64_t bound = std::max<int64_t>(1, INT64_MAX / n_compressed / 2);
  std::vector<int64_t> out;
  for (int layer : spec.layer_ids) {
    Generator rng(static_cast<unsigned __int128>(10007) * static_cast<unsigned>(layer));
    for (int64_t v : rng.integers(0, bound, static_cast<size_t>(spec.max_ngram_size))) {
      const int64_t m = 2 * v + 1;
      // the reference's bound: id · multiplier stays inside int64 for every compressed id
      DS41_CHECK(m <= INT64_MAX / n_compressed, "engram: layer ", layer, " multiplier ", m,
                 " would overflow int64 with ", n_compressed, " compressed ids");
      out.push_back(m);
    }
  }
  return out;
}

/// Everything but the token map, from an already derived map (checks its size against the config).
inline EngramHashParams engram_params_from_map(const EngramSpec& spec, std::vector<int32_t> token_map,
                                               long n_compressed) {
  DS41_CHECK(!spec.layer_ids.empty(), "engram: the config names no engram layers (engram_layer_ids is empty)");
  DS41_CHECK(spec.max_ngram_size >= 1 && spec.n_heads >= 1, "engram: engram_max_ngram_size ", spec.max_ngram_size,
             " and engram_n_heads ", spec.n_heads, " must be positive");
  DS41_CHECK(n_compressed == spec.compressed_vocab_size, "engram: the tokenizer gives ", n_compressed,
             " compressed ids, the config's engram_compressed_vocab_size is ", spec.compressed_vocab_size);
  DS41_CHECK(spec.pad_id >= 0 && spec.pad_id < static_cast<long>(token_map.size()), "engram: engram_pad_id ",
             spec.pad_id, " is outside the token map's ", token_map.size(), " ids");
  EngramHashParams p;
  p.pad_id = token_map[static_cast<size_t>(spec.pad_id)];
  p.primes = engram_primes(spec);
  const size_t cols = static_cast<size_t>(spec.max_ngram_size - 1) * spec.n_heads;
  p.offsets.resize(p.primes.size());
  for (size_t l = 0; l < spec.layer_ids.size(); ++l) {
    int64_t acc = 0;
    for (size_t c = 0; c < cols; ++c) {
      p.offsets[l * cols + c] = acc;
      acc += p.primes[l * cols + c];
    }
  }
  p.multipliers = engram_multipliers(spec, n_compressed);
  p.token_map = std::move(token_map);
  return p;
}

/// engram.py's NgramHashState parameters for `tok` (any tokenizer with vocab_size(),
/// decode(span<const int32_t>, bool skip_special_tokens) and id_to_token(int32_t), e.g.
/// ds41::text::Tokenizer). The reference maps every id the tokenizer has; the model's vocab_size
/// must not exceed that (an id without a map entry would fail in the reference), and the returned
/// map keeps the model's vocab_size entries.
template <class Tok>
EngramHashParams derive_engram_params(const EngramSpec& spec, const Tok& tok) {
  const long tok_vocab = static_cast<long>(tok.vocab_size());
  DS41_CHECK(spec.vocab_size <= tok_vocab, "engram: the config's vocab_size ", spec.vocab_size,
             " exceeds the tokenizer's ", tok_vocab, " ids (ids beyond it have no compressed id)");
  EngramSpec all = spec;
  all.vocab_size = tok_vocab;  // the compressed count (and so every multiplier) runs over all of them
  long n = 0;
  std::vector<int32_t> map = compressed_token_map(
      all,
      [&](int32_t id) { return std::string(tok.decode(std::span<const int32_t>(&id, 1), false)); },
      [&](int32_t id) { return std::string(tok.id_to_token(id)); }, &n);
  map.resize(static_cast<size_t>(spec.vocab_size));
  return engram_params_from_map(spec, std::move(map), n);
}

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
