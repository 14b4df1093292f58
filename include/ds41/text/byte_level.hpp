// ds41/text/byte_level.hpp — GPT-2's byte-level alphabet: every byte is written as one printable
// code point (printable Latin-1 bytes as themselves, the other 68 as U+0100 + n in byte order), so
// that BPE works on text with no control or whitespace characters. HF tokenizers' bytes_char()
// (pre_tokenizers/byte_level.rs) builds the same table.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include "utf8.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text::byte_level {

struct Tables {
  std::array<char32_t, 256> byte_to_char{};
  std::array<std::string, 256> byte_to_utf8;
  std::array<int16_t, 512> char_to_byte{};  // -1: not in the alphabet (every code point is < 512)
  Tables() {
    char_to_byte.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    int n = 0;
    for (int b = 0; b < 256; ++b) byte_to_char[b] = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
    for (int b = 0; b < 256; ++b) {
      utf8::append(byte_to_utf8[b], byte_to_char[b]);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};
inline const Tables& tables() {
  static const Tables t;
  return t;
}

/// The byte-level form of raw bytes (what the ByteLevel pre-tokenizer turns a piece into).
inline std::string encode(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.byte_to_utf8[static_cast<uint8_t>(c)];
  return out;
}

/// HF's ByteLevel decoder on one token: its bytes when every character is in the alphabet,
/// otherwise the token's own UTF-8 bytes unchanged (added tokens such as "<｜User｜>").
inline void decode_token(std::string_view token, std::string& out) {
  const Tables& t = tables();
  const size_t mark = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const char32_t c = utf8::next(token, i);
    if (c >= 512 || t.char_to_byte[c] < 0) {
      out.resize(mark);
      out.append(token);
      return;
    }
    out += static_cast<char>(t.char_to_byte[c]);
  }
}

}  // namespace ds41::text::byte_level
#include "../core/fp_exact_end.hpp"
