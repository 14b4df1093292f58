// DeepSeek-V4.1's chat prompt format (ds41/text/chat.hpp) against prompts made by the Python
// encoder itself: the release's 20 chat vectors (tests/data/tokenizer/chat_vectors.json) and 82
// cases for the branches those leave alone, errors included (tests/data/chat/extra_vectors.json,
// made by make_extra_vectors.py there). Every prompt must match byte for byte.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include "ds41/text/chat.hpp"
#include "ds41/text/py_json.hpp"

namespace test_chat {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using ds41::text::ChatOptions;
using ds41::text::ThinkingMode;
using OJ = nlohmann::ordered_json;

namespace {

OJ load(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), path);
  return OJ::parse(f);
}

std::string error_of(const OJ& messages, const ChatOptions& opt) {
  try {
    ds41::text::encode_messages(messages, opt);
  } catch (const ds41::Error& e) {
    return e.what();
  }
  return "<no error>";
}

// Checks every vector of a file: prompt and image records, or an error where the Python raised.
// Returns how many prompts matched.
size_t check_vectors(const std::string& path) {
  const OJ file = load(path);
  size_t matched = 0;
  for (const OJ& v : file.at("vectors")) {
    const std::string name = v.at("name");
    CAPTURE(name);
    const ChatOptions opt = ds41::text::chat_options_from_kwargs(v.at("kwargs"));
    if (v.contains("raises")) {
      const std::string err = error_of(v.at("messages"), opt);
      CHECK_MESSAGE(err != "<no error>", "the Python raised ", v.at("raises").get<std::string>());
      // the encoder's own asserts and raises: the same words (a Python TypeError/KeyError on a
      // malformed message has no message worth copying; the task list's order is a set's)
      const std::string kind = v.at("raises");
      if (kind == "ValueError" || kind == "AssertionError" || kind == "NotImplementedError") {
        const std::string py = v.at("message");
        const std::string words = py.substr(0, std::min({py.size(), size_t{100}, py.find(". Valid tasks")}));
        CHECK_MESSAGE(err.find(words) != std::string::npos, err, " vs ", py);
      }
      continue;
    }
    const auto got = ds41::text::encode_messages(v.at("messages"), opt);
    CHECK(got.text == v.at("prompt").get<std::string>());
    const OJ images = v.value("images", OJ::array());
    REQUIRE(got.images.size() == images.size());
    for (size_t i = 0; i < images.size(); ++i) CHECK(got.images[i].dump() == images[i].dump());  // key order too
    matched += got.text == v.at("prompt").get<std::string>();
  }
  return matched;
}

}  // namespace

TEST_CASE("chat: the release vectors, prompt for prompt") {
  CHECK(check_vectors(std::string(DS41_TOKENIZER_DATA) + "/chat_vectors.json") == 20);
}

TEST_CASE("chat: the extra vectors (every branch of encode_messages, errors included)") {
  const std::string path = std::string(DS41_CHAT_DATA) + "/extra_vectors.json";
  const OJ file = load(path);
  CHECK(file.at("encoder_sha256") == "b4bd8a06f94a06a61564156c7a543d649ed86ecdd72a4dfb94b064e16d9c572f");
  size_t errors = 0;
  for (const OJ& v : file.at("vectors")) errors += v.contains("raises");
  CHECK(file.at("vectors").size() == 82);
  CHECK(check_vectors(path) == 82 - errors);
}

TEST_CASE("chat: chat_prompt, the one-turn convenience") {
  CHECK(ds41::text::chat_prompt("Hello!", ThinkingMode::kChat) ==
        "<｜begin▁of▁sentence｜><｜User｜>Hello!<｜Assistant｜></think>");
  CHECK(ds41::text::chat_prompt("What is 2+2?", ThinkingMode::kThinking, "You are a helpful assistant.") ==
        "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
        "thorough the reasoning)\n\nYou are a helpful assistant.<｜User｜>What is 2+2?<｜Assistant｜><think>");
  CHECK_THROWS_AS(ds41::text::chat_prompt("a <｜deepseek_image｜> b", ThinkingMode::kChat), ds41::Error);
}

TEST_CASE("chat: options and malformed input give one clear error") {
  ChatOptions opt;
  CHECK(error_of(OJ::object(), opt).find("not a list of messages") != std::string::npos);
  CHECK(error_of(OJ::array({"hello"}), opt).find("messages[0] is a string, not a message object") != std::string::npos);
  CHECK(error_of(OJ::parse(R"([{"role": "user", "content": "x", "task": ["query"]}])"), opt).find("Invalid task") !=
        std::string::npos);
  CHECK(error_of(OJ::parse(R"([{"role": "user", "content": {"a": 1}}])"), opt).find("a text that is an object") !=
        std::string::npos);
  opt.context = OJ::object({{"role", "user"}});
  CHECK(error_of(OJ::array(), opt).find("context is an object, not a list") != std::string::npos);
  // effort is validated only when a message is rendered (the Python asserts inside render_message)
  ChatOptions bad;
  bad.reasoning_effort = "medium";
  CHECK(ds41::text::encode_messages(OJ::array(), bad).text == "<｜begin▁of▁sentence｜>");
  CHECK(error_of(OJ::parse(R"([{"role": "user", "content": "x"}])"), bad).find("Invalid reasoning effort") != std::string::npos);
  CHECK_THROWS_AS(ds41::text::chat_options_from_kwargs(OJ{{"thinking_mode", "fast"}}), ds41::Error);
  CHECK_THROWS_AS(ds41::text::chat_options_from_kwargs(OJ{{"drop_thinking", true}}), ds41::Error);  // no mode
  CHECK_THROWS_AS(ds41::text::chat_options_from_kwargs(OJ{{"thinking_mode", "chat"}, {"temperature", 1}}), ds41::Error);
}

TEST_CASE("chat: a nlohmann::json converts (its keys arrive sorted)") {
  const nlohmann::json msgs = nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])");
  CHECK(ds41::text::encode_messages(msgs).text == "<｜begin▁of▁sentence｜><｜User｜>Hi<｜Assistant｜></think>");
}

TEST_CASE("py_json: repr(float) as Python 3 prints it") {
  // expected strings printed by CPython 3.11's repr()
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"}, {-0.0, "-0.0"}, {0.1, "0.1"}, {1.5, "1.5"}, {3.0, "3.0"}, {100.0, "100.0"},
      {1e-05, "1e-05"}, {0.0001, "0.0001"}, {0.00012345, "0.00012345"}, {1e+16, "1e+16"},
      {1000000000000000.0, "1000000000000000.0"}, {123456789012345.0, "123456789012345.0"},
      {1234567890123456.0, "1234567890123456.0"}, {1.2345678901234568e+16, "1.2345678901234568e+16"},
      {1.7976931348623157e+308, "1.7976931348623157e+308"}, {5e-324, "5e-324"}, {2.5e-300, "2.5e-300"},
      {0.30000000000000004, "0.30000000000000004"}, {1.0 / 3.0, "0.3333333333333333"}, {-2.5e-07, "-2.5e-07"},
      {1e+22, "1e+22"}, {1e+100, "1e+100"}, {123.456, "123.456"}};
  for (const auto& [v, s] : cases) CHECK(ds41::text::py_float_repr(v) == s);
  CHECK(ds41::text::py_float_repr(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(ds41::text::py_float_repr(std::nan("")) == "nan");
}

TEST_CASE("py_json: json.dumps(ensure_ascii=False) byte for byte") {
  OJ v = OJ::object();
  v["z"] = OJ::array({1, 2.0, nullptr, true, false, "é\"\\\n\r\t\b\f\x01\x1f\x7f\u2028😀"});
  v["a"] = OJ::object();
  v["b"] = OJ::array();
  v["c"] = OJ{{"x", -0.0}};
  // printed by CPython 3.11: json.dumps(the same dict, ensure_ascii=False)
  CHECK(ds41::text::py_dumps(v) ==
        "{\"z\": [1, 2.0, null, true, false, \"é\\\"\\\\\\n\\r\\t\\b\\f\\u0001\\u001f\x7f\u2028😀\"], \"a\": {}, \"b\": [], "
        "\"c\": {\"x\": -0.0}}");
  CHECK(ds41::text::py_dumps(OJ(std::numeric_limits<double>::infinity())) == "Infinity");
  CHECK(ds41::text::py_dumps(OJ(-std::numeric_limits<double>::infinity())) == "-Infinity");
  CHECK(ds41::text::py_dumps(OJ(std::nan(""))) == "NaN");
  CHECK(ds41::text::py_dumps(OJ(18446744073709551615ull)) == "18446744073709551615");
  CHECK(ds41::text::py_dumps(OJ(-9223372036854775807LL - 1)) == "-9223372036854775808");
  CHECK_FALSE(ds41::text::py_truthy(OJ(0.0)));
  CHECK(ds41::text::py_truthy(OJ(std::nan(""))));
  CHECK_FALSE(ds41::text::py_truthy(OJ("")));
  CHECK(ds41::text::py_str(OJ(nullptr), "x") == "None");
  CHECK(ds41::text::py_str(OJ(true), "x") == "True");
  CHECK_THROWS_AS(ds41::text::py_str(OJ::array({1}), "x"), ds41::Error);
}

}  // namespace test_chat
