// ds41/text/gguf_tokenizer.hpp — the tokenizer as GGUF metadata (llama.cpp's tokenizer.ggml.* keys):
//   tokenizer.ggml.model       "gpt2" (byte-level BPE; the only model read here)
//   tokenizer.ggml.pre         pre-tokenizer name: "deepseek-v3" (llama.cpp's name for DeepSeek V3's
//                              three Split regexes + ByteLevel, which V4/V4.1 keep) or "joyai-llm"
//                              (written by antirez's DeepSeek-V4.1 GGUFs; llama.cpp treats it alike)
//   tokenizer.ggml.tokens      string per id
//   tokenizer.ggml.token_type  i32 per id: 1 normal, 2 unknown, 3 control (a special added token),
//                              4 user_defined (a non-special added token), 5 unused (no token), 6 byte
//   tokenizer.ggml.merges      "a b" strings in rank order
//   tokenizer.ggml.{bos,eos,padding}_token_id  u32, when known
// Added tokens read back as HF's defaults for the release: not normalized, no strip, not single-word.
#pragma once
#include <fstream>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include "../io/gguf_reader.hpp"
#include "../io/gguf_writer.hpp"
#include "tokenizer.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

enum class GgufTokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

/// DeepSeek V3/V4/V4.1's pre_tokenizer, as in the release's tokenizer.json.
inline const nlohmann::json& deepseek_v3_pre_tokenizer() {
  static const nlohmann::json j = nlohmann::json::parse(R"({"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "\\p{N}{1,3}"}, "behavior": "Isolated", "invert": false},
    {"type": "Split", "pattern": {"Regex": "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"}, "behavior": "Isolated", "invert": false},
    {"type": "Split", "pattern": {"Regex": "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"}, "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": false}]})");
  return j;
}

namespace gguf_tok_detail {
inline const gguf::Value& need(const gguf::GgufFile& f, const std::string& key, gguf::ValueType type) {
  const gguf::Value* v = f.find(key);
  DS41_CHECK(v, "gguf ", f.path(), ": no key '", key, "' (the file carries no tokenizer)");
  DS41_CHECK(v->type == type, "gguf ", f.path(), ": key '", key, "' has type ", gguf::value_type_name(v->type), ", expected ",
             gguf::value_type_name(type));
  return *v;
}
inline const std::vector<gguf::Value>& array_of(const gguf::GgufFile& f, const std::string& key, gguf::ValueType elem,
                                                bool any_int = false) {
  const gguf::Value& v = need(f, key, gguf::ValueType::kArray);
  const bool ok = any_int ? gguf::Value::scalar(v.elem, 0).is_int() : v.elem == elem;
  DS41_CHECK(ok, "gguf ", f.path(), ": key '", key, "' is an array of ", gguf::value_type_name(v.elem), ", expected ",
             any_int ? "integers" : gguf::value_type_name(elem));
  return v.arr;
}
inline std::optional<int32_t> optional_id(const gguf::GgufFile& f, const std::string& key, size_t n_tokens) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
  DS41_CHECK(v->is_int(), "gguf ", f.path(), ": key '", key, "' is not an integer");
  const int64_t id = v->as_i64();
  DS41_CHECK(id >= 0 && static_cast<uint64_t>(id) < n_tokens, "gguf ", f.path(), ": key '", key, "' = ", id,
             " is not a token id (", n_tokens, " tokens)");
  return static_cast<int32_t>(id);
}
}  // namespace gguf_tok_detail

/// The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata.
inline Tokenizer from_gguf(const gguf::GgufFile& f) {
  using namespace gguf_tok_detail;
  using gguf::ValueType;
  const std::string model = need(f, "tokenizer.ggml.model", ValueType::kString).str;
  DS41_CHECK(model == "gpt2", "gguf ", f.path(), ": tokenizer.ggml.model '", model,
             "' is not supported (only \"gpt2\", byte-level BPE)");
  const std::string pre = need(f, "tokenizer.ggml.pre", ValueType::kString).str;
  DS41_CHECK(pre == "deepseek-v3" || pre == "joyai-llm", "gguf ", f.path(), ": tokenizer.ggml.pre '", pre,
             "' is not a known pre-tokenizer (known: deepseek-v3, joyai-llm)");
  const auto& tokens = array_of(f, "tokenizer.ggml.tokens", ValueType::kString);
  const auto& types = array_of(f, "tokenizer.ggml.token_type", ValueType::kI32, true);
  const auto& merges = array_of(f, "tokenizer.ggml.merges", ValueType::kString);
  DS41_CHECK(types.size() == tokens.size(), "gguf ", f.path(), ": tokenizer.ggml.token_type has ", types.size(),
             " entries, tokenizer.ggml.tokens ", tokens.size());
  DS41_CHECK(tokens.size() < (size_t{1} << 30), "gguf ", f.path(), ": too many tokens");

  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array(), merge_list = nlohmann::json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id].str;
    if (auto bad = utf8::first_invalid(t))
      fail("gguf ", f.path(), ": token ", id, " is not valid UTF-8 (byte ", *bad, ")");
    const int64_t type = types[id].as_i64();
    DS41_CHECK(type >= 1 && type <= 6, "gguf ", f.path(), ": token ", id, " has token_type ", type, " (known: 1..6)");
    if (type == static_cast<int64_t>(GgufTokenType::kUnused)) continue;
    // every token is in the BPE vocab (HF's release has ids 0..2 in both): an added token then keeps
    // its id when HF's add_tokens looks it up, and text never reaches BPE as a whole added token
    DS41_CHECK(!vocab.contains(t), "gguf ", f.path(), ": token '", t, "' appears twice (ids ", vocab.value(t, -1), " and ", id, ")");
    vocab[t] = id;
    switch (static_cast<GgufTokenType>(type)) {
      case GgufTokenType::kControl: case GgufTokenType::kUserDefined:
        added.push_back({{"id", id}, {"content", t}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                         {"normalized", false}, {"special", type == static_cast<int64_t>(GgufTokenType::kControl)}});
        break;
      default: break;
    }
  }
  for (const auto& m : merges) merge_list.push_back(m.str);
  nlohmann::json doc = {{"version", "1.0"},
                        {"added_tokens", added},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", deepseek_v3_pre_tokenizer()},
                        {"post_processor", nullptr},
                        {"decoder", {{"type", "ByteLevel"}}},
                        {"model", {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merge_list)}}}};
  Tokenizer tok = Tokenizer::from_json(doc, f.path() + " (GGUF metadata)");
  tok.set_special_ids(optional_id(f, "tokenizer.ggml.bos_token_id", tokens.size()), optional_id(f, "tokenizer.ggml.eos_token_id", tokens.size()),
                      optional_id(f, "tokenizer.ggml.padding_token_id", tokens.size()));
  return tok;
}

/// Writes `tok` as tokenizer.ggml.* metadata. Only the DeepSeek V3/V4 pre-tokenizer has a GGUF name,
/// and merges must not contain spaces (the "a b" form); anything else is refused.
inline void add_gguf_metadata(const Tokenizer& tok, gguf::GgufWriter& w) {
  using gguf::Value;
  using gguf::ValueType;
  DS41_CHECK(tok.pre_tokenizer_json() == deepseek_v3_pre_tokenizer(), "gguf tokenizer: this pre_tokenizer has no GGUF name (only "
             "DeepSeek V3/V4's, \"deepseek-v3\", is written)");
  DS41_CHECK(tok.has_byte_level_decoder(), "gguf tokenizer: only byte-level BPE (ByteLevel decoder) is written as \"gpt2\"");
  const long n = tok.vocab_size();
  std::vector<Value> tokens, types;
  tokens.reserve(static_cast<size_t>(n));
  types.reserve(static_cast<size_t>(n));
  for (long id = 0; id < n; ++id) {
    const auto i = static_cast<int32_t>(id);
    GgufTokenType type = GgufTokenType::kNormal;
    std::string text;
    if (const AddedToken* a = tok.added_token(i)) {
      text = a->content;
      type = tok.is_special(i) ? GgufTokenType::kControl : GgufTokenType::kUserDefined;
      // `normalized` is not carried: with the empty normalizer it only decides whether the token is
      // looked for before or after the others, which the round-trip test shows changes nothing here
      DS41_CHECK(!a->lstrip && !a->rstrip && !a->single_word, "gguf tokenizer: added token ", id, " '", text,
                 "' has flags (lstrip/rstrip/single_word) that GGUF cannot carry");
    } else if (const std::string* t = tok.model().token(i)) {
      text = *t;
    } else {
      text = "[PAD" + std::to_string(id) + "]";  // a hole in the ids, as llama.cpp's converter writes it
      type = GgufTokenType::kUnused;
    }
    tokens.push_back(Value::string(std::move(text)));
    types.push_back(Value::i32(static_cast<int32_t>(type)));
  }
  std::vector<Value> merges;
  merges.reserve(tok.model().merges().size());
  for (const auto& [a, b] : tok.model().merges()) {
    DS41_CHECK(a.find(' ') == std::string::npos && b.find(' ') == std::string::npos, "gguf tokenizer: merge '", a, "' '", b,
               "' contains a space, which the \"a b\" form cannot hold");
    merges.push_back(Value::string(a + " " + b));
  }
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("deepseek-v3"));
  w.set("tokenizer.ggml.tokens", Value::array(ValueType::kString, std::move(tokens)));
  w.set("tokenizer.ggml.token_type", Value::array(ValueType::kI32, std::move(types)));
  w.set("tokenizer.ggml.merges", Value::array(ValueType::kString, std::move(merges)));
  if (auto v = tok.bos_id()) w.set("tokenizer.ggml.bos_token_id", Value::u32(static_cast<uint32_t>(*v)));
  if (auto v = tok.eos_id()) w.set("tokenizer.ggml.eos_token_id", Value::u32(static_cast<uint32_t>(*v)));
  if (auto v = tok.pad_id()) w.set("tokenizer.ggml.padding_token_id", Value::u32(static_cast<uint32_t>(*v)));
}

/// Rewrites the GGUF file at `path` (a single file or the first shard of a split model, which holds
/// all the metadata) with `tok`'s tokenizer.ggml.* metadata added; its other metadata and tensors
/// are kept. Written under a temporary name and renamed, so a failure leaves the file as it was.
inline void add_tokenizer_to_gguf_file(const std::string& path, const Tokenizer& tok) {
  const gguf::GgufFile f(path);
  gguf::GgufWriter w(f.alignment());
  for (const std::string& k : f.keys()) w.set(k, *f.find(k));
  add_gguf_metadata(tok, w);
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<uint8_t> bytes(t.bytes);
    f.file().read_at(bytes.data(), t.bytes, t.offset, "tensor data");
    w.add_tensor(t.name, t.shape(), t.type, std::move(bytes));
  }
  w.write_file(path);  // the writer renames its temporary file over `path`
}

/// bos / eos / pad ids from a tokenizer_config.json ("bos_token": "..." or {"content": "..."});
/// tokens it does not name stay unset. Errors name the file.
inline void set_special_ids_from_config(Tokenizer& tok, const std::string& config_path) {
  std::ifstream in(config_path);
  DS41_CHECK(in, "tokenizer config ", config_path, ": cannot open");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("tokenizer config ", config_path, ": not valid JSON: ", e.what());
  }
  auto id_of = [&](const char* key) -> std::optional<int32_t> {
    if (!j.is_object() || !j.contains(key) || j[key].is_null()) return std::nullopt;
    const nlohmann::json& v = j[key];
    const nlohmann::json* content = v.is_string() ? &v : (v.is_object() && v.contains("content") ? &v["content"] : nullptr);
    DS41_CHECK(content && content->is_string(), "tokenizer config ", config_path, ": \"", key, "\" is neither a string nor {\"content\": ...}");
    auto id = tok.token_to_id(content->get<std::string>());
    DS41_CHECK(id, "tokenizer config ", config_path, ": \"", key, "\" names '", content->get<std::string>(), "', not a token");
    return id;
  };
  tok.set_special_ids(id_of("bos_token"), id_of("eos_token"), id_of("pad_token"));
}

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
