// ds41/text/engram_normalize.hpp — the key that engram.py's compressed token map groups tokens by.
//
// engram.py normalizes each token's decoded text with a Hugging Face `tokenizers` normalizer
// Sequence: NFKC, NFD, StripAccents, Lowercase, Replace(/[ \t\r\n]+/ → " "), Replace(/^ $/ → U+E000),
// Strip, Replace(U+E000 → " "). These are the Rust crate's semantics, not Python's:
// - StripAccents drops every combining mark (General_Category Mn, Mc and Me), not only Mn;
// - Lowercase maps each code point on its own with `char::to_lowercase` (full mapping: U+0130
//   becomes "i" + U+0307; no final-sigma context);
// - Strip trims Rust `char::is_whitespace` (Unicode White_Space), which leaves U+001C..U+001F that
//   Python's str.strip() would remove;
// - `^ $` (Oniguruma, where ^/$ are line anchors and only '\n' ends a line) can only match a whole
//   string of one space, because the collapse before it has removed every '\n'.
// The key is the normalized text, or the raw decoded text when normalization leaves nothing
// (tests/data/tokenizer/README.md §2 lists the traps, measured on the release's vocabulary).
#pragma once
#include <utf8proc.h>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

namespace engram_detail {

/// Unicode White_Space, the set Rust's char::is_whitespace tests.
constexpr bool rust_is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/// utf8proc_map over an explicit length (embedded NULs are ordinary characters here).
inline std::string utf8proc_transform(std::string_view s, int options, const char* step) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) {
    std::free(out);
    // the text itself is not echoed: it is what cannot be printed
    fail("engram normalize: ", step, " failed on a ", s.size(), "-byte text: ", utf8proc_errmsg(n),
         n == UTF8PROC_ERROR_INVALIDUTF8 ? " (the text is not valid UTF-8)" : "");
  }
  std::string r(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return r;
}

inline std::u32string to_code_points(std::string_view s) {
  std::u32string cps;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    DS41_CHECK(n > 0, "engram normalize: a ", s.size(), "-byte text is not valid UTF-8");
    cps.push_back(static_cast<char32_t>(cp));
    p += n;
    left -= n;
  }
  return cps;
}

inline std::string to_utf8(const std::u32string& cps) {
  std::string out;
  out.reserve(cps.size() * 2);
  utf8proc_uint8_t buf[4];
  for (char32_t c : cps) {
    const utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

/// Rust's char::to_lowercase: utf8proc's simple mapping, except U+0130, the one code point whose
/// unconditional full lowercase (SpecialCasing.txt) is two code points. (After NFD and
/// StripAccents no U+0130 is left, but the step is kept faithful on its own.)
inline void append_rust_lowercase(std::u32string& out, char32_t c) {
  if (c == 0x130) {
    out += U"i\u0307";
    return;
  }
  out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

constexpr char32_t kSentinel = 0xE000;  // engram.py's private-use stand-in for a lone space

}  // namespace engram_detail

/// engram.py's `normalizer.normalize_str(text)` (may be empty).
inline std::string engram_normalize(std::string_view text) {
  using namespace engram_detail;
  const std::string nfkc = utf8proc_transform(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT, "NFKC");
  const std::string nfd = utf8proc_transform(nfkc, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE, "NFD");
  // StripAccents, then Lowercase, code point by code point
  std::u32string cps;
  for (char32_t c : to_code_points(nfd)) {
    const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) continue;
    append_rust_lowercase(cps, c);
  }
  // runs of [ \t\r\n] to one space
  std::u32string collapsed;
  collapsed.reserve(cps.size());
  bool in_run = false;
  for (char32_t c : cps) {
    const bool ws = c == U' ' || c == U'\t' || c == U'\r' || c == U'\n';
    if (!ws || !in_run) collapsed.push_back(ws ? U' ' : c);
    in_run = ws;
  }
  if (collapsed == U" ") collapsed = std::u32string(1, kSentinel);
  size_t b = 0, e = collapsed.size();
  while (b < e && rust_is_whitespace(collapsed[b])) ++b;
  while (e > b && rust_is_whitespace(collapsed[e - 1])) --e;
  std::u32string stripped = collapsed.substr(b, e - b);
  for (char32_t& c : stripped)
    if (c == kSentinel) c = U' ';
  return to_utf8(stripped);
}

/// The key a decoded token groups under: its normalization, or the text itself when that is empty.
inline std::string engram_key(std::string_view decoded) {
  std::string k = engram_normalize(decoded);
  return k.empty() ? std::string(decoded) : k;
}

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
