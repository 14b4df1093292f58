// The Engram hash parameters derived as DeepSeek's engram.py derives them: numpy's default_rng /
// integers against numpy 1.24.2's own outputs (tests/data/engram/), the key normalizer on the
// traps tokenizers/README.md §2 lists (expected keys computed by Hugging Face tokenizers 0.23.3),
// and the release's token map, primes, offsets, multipliers and hash examples against
// tests/data/tokenizer/engram_params.json + engram_token_map.bin (made by engram.py itself).
// Everything is integer or string work: every comparison is exact.
#include <doctest/doctest.h>
#include <bit>
#include <cstdint>
#include <fstream>
#include <span>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "ds41/model/engram.hpp"
#include "ds41/text/engram_normalize.hpp"
#include "ds41/text/engram_params.hpp"
#include "ds41/text/numpy_random.hpp"
#include "ds41/text/tokenizer.hpp"

namespace test_engram_params {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using json = nlohmann::json;
using namespace ds41::text;

namespace {

const std::string kTok = DS41_TOKENIZER_DATA;
const std::string kEngramData = std::string(DS41_TOKENIZER_DATA) + "/../engram";

json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot open " << path);
  return json::parse(f);
}

unsigned __int128 parse_u128(const std::string& s) {
  unsigned __int128 v = 0;
  for (char c : s) {
    REQUIRE((c >= '0' && c <= '9'));
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v;
}

const json& params_json() {
  static const json j = read_json(kTok + "/engram_params.json");
  return j;
}

// the map file is little-endian int32, read here as native int32
static_assert(std::endian::native == std::endian::little);

std::vector<int32_t> release_map() {
  std::ifstream f(kTok + "/engram_token_map.bin", std::ios::binary);
  REQUIRE(f.good());
  std::vector<int32_t> m(129280);
  f.read(reinterpret_cast<char*>(m.data()), static_cast<std::streamsize>(m.size() * 4));
  REQUIRE(f.gcount() == static_cast<std::streamsize>(m.size() * 4));
  return m;
}

EngramSpec release_spec() {
  return engram_spec_from_config(read_json(kTok + "/release_engram_config.json"), "release_engram_config.json");
}

std::vector<int64_t> flat(const json& j) {
  std::vector<int64_t> out;
  auto rec = [&](auto&& self, const json& x) -> void {
    if (x.is_array()) {
      for (const auto& e : x) self(self, e);
    } else {
      out.push_back(x.get<int64_t>());
    }
  };
  rec(rec, j);
  return out;
}

#define CHECK_ERROR_MENTIONS(expr, text)                                       \
  do {                                                                         \
    bool thrown = false;                                                       \
    try {                                                                      \
      expr;                                                                    \
    } catch (const ds41::Error& e) {                                           \
      thrown = true;                                                           \
      INFO("message: " << std::string(e.what()));                                           \
      CHECK(std::string(e.what()).find(text) != std::string::npos);            \
    }                                                                          \
    CHECK_MESSAGE(thrown, "expected ds41::Error mentioning '" << text << "'"); \
  } while (0)

}  // namespace

TEST_CASE("numpy PCG64 raw outputs equal numpy 1.24.2's for seeds up to 2^100") {
  const json v = read_json(kEngramData + "/numpy_vectors.json");
  REQUIRE(v["numpy"] == "1.24.2");
  REQUIRE(v["random_raw"].size() >= 4);
  for (const auto& c : v["random_raw"]) {
    PCG64 g{SeedSequence(parse_u128(c["seed"].get<std::string>()))};
    for (const auto& r : c["raw"]) {
      INFO("seed " << c["seed"].get<std::string>());
      CHECK(g.next64() == static_cast<uint64_t>(parse_u128(r.get<std::string>())));
    }
  }
}

TEST_CASE("numpy Generator.integers(int64) equals numpy 1.24.2 over seeds, bounds and sizes") {
  const json v = read_json(kEngramData + "/numpy_vectors.json");
  long n_values = 0, n_wrong = 0;
  auto check_values = [&](Generator& g, const json& c, const std::string& seed) {
    const int64_t low = std::stoll(c["low"].get<std::string>()), high = std::stoll(c["high"].get<std::string>());
    const std::vector<int64_t> got = g.integers(low, high, c["values"].size());
    for (size_t i = 0; i < got.size(); ++i) {
      ++n_values;
      const int64_t want = std::stoll(c["values"][i].get<std::string>());
      if (got[i] != want && n_wrong++ < 10)
        FAIL_CHECK("seed " << seed << " integers(" << low << ", " << high << ")[" << i << "] = " << got[i]
                           << ", numpy gives " << want);
    }
  };
  for (const auto& c : v["integers"]) {
    const std::string seed = c["seed"].get<std::string>();
    Generator g(parse_u128(seed));
    if (c.contains("chain")) {  // several calls on one generator (the 32-bit half carries over)
      for (const auto& step : c["chain"]) check_values(g, step, seed);
    } else {
      check_values(g, c, seed);
    }
  }
  CHECK(n_wrong == 0);
  CHECK(n_values > 4000);
}

TEST_CASE("numpy integers: a range of one value draws nothing; empty ranges are rejected") {
  Generator a(5), b(5);
  CHECK(a.integers(7, 8, 3) == std::vector<int64_t>{7, 7, 7});
  CHECK(a.integers(0, 1000, 2) == b.integers(0, 1000, 2));  // the stream did not move
  CHECK_ERROR_MENTIONS(a.integers(3, 3, 1), "must be below high");
}

TEST_CASE("engram normalizer: the traps, against Hugging Face tokenizers' own output") {
  struct Case {
    std::string in, out;
  };
  using namespace std::string_literals;
  const std::vector<Case> cases = {
      {"\u0915\u093e", "\u0915"},              // Devanagari vowel sign AA is Mc: removed too
      {"\u0995\u09be", "\u0995"},              // Bengali, Mc
      {"a\u20dd", "a"},                        // enclosing circle, Me
      {"\x1c", "\x1c"},                        // U+001C..U+001F are not Rust White_Space
      {"a\x1f", "a\x1f"},
      {"\x1c\x1d\x1e\x1f", "\x1c\x1d\x1e\x1f"},
      {"\u0130", "i"},                         // NFD splits the dot above off before Lowercase
      {"\u0130stanbul", "istanbul"},
      {"\u039f\u0394\u039f\u03a3", "\u03bf\u03b4\u03bf\u03c3"},  // no final-sigma context
      {"\u0301", ""},                          // a lone combining mark normalizes to nothing
      {"\x0b", ""},                            // \v: not collapsed, but stripped
      {"\x0c", ""},
      {" ", " "},                              // a lone space survives through the sentinel
      {"  \t\n", " "},
      {"\n", " "},
      {" a ", "a"},
      {"a  b\t\r\nc", "a b c"},
      {"\u00a0", " "},                         // NFKC makes it a space first
      {"\u3000x", "x"},
      {"\u0085", ""},                          // NEL: not collapsed, stripped
      {"\ufb01", "fi"},
      {"\uff21", "a"},
      {"\u00e9", "e"},
      {"\u00c5", "a"},
      {"\u2028", ""},
      {"\0"s, "\0"s},                          // an embedded NUL is an ordinary character
      {"\ue000", " "},                         // the sentinel's own code point becomes a space
      {" \ue000 ", " "},
      {"\u1e9e", "\u00df"},
      {"K\u212a", "kk"},
      {"\u00bd", "1\u20442"},
      {"\u2460", "1"},
      {"\u1f88", "\u03b1"},
      {"x\u200by", "x\u200by"},                // zero-width space is not White_Space
      {"\ufeff", "\ufeff"},
      {"\u0345", ""},
      {"A\u0345", "a"},
      {"\u01c4", "dz"},
      {"\u00df", "\u00df"},
  };
  for (const auto& c : cases) {
    INFO("input " << json(c.in).dump());
    CHECK(json(engram_normalize(c.in)).dump() == json(c.out).dump());
    // the key falls back to the raw text exactly when the normalization is empty
    CHECK(engram_key(c.in) == (c.out.empty() ? c.in : c.out));
  }
  // Lowercase on its own: Rust's full mapping of U+0130 is two code points
  std::u32string lc;
  engram_detail::append_rust_lowercase(lc, 0x130);
  CHECK(lc == U"i\u0307");
  lc.clear();
  engram_detail::append_rust_lowercase(lc, U'\u03a3');
  CHECK(lc == U"\u03c3");
  CHECK_ERROR_MENTIONS(engram_normalize("\xff\xfe"), "not valid UTF-8");
}

TEST_CASE("primality: deterministic Miller-Rabin agrees with a sieve and with known hard cases") {
  const int N = 200000;
  std::vector<bool> composite(N, false);
  for (int i = 2; i * i < N; ++i)
    if (!composite[i])
      for (int j = i * i; j < N; j += i) composite[j] = true;
  long mismatches = 0;
  for (int i = 0; i < N; ++i) mismatches += is_prime_u64(static_cast<uint64_t>(i)) != (i >= 2 && !composite[i]);
  CHECK(mismatches == 0);
  // strong pseudoprimes to several small bases, Carmichael numbers, and large primes
  for (uint64_t c : {561ULL, 2047ULL, 1373653ULL, 25326001ULL, 3215031751ULL, 2152302898747ULL, 3474749660383ULL,
                     341550071728321ULL, 3825123056546413051ULL,
                     4294967291ULL * 4294967279ULL})
    CHECK_MESSAGE(!is_prime_u64(c), c);
  for (uint64_t p : {2305843009213693951ULL, 18446744073709551557ULL, 16000057ULL, 16000889ULL, 4294967291ULL})
    CHECK_MESSAGE(is_prime_u64(p), p);
}

TEST_CASE("engram config: both forms, and a missing or ill-typed field named") {
  const json inf = read_json(kTok + "/release_engram_config.json");
  const EngramSpec a = engram_spec_from_config(inf, "inference/config.json");
  CHECK(a.vocab_size == 129280);
  CHECK(a.layer_ids == std::vector<int>{1, 14});
  CHECK(a.engram_vocab_size == 16000000);
  CHECK(a.num_embeddings == std::vector<long>{384006168, 384016682});
  CHECK(a.max_ngram_size == 4);
  CHECK(a.n_heads == 8);
  CHECK(a.pad_id == 2);
  CHECK(a.compressed_vocab_size == 99092);
  json hf = {{"model_type", "deepseek_v41"}, {"text_config", inf}, {"vision_config", json::object()}};
  const EngramSpec b = engram_spec_from_config(hf, "config.json");
  CHECK(b.layer_ids == a.layer_ids);
  CHECK(b.num_embeddings == a.num_embeddings);
  CHECK(b.compressed_vocab_size == a.compressed_vocab_size);
  // the release's config.json itself (HF form: engram_pad_token_id, not engram_pad_id)
  const json release_hf = read_json(DS41_TOKENIZER_DATA "/../release_config/config.json");
  const EngramSpec r = engram_spec_from_config(release_hf, "config.json");
  CHECK(r.layer_ids == a.layer_ids);
  CHECK(r.engram_vocab_size == a.engram_vocab_size);
  CHECK(r.pad_id == 2);
  json hf_pad = release_hf;
  hf_pad["text_config"]["engram_pad_token_id"] = 5;
  CHECK(engram_spec_from_config(hf_pad, "config.json").pad_id == 5);
  json missing = inf;
  missing.erase("engram_compressed_vocab_size");
  CHECK_ERROR_MENTIONS(engram_spec_from_config(missing, "cfg.json"), "'engram_compressed_vocab_size' is missing");
  json hf_missing = hf;
  hf_missing["text_config"].erase("engram_n_heads");
  CHECK_ERROR_MENTIONS(engram_spec_from_config(hf_missing, "config.json"), "config.json: text_config: key 'engram_n_heads'");
  json typed = inf;
  typed["engram_vocab_size"] = "16000000";
  CHECK_ERROR_MENTIONS(engram_spec_from_config(typed, "cfg.json"), "'engram_vocab_size' must be an integer");
  typed = inf;
  typed["engram_layer_ids"] = {1, 2.5};
  CHECK_ERROR_MENTIONS(engram_spec_from_config(typed, "cfg.json"), "'engram_layer_ids' must hold integers");
  typed = inf;
  typed["engram_num_embeddings"] = {384006168};
  CHECK_ERROR_MENTIONS(engram_spec_from_config(typed, "cfg.json"), "1 entries for 2 engram layers");
  CHECK_ERROR_MENTIONS(engram_spec_from_config(json::array(), "cfg.json"), "not a JSON object");
}

TEST_CASE("engram primes, offsets, multipliers and pad of the release (from its token map)") {
  const json& pj = params_json();
  const EngramSpec spec = release_spec();
  const ds41::EngramHashParams p = engram_params_from_map(spec, release_map(), 99092);
  CHECK(pj["multiplier_bound"].get<int64_t>() == INT64_MAX / 99092 / 2);
  CHECK(p.pad_id == pj["pad_compressed_id"].get<int64_t>());
  CHECK(p.pad_id == 2);
  CHECK(p.primes == flat(pj["primes"]));
  CHECK(p.primes.size() == 48);
  CHECK(p.offsets == flat(pj["offsets"]));
  CHECK(p.multipliers == flat(pj["multipliers"]));
  CHECK(p.multipliers == std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391,
                                              67716810739261, 51510806800915, 30921347202721, 82619226485591});
}

TEST_CASE("engram derivation errors: compressed size and table sizes the tokenizer does not give") {
  EngramSpec spec = release_spec();
  spec.compressed_vocab_size = 99091;
  CHECK_ERROR_MENTIONS(engram_params_from_map(spec, release_map(), 99092),
                       "engram: the tokenizer gives 99092 compressed ids, the config's engram_compressed_vocab_size is 99091");
  spec = release_spec();
  spec.num_embeddings[1] += 1;
  CHECK_ERROR_MENTIONS(engram_params_from_map(spec, release_map(), 99092),
                       "layer 14's 24 hash primes sum to 384016682 rows, but the config's engram_num_embeddings gives it 384016683");
  spec = release_spec();
  spec.layer_ids.clear();
  spec.num_embeddings.clear();
  CHECK_ERROR_MENTIONS(engram_params_from_map(spec, release_map(), 99092), "names no engram layers");
}

TEST_CASE("engram hash examples of the release through EngramHasher") {
  const json& pj = params_json();
  ds41::ModelConfig c;
  c.engram_layer_ids = {1, 14};
  c.engram_max_ngram_size = 4;
  c.engram_n_heads = 8;
  c.max_seq_len = 64;
  c.engram = engram_params_from_map(release_spec(), release_map(), 99092);
  // A token outside a prefill's n-grams (token_mask false: an image span) is cached as DEAD in the
  // reference. EngramHasher takes token ids only, so such positions are fed as one extra id whose
  // map entry is kDead: the history then holds exactly what the reference's cache holds.
  const int32_t dead_id = static_cast<int32_t>(c.engram.token_map.size());
  c.engram.token_map.push_back(static_cast<int32_t>(ds41::EngramHasher::kDead));
  REQUIRE(pj["hash_examples"].size() == 4);
  for (const auto& ex : pj["hash_examples"]) {
    INFO("example " << ex["name"].get<std::string>());
    std::vector<int32_t> ids = ex["input_ids"].get<std::vector<int32_t>>();
    const std::vector<int64_t> compressed = ex["compressed_ids"].get<std::vector<int64_t>>();
    for (size_t t = 0; t < ids.size(); ++t) CHECK(c.engram.token_map[ids[t]] == compressed[t]);
    if (ex["token_mask"].is_array())
      for (size_t t = 0; t < ids.size(); ++t)
        if (!ex["token_mask"][t].get<bool>()) ids[t] = dead_id;
    const long T = static_cast<long>(ids.size());
    ds41::EngramHasher h(c);
    std::vector<int32_t> got;
    if (ex["calls"].get<std::string>().rfind("one forward", 0) == 0) {
      got = h.hash(ids.data(), T, 0);
    } else {  // forward(ids[:7], 0) then one token at a time
      REQUIRE(ex["calls"].get<std::string>().rfind("forward(ids[:7], 0)", 0) == 0);
      got = h.hash(ids.data(), 7, 0);
      for (long p = 7; p < T; ++p) {
        std::vector<int32_t> step = h.hash(ids.data() + p, 1, p);
        got.insert(got.end(), step.begin(), step.end());
      }
    }
    const std::vector<int64_t> want = flat(ex["hash_ids"]);
    REQUIRE(got.size() == want.size());
    REQUIRE(want.size() == static_cast<size_t>(T) * 2 * 24);
    long wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) wrong += got[i] != want[i];
    CHECK(wrong == 0);
  }
}

namespace {
// A stand-in with the Tokenizer interface derive_engram_params uses: each id decodes to texts[id].
struct FakeTokenizer {
  std::vector<std::string> texts, tokens;
  long vocab_size() const { return static_cast<long>(texts.size()); }
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    REQUIRE(ids.size() == 1);
    CHECK_FALSE(skip_special_tokens);  // added tokens must give their content
    return texts.at(static_cast<size_t>(ids[0]));
  }
  std::string id_to_token(int32_t id) const { return tokens.at(static_cast<size_t>(id)); }
};
}  // namespace

TEST_CASE("engram derivation on a small tokenizer: first-seen order, U+FFFD and empty keys, layers") {
  FakeTokenizer tok;
  tok.texts = {"A", "a", " ", "\t\n", "\xEF\xBF\xBD", "\u0301", "\xEF\xBF\xBD", "e\u0301", "\u00e9", "\x0b", "x"};
  tok.tokens = {"A", "a", "\u0120", "\u0109\u010a", "\u00c3", "\u00cc\u0123", "\u00c3", "e\u00cc\u0123", "\u00c3\u00a9", "\u010b", "x"};
  EngramSpec spec;
  spec.vocab_size = 10;  // the model sees ids 0..9; the tokenizer's id 10 still counts as a key
  spec.layer_ids = {0, 3};
  spec.engram_vocab_size = 10;
  spec.max_ngram_size = 2;
  spec.n_heads = 2;
  spec.num_embeddings = {11 + 13, 17 + 19};
  spec.pad_id = 2;
  spec.compressed_vocab_size = 7;
  const ds41::EngramHashParams p = derive_engram_params(spec, tok);
  // keys: a, " ", "\u00c3" (twice: by token string), raw "\u0301", e (twice), raw "\x0b", x
  CHECK(p.token_map == std::vector<int32_t>{0, 0, 1, 1, 2, 3, 2, 4, 4, 5});
  CHECK(p.pad_id == 1);
  CHECK(p.primes == std::vector<int64_t>{11, 13, 17, 19});
  CHECK(p.offsets == std::vector<int64_t>{0, 11, 0, 17});
  // numpy 1.24.2: default_rng(0) and default_rng(30021), integers(0, (2**63-1)//7//2, 2, int64) * 2 + 1
  CHECK(p.multipliers == std::vector<int64_t>{839276373626933875, 355477604520660829, 389671872947051431, 1155968218921559663});
  spec.compressed_vocab_size = 6;
  CHECK_ERROR_MENTIONS(derive_engram_params(spec, tok), "the tokenizer gives 7 compressed ids, the config's engram_compressed_vocab_size is 6");
}

TEST_CASE("engram token map of the release from its tokenizer equals engram.py's, id for id") {
  const Tokenizer tok = Tokenizer::from_json_file(kTok + "/tokenizer.json");
  REQUIRE(tok.vocab_size() == 129280);
  // the map on its own first, so that a mismatch is reported id by id rather than as a count
  long n_compressed = 0;
  const std::vector<int32_t> map = compressed_token_map(
      release_spec(), [&](int32_t id) { return tok.decode(std::span<const int32_t>(&id, 1), false); },
      [&](int32_t id) { return tok.id_to_token(id); }, &n_compressed);
  const std::vector<int32_t> want = release_map();
  REQUIRE(map.size() == want.size());
  CHECK(n_compressed == 99092);
  long differ = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (map[i] == want[i]) continue;
    if (differ++ < 5) {
      const int32_t id = static_cast<int32_t>(i);
      FAIL_CHECK("id " << i << " (decoded " << json(tok.decode(std::span<const int32_t>(&id, 1), false)).dump()
                       << ") maps to " << map[i] << ", engram.py gives " << want[i]);
    }
  }
  REQUIRE_MESSAGE(differ == 0, differ << " of " << want.size() << " ids differ");
  const ds41::EngramHashParams p = derive_engram_params(release_spec(), tok);
  CHECK(p.token_map == want);
  // compressed count 99,092 (checked inside), pad, primes, offsets, multipliers as engram.py's
  const json& pj = params_json();
  CHECK(p.pad_id == 2);
  CHECK(p.primes == flat(pj["primes"]));
  CHECK(p.offsets == flat(pj["offsets"]));
  CHECK(p.multipliers == flat(pj["multipliers"]));
  // a model vocab beyond the tokenizer's ids cannot be mapped
  EngramSpec big = release_spec();
  big.vocab_size = 129281;
  CHECK_ERROR_MENTIONS(derive_engram_params(big, tok), "exceeds the tokenizer's 129280 ids");
  EngramSpec wrong = release_spec();
  wrong.compressed_vocab_size = 99093;
  CHECK_ERROR_MENTIONS(derive_engram_params(wrong, tok), "the tokenizer gives 99092 compressed ids");
}

#undef CHECK_ERROR_MENTIONS

}  // namespace test_engram_params
