// ds41/text/utf8.hpp — UTF-8 as the tokenizer needs it: strict validation (Rust's str rules: no
// overlongs, no surrogates, nothing above U+10FFFF), code point decoding of valid text, encoding,
// and lossy decoding that replaces each maximal invalid subsequence with one U+FFFD exactly as
// Rust's String::from_utf8_lossy does (HF's ByteLevel decoder ends with it). The lossy decoder can
// stop before an incomplete trailing sequence, which is what a streaming decoder holds back.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "../core/fp_exact_begin.hpp"
namespace ds41::text::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// Valid range of the byte after lead byte `lead` (the only continuation whose range depends on
/// the lead: E0/ED/F0/F4 exclude overlongs, surrogates and code points past U+10FFFF).
inline void second_byte_range(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80, hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  else if (lead == 0xED) hi = 0x9F;
  else if (lead == 0xF0) lo = 0x90;
  else if (lead == 0xF4) hi = 0x8F;
}
/// Length of the sequence a lead byte starts, 0 for a byte that cannot start one.
inline int sequence_length(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

/// Bytes of the valid prefix of the sequence starting at s[i] (1..4), and whether it is complete.
/// `valid` = 0 when s[i] cannot start a sequence.
inline void scan_sequence(std::string_view s, size_t i, int& valid, bool& complete) {
  const auto lead = static_cast<uint8_t>(s[i]);
  const int len = sequence_length(lead);
  if (len == 0) {
    valid = 0, complete = false;
    return;
  }
  valid = 1;
  for (int k = 1; k < len; ++k) {
    if (i + k >= s.size()) {
      complete = false;
      return;
    }
    uint8_t lo = 0x80, hi = 0xBF;
    if (k == 1) second_byte_range(lead, lo, hi);
    const auto b = static_cast<uint8_t>(s[i + k]);
    if (b < lo || b > hi) {
      complete = false;
      return;
    }
    ++valid;
  }
  complete = true;
}

/// Byte offset of the first byte that is not part of a valid UTF-8 sequence, or nullopt.
inline std::optional<size_t> first_invalid(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int valid;
    bool complete;
    scan_sequence(s, i, valid, complete);
    if (!complete) return i;
    i += static_cast<size_t>(valid);
  }
  return std::nullopt;
}

/// Code point at s[i] of valid UTF-8; advances i.
inline char32_t next(std::string_view s, size_t& i) {
  const auto b = static_cast<uint8_t>(s[i]);
  const int len = sequence_length(b);
  char32_t c = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
  for (int k = 1; k < len; ++k) c = (c << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  i += static_cast<size_t>(len < 1 ? 1 : len);
  return c;
}
/// Code point ending at s[end-1] of valid UTF-8.
inline char32_t last(std::string_view s, size_t end) {
  size_t i = end - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80) --i;
  return next(s, i);
}

inline void append(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

/// Appends the lossy decoding of `bytes` to `out` and returns how many bytes it consumed. With
/// `final` every byte is consumed; without it an incomplete (but so far valid) sequence at the very
/// end is left unconsumed, because later bytes may complete it. Decoding the consumed part and then
/// the rest gives the same text as decoding everything at once.
inline size_t decode_lossy(std::string_view bytes, bool final, std::string& out) {
  size_t i = 0, run = 0;  // [run, i): valid bytes not yet copied
  while (i < bytes.size()) {
    if (static_cast<uint8_t>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    int valid;
    bool complete;
    scan_sequence(bytes, i, valid, complete);
    if (complete) {
      i += static_cast<size_t>(valid);
      continue;
    }
    if (!final && valid > 0 && i + static_cast<size_t>(valid) == bytes.size()) {
      out.append(bytes.substr(run, i - run));
      return i;  // a sequence cut by the end of the input: wait for more bytes
    }
    out.append(bytes.substr(run, i - run));
    out.append(kReplacement);
    i += static_cast<size_t>(valid > 0 ? valid : 1);
    run = i;
  }
  out.append(bytes.substr(run, i - run));
  return i;
}

inline std::string decode_lossy(std::string_view bytes) {
  std::string out;
  decode_lossy(bytes, true, out);
  return out;
}

}  // namespace ds41::text::utf8
#include "../core/fp_exact_end.hpp"
