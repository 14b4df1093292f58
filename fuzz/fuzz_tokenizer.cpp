// libFuzzer target: any bytes as a tokenizer.json must give a Tokenizer or a ds41::Error — never a
// crash, a hang or a leak. A tokenizer that loads then encodes a bit of text (valid and invalid
// UTF-8, added-token-like and byte-fragment text) and decodes ids in and out of range, whole and
// streamed, and the two decodes must agree.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include "ds41/text/tokenizer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > (1u << 20)) return 0;  // keep each input cheap
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  std::optional<ds41::text::Tokenizer> tok;
  try {
    tok = ds41::text::Tokenizer::from_json_text(json, "fuzz");
  } catch (const ds41::Error&) {
    return 0;
  }
  static const char* texts[] = {"Hello, world! 12345 \xe4\xbd\xa0\xe5\xa5\xbd\r\n\t  x", "ab ab-ab<s></s>", "",
                                "\xF0\x9F\x98\x80 \xCC\x81" "e \xEF\xBF\xBD", "\xC3\x28 invalid"};
  std::vector<int32_t> ids;
  for (const char* t : texts) {
    try {
      const std::vector<int32_t> got = tok->encode(t);
      ids.insert(ids.end(), got.begin(), got.end());
    } catch (const ds41::Error&) {
    }
  }
  // the input's own bytes as text too (often invalid UTF-8: an Error)
  try {
    tok->encode(json.substr(0, 256));
  } catch (const ds41::Error&) {
  }
  const long n = tok->vocab_size();
  for (long id = 0; id < n && id < 64; ++id)  // ids that name a token (a vocab may have holes)
    if (tok->is_added(static_cast<int32_t>(id)) || tok->model().token(static_cast<int32_t>(id))) ids.push_back(static_cast<int32_t>(id));
  ids.push_back(static_cast<int32_t>(n));  // out of range: an Error
  for (bool skip : {false, true}) {
    try {
      tok->decode(ids, skip);
      std::abort();  // the last id is out of range
    } catch (const ds41::Error&) {
    }
    ids.pop_back();
    const std::string whole = tok->decode(ids, skip);
    ds41::text::StreamDecoder s(*tok, skip);
    std::string streamed;
    for (int32_t id : ids) streamed += s.push(id);
    streamed += s.finish();
    if (streamed != whole) std::abort();
    ids.push_back(static_cast<int32_t>(n));
  }
  return 0;
}
