// ds41/testing/tiny_tokenizer.hpp — a tokenizer.json for a test model's small vocabulary, in the
// release's own format (byte-level BPE, the release's pre-tokenizer, normalizer, post-processor and
// decoder sections, its special and chat tokens as added tokens), so that a golden fixture's model
// written in the release layout can be run on text and its engram hash parameters derived from it.
//
// Layout of the ids: 0..2 `<｜begin▁of▁sentence｜>`, `<｜end▁of▁sentence｜>`, `<｜▁pad▁｜>` (special, in
// the BPE vocab too, as in the release); then the byte-level characters of printable ASCII, tab and
// newline; then merges learnt by plain BPE from a fixed English text; the last ids are the chat
// format's markers, non-special added tokens outside the BPE vocab (as the release's 128000+ are:
// Hugging Face numbers an added token missing from the vocab after the vocab's last id, so the
// markers must come last). The last merges are chosen so that the Engram token map (each id decoded
// alone and normalized: for ASCII, lowercase, whitespace runs to one space, strip) has exactly
// `compressed` distinct keys, as the fixture's config states.
#pragma once
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "../core/error.hpp"
#include "../text/byte_level.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::testing {

namespace tiny_tokenizer_detail {

/// The ByteLevel alphabet's character for byte `b` (text/byte_level.hpp: std-only, so no link to
/// ds41::text is needed).
inline std::string byte_char(unsigned char b) { return text::byte_level::encode(std::string(1, static_cast<char>(b))); }

/// The Engram key of an ASCII token's text (engram.py's normalizer on ASCII: NFKC/NFD/accents do
/// nothing; lowercase; [ \t\r\n]+ → " "; a lone space stays; strip) — "" keys by the raw text.
inline std::string ascii_key(const std::string& text) {
  std::string s;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      if (s.empty() || s.back() != ' ') s += ' ';
    } else {
      s += static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    }
  }
  if (s == " ") return s;
  const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  s = b == std::string::npos ? "" : s.substr(b, e - b + 1);
  return s.empty() ? text : s;
}

inline const char* kCorpus =
    "The quick brown fox jumps over the lazy dog. A model reads the text and writes the next token. "
    "In the beginning there was a sequence of tokens, and the tokens were read one at a time. "
    "Hello world! How are you today? I am fine, thank you. What is two plus two? It is four. "
    "Tell me a joke about a cat and a dog. The cat sat on the mat, and the dog ran in the park. "
    "We test the tokenizer on this text: it is short, it is plain, and it is in English.";

}  // namespace tiny_tokenizer_detail

/// The text of a tokenizer.json with `vocab_size` ids whose Engram token map has `compressed` keys.
inline std::string tiny_tokenizer_json(long vocab_size, long compressed) {
  using namespace tiny_tokenizer_detail;
  const std::vector<std::string> specials = {"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜▁pad▁｜>"};
  const std::vector<std::string> markers = {"<｜System｜>", "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>"};
  std::vector<unsigned char> bytes = {'\t', '\n', ' '};
  for (unsigned char b = 0x21; b <= 0x7E; ++b) bytes.push_back(b);
  const long fixed = static_cast<long>(specials.size() + markers.size() + bytes.size());
  DS41_CHECK(vocab_size >= fixed, "tiny tokenizer: a vocabulary of ", vocab_size, " ids cannot hold the ", fixed,
             " special tokens, chat markers and ASCII characters");
  // tokens as byte-level strings (vocab) and as text (what decoding one id gives)
  std::vector<std::string> token(specials.begin(), specials.end()), text(specials.begin(), specials.end());
  const long bpe_size = vocab_size - static_cast<long>(markers.size());  // ids of the BPE vocab
  std::map<std::string, std::string> text_of;  // byte-level string → text
  for (unsigned char b : bytes) {
    token.push_back(byte_char(b));
    text.push_back(std::string(1, static_cast<char>(b)));
    text_of[token.back()] = text.back();
  }
  // BPE training on the corpus's words (space-prefixed, as the pre-tokenizer splits them)
  std::vector<std::vector<std::string>> words;
  {
    std::string corpus = kCorpus, w;
    for (size_t i = 0; i <= corpus.size(); ++i) {
      const char c = i < corpus.size() ? corpus[i] : ' ';
      const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
      if (!alpha && !w.empty()) {
        std::vector<std::string> sym;
        for (char ch : w) sym.push_back(byte_char(static_cast<unsigned char>(ch)));
        words.push_back(sym);
        w.clear();
      }
      if (alpha) w += (w.empty() && i > 0 && corpus[i - 1] == ' ') ? std::string(" ") + c : std::string(1, c);
    }
  }
  std::vector<std::pair<std::string, std::string>> merges;
  std::set<std::string> known(token.begin(), token.end());
  std::set<std::string> keys;
  for (const auto& t : text) keys.insert(ascii_key(t));
  for (const auto& m : markers) keys.insert(ascii_key(m));  // their ids come last, their keys count now
  auto add_merge = [&](const std::string& a, const std::string& b) {
    merges.push_back({a, b});
    token.push_back(a + b);
    text.push_back(text_of[a] + text_of[b]);
    text_of[a + b] = text.back();
    known.insert(a + b);
    keys.insert(ascii_key(text.back()));
  };
  auto distinct = [&]() { return static_cast<long>(keys.size()); };
  while (static_cast<long>(token.size()) < bpe_size) {
    const long left = bpe_size - static_cast<long>(token.size());
    const long need = compressed - distinct();  // new keys still wanted
    // the most frequent pair whose merge is new; it must add a key when keys are wanted and the
    // room is just enough, and must not when no more keys are wanted
    std::map<std::pair<std::string, std::string>, long> freq;
    for (const auto& w : words)
      for (size_t i = 0; i + 1 < w.size(); ++i) ++freq[{w[i], w[i + 1]}];
    std::pair<std::string, std::string> best;
    long best_n = 0;
    for (const auto& [p, n] : freq) {
      if (known.count(p.first + p.second)) continue;
      const bool new_key = !keys.count(ascii_key(text_of[p.first] + text_of[p.second]));
      if (need <= 0 && new_key) continue;
      if (need >= left && !new_key) continue;
      if (n > best_n) best = p, best_n = n;
    }
    if (best_n == 0) {
      // no corpus pair fits: a merge of two known tokens chosen for its key alone ("Ġ"+t keys as t:
      // no new key; two letters not merged yet: usually a new one)
      bool done = false;
      for (size_t i = 0; i < token.size() && !done; ++i)
        for (size_t j = 0; j < token.size() && !done; ++j) {
          if (i < specials.size() || j < specials.size()) continue;
          const std::string& a = token[i];
          const std::string& b = token[j];
          if (known.count(a + b)) continue;
          const bool new_key = !keys.count(ascii_key(text_of[a] + text_of[b]));
          if ((need > 0) == new_key) {
            add_merge(a, b);
            done = true;
          }
        }
      DS41_CHECK(done, "tiny tokenizer: cannot reach ", compressed, " engram keys with ", vocab_size, " ids");
      continue;
    }
    add_merge(best.first, best.second);
    for (auto& w : words) {  // apply the merge to the corpus
      std::vector<std::string> out;
      for (size_t i = 0; i < w.size(); ++i)
        if (i + 1 < w.size() && w[i] == best.first && w[i + 1] == best.second) out.push_back(best.first + best.second), ++i;
        else out.push_back(w[i]);
      w = std::move(out);
    }
  }
  DS41_CHECK(distinct() == compressed, "tiny tokenizer: ", vocab_size, " ids give ", distinct(),
             " engram keys, not the config's ", compressed);

  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  auto added_token = [](long id, const std::string& content, bool special) {
    return nlohmann::ordered_json{{"id", id},         {"content", content}, {"single_word", false}, {"lstrip", false},
                                  {"rstrip", false},  {"normalized", !special}, {"special", special}};
  };
  for (size_t i = 0; i < specials.size(); ++i) added.push_back(added_token(static_cast<long>(i), specials[i], true));
  for (size_t i = 0; i < markers.size(); ++i) added.push_back(added_token(bpe_size + static_cast<long>(i), markers[i], false));
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", nlohmann::ordered_json::array()}};
  const std::string split3 =
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
      "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+";
  auto split = [](const std::string& re) {
    return nlohmann::ordered_json{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {split("\\p{N}{1,3}"), split("[一-龥぀-ゟ゠-ヿ]+"), split(split3),
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
  j["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}};
  j["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t i = 0; i < token.size(); ++i) vocab[token[i]] = static_cast<long>(i);
  nlohmann::ordered_json m = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges) m.push_back(a + " " + b);
  j["model"] = {{"type", "BPE"},          {"dropout", nullptr},        {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr}, {"fuse_unk", false},
                {"byte_fallback", false}, {"vocab", vocab},            {"merges", m}};
  return j.dump(1) + "\n";
}

/// The release's tokenizer_config.json (its bos/eos/pad tokens), for the tiny tokenizer.
inline std::string tiny_tokenizer_config_json() {
  auto tok = [](const char* s) {
    return nlohmann::ordered_json{{"__type", "AddedToken"}, {"content", s},        {"lstrip", false},
                                  {"normalized", true},     {"rstrip", false},     {"single_word", false}};
  };
  nlohmann::ordered_json j;
  j["add_bos_token"] = false;
  j["add_eos_token"] = false;
  j["bos_token"] = tok("<｜begin▁of▁sentence｜>");
  j["clean_up_tokenization_spaces"] = false;
  j["eos_token"] = tok("<｜end▁of▁sentence｜>");
  j["legacy"] = true;
  j["model_max_length"] = 1048576;
  j["pad_token"] = tok("<｜end▁of▁sentence｜>");
  j["sp_model_kwargs"] = nlohmann::ordered_json::object();
  j["unk_token"] = nullptr;
  j["tokenizer_class"] = "PreTrainedTokenizerFast";
  return j.dump(2) + "\n";
}

}  // namespace ds41::testing
#include "../core/fp_exact_end.hpp"
