// The byte-level BPE tokenizer against Hugging Face tokenizers: the release's tokenizer.json and the
// vectors made by tests/data/tokenizer/make_vectors.py (HF tokenizers 0.23.3). Everything is exact.
#include <doctest/doctest.h>
#include <chrono>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include "ds41/text/gguf_tokenizer.hpp"
#include "ds41/text/tokenizer.hpp"
#include "temp_dir.hpp"

namespace test_tokenizer {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using ds41::testing::error_of;
using ds41::text::StreamDecoder;
using ds41::text::Tokenizer;
using nlohmann::json;

namespace {

const std::string kData = DS41_TOKENIZER_DATA;

json read_json(const std::string& name) {
  std::ifstream f(kData + "/" + name);
  REQUIRE(f);
  return json::parse(f);
}

const Tokenizer& release() {
  static const Tokenizer t = Tokenizer::from_json_file(kData + "/tokenizer.json");
  return t;
}

std::vector<int32_t> ids_of(const json& a) { return a.get<std::vector<int32_t>>(); }

std::string streamed(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip, bool check_pieces = true) {
  StreamDecoder s(t, skip);
  std::string out;
  for (int32_t id : ids) {
    const std::string piece = s.push(id);
    if (check_pieces) CHECK(!ds41::text::utf8::first_invalid(piece));  // never half a character
    out += piece;
  }
  return out + s.finish();
}

// A small tokenizer.json around a given model / normalizer / pre_tokenizer (for refusal tests).
std::string tiny(const std::string& model, const std::string& normalizer = "null", const std::string& pre = "null",
                 const std::string& decoder = R"({"type": "ByteLevel"})") {
  return R"({"version": "1.0", "added_tokens": [], "normalizer": )" + normalizer + R"(, "pre_tokenizer": )" + pre +
         R"(, "post_processor": null, "decoder": )" + decoder + (model.empty() ? "" : R"(, "model": )" + model) + "}";
}
const std::string kTinyModel = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": ["a b"]})";

}  // namespace

TEST_CASE("tokenizer: the release file loads (sizes, ids, flags) in reasonable time") {
  const auto t0 = std::chrono::steady_clock::now();
  const Tokenizer& t = release();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("release tokenizer.json loaded in " << s << " s");
  CHECK(t.vocab_size() == 129280);
  CHECK(t.model().vocab().size() == 128000);
  CHECK(t.model().merges().size() == 127741);
  CHECK(t.added_tokens().size() == 1283);
  long special = 0;
  for (int32_t id = 0; id < t.vocab_size(); ++id) special += t.is_special(id);
  CHECK(special == 1229);
  CHECK(t.token_to_id("<｜begin▁of▁sentence｜>") == 0);
  CHECK(t.token_to_id("<｜end▁of▁sentence｜>") == 1);
  CHECK(t.token_to_id("<｜System｜>") == 128799);
  CHECK(t.id_to_token(128799) == "<｜System｜>");
  CHECK(t.is_added(128799));
  CHECK_FALSE(t.is_special(128799));  // V4.1: not special, normalized
  CHECK(t.is_special(129279));
  CHECK(t.id_to_token(129279) == "<|place_holder_mm_span_0442|>");
  CHECK_FALSE(t.is_added(100));
  CHECK(t.id_to_token(270) == "Ġthe");
  CHECK_FALSE(t.token_to_id("no such token").has_value());
}

TEST_CASE("tokenizer: every encode vector (ids, tokens, decode)") {
  const json v = read_json("encode_vectors.json");
  REQUIRE(v["vectors"].size() == 62);
  const Tokenizer& t = release();
  for (const auto& e : v["vectors"]) {
    const std::string text = e["text"];
    INFO("text: " << text);
    const std::vector<int32_t> ids = t.encode(text);
    CHECK(ids == ids_of(e["ids"]));
    std::vector<std::string> tokens;
    for (int32_t id : ids) tokens.push_back(t.id_to_token(id));
    CHECK(tokens == e["tokens"].get<std::vector<std::string>>());
    CHECK(t.decode(ids) == e["decoded"].get<std::string>());
    CHECK(streamed(t, ids, false) == e["decoded"].get<std::string>());
  }
}

TEST_CASE("tokenizer: every decode vector, with and without special tokens, whole and streamed") {
  const json v = read_json("decode_vectors.json");
  REQUIRE(v["vectors"].size() == 100);
  const Tokenizer& t = release();
  for (const auto& e : v["vectors"]) {
    const std::vector<int32_t> ids = ids_of(e["ids"]);
    INFO("ids: " << e["ids"].dump());
    CHECK(t.decode(ids) == e["decoded"].get<std::string>());
    CHECK(t.decode(ids, true) == e["decoded_skip_special"].get<std::string>());
    CHECK(streamed(t, ids, false) == e["decoded"].get<std::string>());
    CHECK(streamed(t, ids, true) == e["decoded_skip_special"].get<std::string>());
  }
}

TEST_CASE("tokenizer: every chat prompt encodes to its ids") {
  const json v = read_json("chat_vectors.json");
  REQUIRE(v["vectors"].size() == 20);
  for (const auto& e : v["vectors"]) {
    INFO("chat vector: " << e["name"].get<std::string>());
    CHECK(release().encode(e["prompt"].get<std::string>()) == ids_of(e["ids"]));
  }
}

TEST_CASE("tokenizer: stress vectors (whitespace kinds, new code points, glued added tokens, random ids)") {
  // made by tests/data/tokenizer/make_stress_vectors.py with HF tokenizers
  const json v = read_json("stress_vectors.json");
  REQUIRE(v["encode"].size() == 400);
  REQUIRE(v["decode"].size() == 200);
  for (const auto& e : v["encode"]) {
    INFO("text: " << e["text"].dump());
    CHECK(release().encode(e["text"].get<std::string>()) == ids_of(e["ids"]));
  }
  for (const auto& e : v["decode"]) {
    INFO("ids: " << e["ids"].dump());
    CHECK(release().decode(ids_of(e["ids"])) == e["decoded"].get<std::string>());
    CHECK(release().decode(ids_of(e["ids"]), true) == e["decoded_skip_special"].get<std::string>());
    CHECK(streamed(release(), ids_of(e["ids"]), false) == e["decoded"].get<std::string>());
  }
}

TEST_CASE("tokenizer: the README's traps") {
  const Tokenizer& t = release();
  // \r\n is two tokens
  const auto crlf = t.encode("line1\r\nline2");
  CHECK(std::count(crlf.begin(), crlf.end(), 204) == 1);
  CHECK(std::count(crlf.begin(), crlf.end(), 201) == 1);
  // V4-only names are plain text in V4.1; V4.1's names are single tokens
  CHECK(t.encode("<｜deepseek_image｜>") == std::vector<int32_t>{129264});
  CHECK(t.encode("<｜image2｜>").size() > 1);
  CHECK(t.encode("<｜User｜>hi<｜Assistant｜>").front() == 128803);
  // 54 non-special added tokens survive skip_special_tokens; special ones do not
  CHECK(t.decode(std::vector<int32_t>{0, 128803, 1}, true) == "<｜User｜>");
  CHECK(t.decode(std::vector<int32_t>{0, 128803, 1}) == "<｜begin▁of▁sentence｜><｜User｜><｜end▁of▁sentence｜>");
  // byte fragments decode alone to U+FFFD; 1,484 ids do
  long fffd = 0;
  for (int32_t id = 0; id < t.vocab_size(); ++id) fffd += t.decode(std::vector<int32_t>{id}).find("\xEF\xBF\xBD") != std::string::npos;
  CHECK(fffd == 1484);
  // empty text, digits in groups of three, a lone space run
  CHECK(t.encode("").empty());
  CHECK(t.decode(t.encode("1234567")) == "1234567");
  CHECK(t.encode("1234567").size() == 3);
}

TEST_CASE("tokenizer: bad input is refused with a clear error") {
  const Tokenizer& t = release();
  CHECK(error_of([&] { t.encode("ok\xC3"); }).find("byte offset 2") != std::string::npos);
  CHECK(error_of([&] { t.encode("a\xED\xA0\x80"); }).find("byte offset 1") != std::string::npos);  // a surrogate
  CHECK(error_of([&] { t.encode("\xC0\xAF"); }).find("not valid UTF-8") != std::string::npos);       // overlong
  CHECK(error_of([&] { t.decode(std::vector<int32_t>{5, 129280}); }).find("id 129280") != std::string::npos);
  CHECK(error_of([&] { t.decode(std::vector<int32_t>{-1}); }).find("id -1") != std::string::npos);
  CHECK(error_of([&] { t.id_to_token(999999); }).find("999999") != std::string::npos);
  StreamDecoder s(t);
  CHECK(error_of([&] { s.push(129280); }).find("129280") != std::string::npos);
  CHECK(error_of([] { Tokenizer::from_json_file("/no/such/tokenizer.json"); }).find("/no/such/tokenizer.json") != std::string::npos);
}

TEST_CASE("tokenizer: malformed tokenizer.json files are refused, naming the problem") {
  auto err = [](const std::string& text) { return error_of([&] { Tokenizer::from_json_text(text, "t.json"); }); };
  CHECK(err(tiny(kTinyModel)).empty());  // the base case loads
  CHECK(err("{not json").find("t.json: not valid JSON") != std::string::npos);
  CHECK(err("[]").find("not a JSON object") != std::string::npos);
  CHECK(err(tiny("")).find("no \"model\"") != std::string::npos);
  CHECK(err(tiny(R"({"type": "WordPiece", "vocab": {}})")).find("WordPiece") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]})")).find("\"b\", not in the vocab") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": [["a", "b"]]})")).find("makes \"ab\"") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b c"]})")).find("two tokens") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [7]})")).find("merge 0") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": -3}, "merges": []})")).find("needs an id") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": 0, "b": 0}, "merges": []})")).find("not unique") != std::string::npos);
  CHECK(err(tiny(R"({"type": "BPE", "vocab": {"a": 0}, "merges": [], "byte_fallback": true})")).find("byte_fallback") != std::string::npos);
  CHECK(err(tiny(kTinyModel, R"({"type": "NFKC"})")).find("normalizer \"NFKC\" is not supported") != std::string::npos);
  CHECK(err(tiny(kTinyModel, R"({"type": "Sequence", "normalizers": [{"type": "Lowercase"}]})")).find("Lowercase") != std::string::npos);
  CHECK(err(tiny(kTinyModel, R"({"type": "Sequence", "normalizers": []})")).empty());
  CHECK(err(tiny(kTinyModel, "null", R"({"type": "Whitespace"})")).find("\"Whitespace\" is not supported") != std::string::npos);
  CHECK(err(tiny(kTinyModel, "null", R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated", "invert": false})"))
            .find("t.json: pre_tokenizer: cannot compile regex (a") != std::string::npos);
  CHECK(err(tiny(kTinyModel, "null", R"({"type": "Split", "pattern": {"Regex": "[a"}, "behavior": "Isolated", "invert": false})"))
            .find("unterminated bracket class") != std::string::npos);
  CHECK(err(tiny(kTinyModel, "null", R"({"type": "Split", "pattern": {"Regex": "[a[b]]"}, "behavior": "Isolated", "invert": false})"))
            .find("nested bracket classes") != std::string::npos);
  CHECK(err(tiny(kTinyModel, "null", R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways", "invert": false})"))
            .find("Sideways") != std::string::npos);
  CHECK(err(tiny(kTinyModel, "null", "null", R"({"type": "WordPiece"})")).find("decoder \"WordPiece\"") != std::string::npos);
  CHECK(err(R"({"model": )" + kTinyModel + R"(, "added_tokens": [{"id": 5}]})").find("added_tokens[0]") != std::string::npos);
  CHECK(err(R"({"version": "2.0", "model": )" + kTinyModel + "}").find("version") != std::string::npos);
}

TEST_CASE("tokenizer: Split behaviors, invert, String patterns, added-token flags and ids follow HF") {
  // Every expected value below was printed by HF tokenizers 0.23.3 for the same tokenizer.json
  // (Tokenizer.from_str(...).encode(text).ids). No byte level: the vocab's single characters show
  // the pieces ("a" "b" merge to "ab" only inside one piece).
  const std::string vocab = R"({"type": "BPE", "vocab": {"a": 0, "b": 1, "-": 2, " ": 3, "ab": 4, "X": 5}, "merges": ["a b"]})";
  auto with = [&](const std::string& split) { return Tokenizer::from_json_text(tiny(vocab, "null", split, "null"), "split"); };
  auto sp = [](const std::string& pattern, const std::string& behavior, bool invert = false, const std::string& kind = "Regex") {
    return R"({"type": "Split", "pattern": {")" + kind + R"(": ")" + pattern + R"("}, "behavior": ")" + behavior +
           R"(", "invert": )" + (invert ? "true" : "false") + "}";
  };
  using V = std::vector<int32_t>;
  CHECK(with(sp("-", "Removed", false, "String")).encode("ab-ab") == V{4, 4});
  CHECK(with(sp("b", "Isolated")).encode("ab") == V{0, 1});
  CHECK(with(sp("b", "MergedWithPrevious")).encode("abab") == V{4, 4});
  CHECK(with(sp("a", "MergedWithNext")).encode("abab") == V{4, 4});
  CHECK(with(sp("a", "Removed", true)).encode("abXa") == V{0, 0});
  CHECK(with(sp("a", "Contiguous")).encode("aabXab") == V{0, 0, 1, 5, 0, 1});
  CHECK(with(sp("X*", "Isolated")).encode("abXXab") == V{0, 1, 5, 5, 0, 1});  // empty matches split too
  CHECK(with(sp("^a", "Isolated")).encode("ab\nab") == V{0, 1, 0, 1});      // ^ is a line anchor (Ruby syntax)
  // a character with no vocab entry and no unk_token is dropped; its neighbours then merge
  CHECK(with("null").encode("aZb") == V{4});
  // added tokens: "ab" is also in the vocab, so HF gives it the vocab's id 4 (not the file's 6);
  // "abX" is new and gets the next id after the vocab's size, 6 (not the file's 7)
  auto added = [&](const std::string& flags) {
    const std::string no = R"("single_word": false, "lstrip": false, "rstrip": false)";
    std::string ab = R"({"id": 6, "content": "ab", "special": true, "normalized": false, )" + no + "}";
    if (!flags.empty()) ab = R"({"id": 6, "content": "ab", "special": true, "normalized": false, )" + flags + "}";
    return Tokenizer::from_json_text(R"({"added_tokens": [)" + ab + R"(, {"id": 7, "content": "abX", "special": false, "normalized": true, )" +
                                         no + R"(}], "model": )" + vocab + "}",
                                     "added");
  };
  CHECK(added("").encode("abXab") == V{4, 5, 4});  // the non-normalized "ab" is split out before "abX" is looked for
  CHECK(added("").token_to_id("abX") == 6);
  CHECK(added(R"("single_word": true, "lstrip": false, "rstrip": false)").encode("aab b") == V{0, 4, 3, 1});
  CHECK(added(R"("single_word": true, "lstrip": false, "rstrip": false)").encode("- ab -") == V{2, 3, 4, 3, 2});
  CHECK(added(R"("single_word": true, "lstrip": false, "rstrip": false)").encode("ab- xab ab") == V{4, 2, 3, 4, 3, 4});
  CHECK(added(R"("single_word": false, "lstrip": true, "rstrip": true)").encode("a  ab  b") == V{0, 4, 1});
  CHECK(added(R"("single_word": false, "lstrip": true, "rstrip": false)").encode("a   ab b") == V{0, 4, 3, 1});
  const std::string only_abx = R"({"added_tokens": [{"id": 9, "content": "abX", "special": false, "normalized": true, "single_word": false, "lstrip": false, "rstrip": false}], "model": )" + vocab + "}";
  CHECK(Tokenizer::from_json_text(only_abx, "abx").encode("abXab") == V{6, 4});
  // decode: without a decoder tokens are joined by spaces; the ByteLevel decoder keeps a token that
  // is not byte-level text (" " here) as it is; an unknown id is an error here (HF drops it)
  CHECK(added("").decode(V{0, 6, 3}) == "a abX  ");
  const Tokenizer bl = Tokenizer::from_json_text(tiny(vocab, "null", "null", R"({"type": "ByteLevel", "add_prefix_space": true})"), "bl");
  CHECK(bl.decode(V{0, 4, 3}) == "aab ");
}

TEST_CASE("tokenizer: StreamDecoder equals decode on random id sequences") {
  const Tokenizer& t = release();
  std::mt19937 rng(41);
  std::uniform_int_distribution<int32_t> any(0, static_cast<int32_t>(t.vocab_size() - 1));
  for (int round = 0; round < 300; ++round) {
    std::vector<int32_t> ids(1 + rng() % 12);
    for (int32_t& id : ids) id = any(rng);
    for (bool skip : {false, true}) CHECK(streamed(t, ids, skip) == t.decode(ids, skip));
  }
}

TEST_CASE("tokenizer: encode from several threads gives the same ids") {
  const json v = read_json("encode_vectors.json");
  const Tokenizer t = Tokenizer::from_json_file(kData + "/tokenizer.json");  // a cold cache
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (const auto& e : v["vectors"]) bad[k] += t.encode(e["text"].get<std::string>()) != ids_of(e["ids"]);
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 4; ++k) CHECK(bad[k] == 0);
}

TEST_CASE("tokenizer: release tokenizer → GGUF metadata → from_gguf gives the same tokenizer") {
  ds41::testing::TempDir dir("ds41-tok");
  Tokenizer with_ids = release();
  with_ids.set_special_ids(0, 1, 1);
  ds41::gguf::GgufWriter w;
  ds41::text::add_gguf_metadata(with_ids, w);
  w.write_file(dir.file("tok.gguf"));
  const ds41::gguf::GgufFile f(dir.file("tok.gguf"));
  CHECK(f.find("tokenizer.ggml.pre")->str == "deepseek-v3");
  const Tokenizer g = ds41::text::from_gguf(f);
  CHECK(g.vocab_size() == release().vocab_size());
  CHECK(g.bos_id() == 0);
  CHECK(g.eos_id() == 1);
  CHECK(g.pad_id() == 1);
  for (int32_t id = 0; id < g.vocab_size(); id += 97) {
    CHECK(g.id_to_token(id) == release().id_to_token(id));
    CHECK(g.is_special(id) == release().is_special(id));
  }
  const json ev = read_json("encode_vectors.json");
  for (const auto& e : ev["vectors"]) CHECK(g.encode(e["text"].get<std::string>()) == ids_of(e["ids"]));
  const json dv = read_json("decode_vectors.json");
  for (const auto& e : dv["vectors"]) {
    CHECK(g.decode(ids_of(e["ids"])) == e["decoded"].get<std::string>());
    CHECK(g.decode(ids_of(e["ids"]), true) == e["decoded_skip_special"].get<std::string>());
  }
  const json cv = read_json("chat_vectors.json");
  for (const auto& e : cv["vectors"]) CHECK(g.encode(e["prompt"].get<std::string>()) == ids_of(e["ids"]));

  // refusals: another model, an unknown pre-tokenizer name (named in the message)
  ds41::gguf::GgufWriter w2;
  ds41::text::add_gguf_metadata(with_ids, w2);
  w2.set("tokenizer.ggml.pre", ds41::gguf::Value::string("llama3"));
  w2.write_file(dir.file("pre.gguf"));
  CHECK(error_of([&] { ds41::text::from_gguf(ds41::gguf::GgufFile(dir.file("pre.gguf"))); }).find("'llama3'") != std::string::npos);
  w2.set("tokenizer.ggml.model", ds41::gguf::Value::string("llama"));
  w2.write_file(dir.file("model.gguf"));
  CHECK(error_of([&] { ds41::text::from_gguf(ds41::gguf::GgufFile(dir.file("model.gguf"))); }).find("'llama'") != std::string::npos);
  ds41::gguf::GgufWriter w3;
  w3.write_file(dir.file("none.gguf"));
  CHECK(error_of([&] { ds41::text::from_gguf(ds41::gguf::GgufFile(dir.file("none.gguf"))); }).find("tokenizer.ggml.model") != std::string::npos);
}

}  // namespace test_tokenizer
