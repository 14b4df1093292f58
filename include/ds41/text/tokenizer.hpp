// ds41/text/tokenizer.hpp — the byte-level BPE tokenizer of a Hugging Face tokenizer.json
// (DeepSeek-V4.1's release file), giving exactly what HF tokenizers gives:
//   encode(text)  = Tokenizer.encode(text, add_special_tokens=False).ids
//   decode(ids)   = Tokenizer.decode(ids, skip_special_tokens)
// encode: added tokens are split out first (added_tokens.hpp), the normalizer runs (only the empty
// one is supported), the pre-tokenizer splits the rest (pretokenizer.hpp), BPE tokenizes each piece
// (bpe.hpp). The post-processor adds nothing without special tokens, so it is parsed and unused.
// decode: every id becomes its token string (added tokens their content); the ByteLevel decoder maps
// each token back to bytes (or keeps it as UTF-8 when it is not byte-level text) and turns the
// concatenation into text with one U+FFFD per maximal invalid subsequence. No spaces are inserted.
// Unsupported parts of a tokenizer.json are refused with an error naming the file, never ignored.
//
// A Tokenizer is immutable after loading (copies share it) and may be used from several threads.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>
#include "../core/error.hpp"
#include "added_tokens.hpp"
#include "bpe.hpp"
#include "byte_level.hpp"
#include "pretokenizer.hpp"
#include "utf8.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

class StreamDecoder;

class Tokenizer {
 public:
  static Tokenizer from_json_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    DS41_CHECK(f, "tokenizer ", path, ": cannot open");
    std::ostringstream ss;
    ss << f.rdbuf();
    DS41_CHECK(!f.bad(), "tokenizer ", path, ": read failed");
    return from_json_text(ss.str(), path);
  }

  static Tokenizer from_json_text(std::string_view json, const std::string& what) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(json.begin(), json.end());
    } catch (const nlohmann::json::exception& e) {
      fail("tokenizer ", what, ": not valid JSON: ", e.what());
    }
    return from_json(j, what);
  }

  /// From a parsed tokenizer.json document.
  static Tokenizer from_json(const nlohmann::json& j, const std::string& what_) {
    const std::string what = "tokenizer " + what_;
    try {
      return Tokenizer(load(j, what));
    } catch (const nlohmann::json::exception& e) {  // a value of the wrong JSON type somewhere
      fail(what, ": malformed: ", e.what());
    }
  }

  /// Largest id + 1 over the vocab and the added tokens.
  long vocab_size() const { return d_->vocab_size; }

  std::vector<int32_t> encode(std::string_view text) const {
    if (auto bad = utf8::first_invalid(text))
      fail("tokenizer encode: the text is not valid UTF-8 (byte offset ", *bad, ", value 0x", hex(static_cast<uint8_t>(text[*bad])), ")");
    std::vector<Piece> raw, pieces;
    d_->added.split(std::string(text), false, raw);
    for (Piece& p : raw) {
      if (p.id >= 0) pieces.push_back(std::move(p));
      else d_->added.split(p.text, true, pieces);  // the normalizer (empty) has nothing to do first
    }
    std::vector<int32_t> ids;
    for (Piece& p : pieces) {
      if (p.id >= 0) {
        ids.push_back(p.id);
        continue;
      }
      for (const std::string& w : d_->pre.apply(std::move(p.text))) d_->bpe.tokenize(w, ids);
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const {
    std::string bytes;
    bool first = true;
    for (int32_t id : ids) {
      const std::string* tok = token_of(id, "decode");
      if (skip_special_tokens && d_->special_contents.count(*tok)) continue;
      append_token(*tok, first, bytes);
      first = false;
    }
    return d_->byte_level_decoder ? utf8::decode_lossy(bytes) : bytes;
  }

  /// The token string of an id: the added token's content, else the vocab entry.
  std::string id_to_token(int32_t id) const { return *token_of(id, "id_to_token"); }
  std::optional<int32_t> token_to_id(std::string_view token) const {
    if (auto it = d_->added_ids.find(token); it != d_->added_ids.end()) return it->second;
    return d_->bpe.id(token);
  }
  bool is_added(int32_t id) const { return added_token(id) != nullptr; }
  bool is_special(int32_t id) const {
    const AddedToken* t = added_token(id);
    return t && d_->special_contents.count(t->content);
  }

  // What the GGUF writer and other layers need to see.
  const Bpe& model() const { return d_->bpe; }
  const std::vector<AddedToken>& added_tokens() const { return d_->added.tokens(); }
  const AddedToken* added_token(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < d_->added_by_id.size() ? d_->added_by_id[id] : nullptr;
  }
  /// The tokenizer.json pre_tokenizer value (null when none).
  const nlohmann::json& pre_tokenizer_json() const { return d_->pre_json; }
  bool has_byte_level_decoder() const { return d_->byte_level_decoder; }
  // special ids a GGUF file names (tokenizer.json does not carry them)
  std::optional<int32_t> bos_id() const { return d_->bos; }
  std::optional<int32_t> eos_id() const { return d_->eos; }
  std::optional<int32_t> pad_id() const { return d_->pad; }
  void set_special_ids(std::optional<int32_t> bos, std::optional<int32_t> eos, std::optional<int32_t> pad) {
    auto d = std::make_shared<Data>(*d_);
    d->bos = bos, d->eos = eos, d->pad = pad;
    d_ = std::move(d);
  }

 private:
  friend class StreamDecoder;
  struct Data {
    Bpe bpe;
    AddedVocabulary added;
    TokenMap added_ids;
    std::vector<const AddedToken*> added_by_id;
    std::unordered_set<std::string, StringHash, std::equal_to<>> special_contents;
    PreTokenizer pre;
    nlohmann::json pre_json;
    bool byte_level_decoder = false;
    long vocab_size = 0;
    std::optional<int32_t> bos, eos, pad;

    Data() = default;
    Data(const Data& o)
        : bpe(o.bpe), added(o.added), added_ids(o.added_ids), special_contents(o.special_contents), pre(o.pre), pre_json(o.pre_json),
          byte_level_decoder(o.byte_level_decoder), vocab_size(o.vocab_size), bos(o.bos), eos(o.eos), pad(o.pad) {
      index_added();
    }
    void index_added() {  // pointers into `added`, rebuilt for every copy
      added_by_id.assign(static_cast<size_t>(vocab_size), nullptr);
      for (const AddedToken& t : added.tokens()) added_by_id[t.id] = &t;
    }
  };
  explicit Tokenizer(std::shared_ptr<const Data> d) : d_(std::move(d)) {}

  static std::string hex(unsigned v) {
    static const char* digits = "0123456789ABCDEF";
    return {digits[(v >> 4) & 15], digits[v & 15]};
  }

  const std::string* token_of(int32_t id, const char* op) const {
    if (const AddedToken* t = added_token(id)) return &t->content;
    if (const std::string* t = d_->bpe.token(id)) return t;
    fail("tokenizer ", op, ": id ", id, " is not a token (the vocabulary has ids 0..", d_->vocab_size - 1, ")");
  }
  void append_token(const std::string& tok, bool first, std::string& out) const {
    if (d_->byte_level_decoder) {
      byte_level::decode_token(tok, out);
    } else {
      if (!first) out += ' ';  // HF without a decoder: tokens joined by spaces
      out += tok;
    }
  }

  static bool flag(const nlohmann::json& t, const char* key, bool dflt, const std::string& what) {
    if (!t.contains(key) || t[key].is_null()) return dflt;
    DS41_CHECK(t[key].is_boolean(), what, ": \"", key, "\" must be true or false");
    return t[key].get<bool>();
  }

  /// Only normalizers that do nothing: null, or Sequences of nothing but such.
  static void check_normalizer(const nlohmann::json& n, const std::string& what) {
    if (n.is_null()) return;
    DS41_CHECK(n.is_object() && n.contains("type") && n["type"].is_string(), what, ": normalizer must be null or an object with a \"type\"");
    const std::string type = n["type"].get<std::string>();
    DS41_CHECK(type == "Sequence", what, ": normalizer \"", type, "\" is not supported (only an empty Sequence or null)");
    DS41_CHECK(n.contains("normalizers") && n["normalizers"].is_array(), what, ": normalizer Sequence needs a \"normalizers\" array");
    for (const auto& sub : n["normalizers"]) check_normalizer(sub, what);
  }

  static std::shared_ptr<const Data> load(const nlohmann::json& j, const std::string& what) {
    DS41_CHECK(j.is_object(), what, ": the document is not a JSON object");
    if (j.contains("version")) {
      DS41_CHECK(j["version"].is_string() && j["version"].get<std::string>() == "1.0", what, ": unknown tokenizer version ",
                 j["version"].dump());
    }
    DS41_CHECK(j.contains("model") && j["model"].is_object(), what, ": no \"model\" object");
    const nlohmann::json& m = j["model"];
    if (m.contains("type")) {
      DS41_CHECK(m["type"].is_string() && m["type"].get<std::string>() == "BPE", what, ": model type ", m["type"].dump(),
                 " is not supported (only BPE)");
    }
    DS41_CHECK(m.contains("vocab") && m["vocab"].is_object(), what, ": model has no \"vocab\" object");
    DS41_CHECK(m.contains("merges") && m["merges"].is_array(), what, ": model has no \"merges\" array");
    auto refuse_set = [&](const char* key) {
      DS41_CHECK(!m.contains(key) || m[key].is_null(), what, ": model \"", key, "\" = ", m[key].dump(), " is not supported");
    };
    refuse_set("continuing_subword_prefix");
    refuse_set("end_of_word_suffix");
    if (m.contains("dropout") && !m["dropout"].is_null())
      DS41_CHECK(m["dropout"].is_number() && m["dropout"].get<double>() == 0.0, what, ": model dropout ", m["dropout"].dump(),
                 " is not supported (encode must be deterministic)");
    DS41_CHECK(!flag(m, "byte_fallback", false, what + ": model"), what, ": model byte_fallback is not supported");

    TokenMap vocab;
    vocab.reserve(m["vocab"].size());
    for (auto it = m["vocab"].begin(); it != m["vocab"].end(); ++it) {
      DS41_CHECK(it.value().is_number_integer() && it.value().get<int64_t>() >= 0 && it.value().get<int64_t>() < (int64_t{1} << 30), what,
                 ": vocab entry \"", it.key(), "\" needs an id in [0, 2^30), has ", it.value().dump());
      vocab.emplace(it.key(), static_cast<int32_t>(it.value().get<int64_t>()));
    }
    std::vector<std::pair<std::string, std::string>> merges;
    merges.reserve(m["merges"].size());
    for (const auto& e : m["merges"]) {
      if (e.is_string()) {  // "a b" (older files); "#version" lines are skipped as HF does
        const std::string s = e.get<std::string>();
        if (s.rfind("#version", 0) == 0) continue;
        const size_t sp = s.find(' ');
        DS41_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, what, ": merge ", merges.size(), " \"", s,
                   "\" is not two tokens separated by one space");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else {
        DS41_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string(), what, ": merge ", merges.size(),
                   " is neither \"a b\" nor [\"a\", \"b\"]: ", e.dump());
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      }
    }
    Bpe::Options opt;
    if (m.contains("unk_token") && !m["unk_token"].is_null()) {
      DS41_CHECK(m["unk_token"].is_string(), what, ": model unk_token must be a string or null");
      opt.unk_token = m["unk_token"].get<std::string>();
    }
    opt.fuse_unk = flag(m, "fuse_unk", false, what + ": model");
    opt.ignore_merges = flag(m, "ignore_merges", false, what + ": model");
    const size_t vocab_entries = vocab.size();

    auto d = std::make_shared<Data>();
    d->bpe = Bpe(std::move(vocab), merges, opt, what);
    check_normalizer(j.value("normalizer", nlohmann::json()), what);
    d->pre_json = j.value("pre_tokenizer", nlohmann::json());
    d->pre = PreTokenizer::from_json(d->pre_json, what);
    const nlohmann::json dec = j.value("decoder", nlohmann::json());
    if (!dec.is_null()) {
      DS41_CHECK(dec.is_object() && dec.contains("type") && dec["type"].is_string(), what, ": decoder must be null or an object with a \"type\"");
      DS41_CHECK(dec["type"].get<std::string>() == "ByteLevel", what, ": decoder \"", dec["type"].get<std::string>(),
                 "\" is not supported (only ByteLevel)");
      d->byte_level_decoder = true;
    }
    if (j.contains("post_processor"))  // encode adds no special tokens: parsed for shape only
      DS41_CHECK(j["post_processor"].is_null() || j["post_processor"].is_object(), what, ": post_processor must be null or an object");

    // added tokens, with ids assigned as HF's add_tokens does
    std::vector<AddedToken> added;
    if (j.contains("added_tokens") && !j["added_tokens"].is_null()) {
      DS41_CHECK(j["added_tokens"].is_array(), what, ": \"added_tokens\" must be an array");
      int64_t next_id = static_cast<int64_t>(vocab_entries);
      for (size_t k = 0; k < j["added_tokens"].size(); ++k) {
        const auto& e = j["added_tokens"][k];
        const std::string w = what + ": added_tokens[" + std::to_string(k) + "]";
        DS41_CHECK(e.is_object() && e.contains("content") && e["content"].is_string(), w, ": needs a \"content\" string");
        AddedToken t;
        t.content = e["content"].get<std::string>();
        if (t.content.empty()) continue;  // HF ignores empty tokens
        t.special = flag(e, "special", false, w);
        t.normalized = flag(e, "normalized", !t.special, w);
        t.single_word = flag(e, "single_word", false, w);
        t.lstrip = flag(e, "lstrip", false, w);
        t.rstrip = flag(e, "rstrip", false, w);
        if (auto it = d->added_ids.find(t.content); it != d->added_ids.end()) t.id = it->second;
        else if (auto id = d->bpe.id(t.content)) t.id = *id;
        else t.id = static_cast<int32_t>(next_id++);
        DS41_CHECK(t.id < (int64_t{1} << 30), w, ": too many added tokens");
        if (t.special) d->special_contents.insert(t.content);
        d->added_ids[t.content] = t.id;
        bool replaced = false;
        for (AddedToken& o : added)
          if (o.id == t.id) o = t, replaced = true;  // the same content again: the later flags win, as HF
        if (!replaced) added.push_back(std::move(t));
      }
    }
    d->vocab_size = d->bpe.max_id() + 1;
    for (const AddedToken& t : added) d->vocab_size = std::max<long>(d->vocab_size, t.id + 1L);
    d->added = AddedVocabulary(std::move(added));
    d->index_added();
    return d;
  }

  std::shared_ptr<const Data> d_;
};

/// Text as ids arrive: push() returns what can be shown now, never half a UTF-8 character (an
/// incomplete trailing sequence waits for the next ids); finish() returns the rest as decode would.
/// The concatenation of everything returned equals Tokenizer::decode of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok, bool skip_special_tokens = false) : tok_(tok), skip_(skip_special_tokens) {}

  std::string push(int32_t id) {
    const std::string* t = tok_.token_of(id, "stream decode");
    std::string out;
    if (skip_ && tok_.d_->special_contents.count(*t)) return out;
    if (!tok_.d_->byte_level_decoder) {
      tok_.append_token(*t, first_, out);
      first_ = false;
      return out;
    }
    byte_level::decode_token(*t, pending_);
    pending_.erase(0, utf8::decode_lossy(pending_, false, out));
    return out;
  }
  std::string finish() {
    std::string out;
    utf8::decode_lossy(pending_, true, out);
    pending_.clear();
    return out;
  }

 private:
  Tokenizer tok_;
  bool skip_;
  bool first_ = true;
  std::string pending_;  // bytes of an incomplete trailing sequence
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
