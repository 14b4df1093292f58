// ds41/text/regex.hpp — the split regexes of a tokenizer.json, compiled with PCRE2 (8-bit, UTF +
// UCP, JIT when available) so that they match what Hugging Face tokenizers' Oniguruma matches.
//
// The two engines differ in a few places that these patterns reach, so the pattern is rewritten
// before it is compiled (translate()):
// - \s / \S: Oniguruma's \s is Unicode White_Space (25 code points, measured); PCRE2's UCP \s also
//   takes U+180E. Both are spelled out as explicit classes.
// - \p{L} \p{N} \p{P} \p{S} \p{M} and \d: the tokenizers wheel's Oniguruma has a newer Unicode
//   table than the system PCRE2; the missing code points (unicode_delta.hpp, measured over all
//   code points) are added to each class. Negated forms (\P{..}, \p{^..}, \D) get the same
//   correction outside a bracket class and are refused inside one.
// - \h / \H: Oniguruma (Ruby syntax) reads them as hex digit / not hex digit, PCRE2 as horizontal
//   space.
// - ^ and $ are line anchors in Ruby syntax: PCRE2_MULTILINE with LF as the only newline.
// - Nested bracket classes and class intersection (&&), which PCRE2 lacks, are refused.
// Empty matches follow the onig crate's find_iter: an empty match right after the previous match
// is skipped and the search moves on by one character.
//
// A compiled Regex is immutable; matching allocates its own match data, so one Regex may be used
// from several threads at once.
#pragma once
#ifndef PCRE2_CODE_UNIT_WIDTH
#define PCRE2_CODE_UNIT_WIDTH 8
#endif
#include <pcre2.h>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include "../core/error.hpp"
#include "unicode_delta.hpp"
#include "utf8.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

namespace regex_detail {
inline constexpr const char* kWhiteSpace = "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}-\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
// the complement of kWhiteSpace over all code points (for \S inside a bracket class)
inline constexpr const char* kNotWhiteSpace =
    "\\x{0}-\\x{8}\\x{E}-\\x{1F}\\x{21}-\\x{84}\\x{86}-\\x{9F}\\x{A1}-\\x{167F}\\x{1681}-\\x{1FFF}\\x{200B}-\\x{2027}"
    "\\x{202A}-\\x{202E}\\x{2030}-\\x{205E}\\x{2060}-\\x{2FFF}\\x{3001}-\\x{10FFFF}";

inline const char* delta_of(std::string_view prop) {
  if (prop == "L") return unicode_delta::kDeltaL;
  if (prop == "N") return unicode_delta::kDeltaN;
  if (prop == "P") return unicode_delta::kDeltaP;
  if (prop == "S") return unicode_delta::kDeltaS;
  if (prop == "M") return unicode_delta::kDeltaM;
  if (prop == "Nd") return unicode_delta::kDeltaNd;
  return nullptr;
}
}  // namespace regex_detail

/// Rewrites an Oniguruma (Ruby syntax) pattern into a PCRE2 pattern with the same matches (see above).
inline std::string translate_onig_pattern(std::string_view p, const std::string& what) {
  using namespace regex_detail;
  std::string out;
  bool in_class = false;
  size_t class_start = 0;  // index in p just after '[' or '[^'
  auto refuse = [&](const std::string& why) { fail(what, ": regex ", std::string(p), ": ", why); };
  // \p{X} (negated or not) for the corrected classes, inside or outside a bracket class
  auto property = [&](std::string_view prop, bool negated) {
    const char* delta = delta_of(prop);
    const std::string base = std::string(negated ? "\\P{" : "\\p{") + std::string(prop) + "}";
    if (!delta) {
      out += base;  // a class without a measured correction: PCRE2's own table
      return;
    }
    if (!negated) out += in_class ? base + delta : "[" + base + delta + "]";
    else if (in_class) refuse("a negated Unicode class inside a bracket class is not supported");
    else out += "(?:(?![" + std::string(delta) + "])" + base + ")";
  };
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      DS41_CHECK(i + 1 < p.size(), what, ": regex ", std::string(p), ": ends with a lone backslash");
      const char e = p[++i];
      switch (e) {
        case 's': out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]"; break;
        case 'S': out += in_class ? std::string(kNotWhiteSpace) : "[^" + std::string(kWhiteSpace) + "]"; break;
        case 'd': property("Nd", false); break;
        case 'D': property("Nd", true); break;
        case 'h': out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]"; break;
        case 'H':
          if (in_class) refuse("\\H inside a bracket class is not supported");
          out += "[^0-9a-fA-F]";
          break;
        case 'p':
        case 'P': {
          if (i + 1 < p.size() && p[i + 1] == '{') {
            const size_t close = p.find('}', i + 2);
            DS41_CHECK(close != std::string_view::npos, what, ": regex ", std::string(p), ": unterminated \\", e, "{");
            std::string_view prop = p.substr(i + 2, close - i - 2);
            bool negated = e == 'P';
            if (!prop.empty() && prop[0] == '^') negated = !negated, prop.remove_prefix(1);
            property(prop, negated);
            i = close;
          } else {
            out += '\\';
            out += e;
          }
          break;
        }
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (in_class) {
      if (c == ']' && i > class_start) {
        in_class = false;
      } else if (c == '[' && i + 1 < p.size() && p[i + 1] != ':') {
        refuse("nested bracket classes are not supported");
      } else if (c == '&' && i + 1 < p.size() && p[i + 1] == '&') {
        refuse("class intersection (&&) is not supported");
      }
      out += c;
      continue;
    }
    if (c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      class_start = i + 1;  // a ']' right after '[' or '[^' is a literal
      continue;
    }
    if (c == '(' && i + 2 < p.size() && p[i + 1] == '?') {
      // inline options: Ruby's (?m) is PCRE2's (?s) (dot matches newline)
      size_t j = i + 2;
      std::string flags;
      for (; j < p.size() && (p[j] == 'i' || p[j] == 'm' || p[j] == 'x' || p[j] == '-'); ++j) flags += p[j] == 'm' ? 's' : p[j];
      if (!flags.empty() && j < p.size() && (p[j] == ')' || p[j] == ':')) {
        out += "(?" + flags;
        i = j - 1;
        continue;
      }
    }
    out += c;
  }
  DS41_CHECK(!in_class, what, ": regex ", std::string(p), ": unterminated bracket class");
  return out;
}

class Regex {
 public:
  Regex() = default;
  /// `literal`: the pattern is a plain string to find (HF's Split String pattern).
  Regex(std::string_view pattern, bool literal, const std::string& what) {
    const std::string translated = literal ? std::string(pattern) : translate_onig_pattern(pattern, what);
    std::unique_ptr<pcre2_compile_context, decltype(&pcre2_compile_context_free)> ctx(pcre2_compile_context_create(nullptr),
                                                                                      &pcre2_compile_context_free);
    DS41_CHECK(ctx, what, ": out of memory compiling a regex");
    pcre2_set_newline(ctx.get(), PCRE2_NEWLINE_LF);
    // PCRE2_LITERAL admits no UCP (it has no classes to apply it to)
    const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP | PCRE2_MULTILINE);
    int err = 0;
    PCRE2_SIZE off = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(), options,
                                     &err, &off, ctx.get());
    if (!code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      fail(what, ": cannot compile regex ", std::string(pattern), ": ", reinterpret_cast<const char*>(msg), " (at offset ", off,
           " of the PCRE2 form)");
    }
    code_.reset(code, &pcre2_code_free);
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // falls back to the interpreter if JIT is missing
  }

  bool empty() const { return !code_; }

  /// Calls f(start, end) for each match in s (valid UTF-8), in order, onig find_iter semantics.
  template <class F>
  void find_all(std::string_view s, F&& f) const {
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), &pcre2_match_data_free);
    DS41_CHECK(md, "regex: out of memory");
    size_t pos = 0;
    std::optional<size_t> last_match_end;
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    while (pos <= s.size()) {
      int rc = jit_ ? pcre2_jit_match(code_.get(), subject, s.size(), pos, 0, md.get(), nullptr) : PCRE2_ERROR_JIT_BADOPTION;
      if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // JIT unusable here (e.g. its stack): the interpreter
        rc = pcre2_match(code_.get(), subject, s.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md.get(), nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        fail("regex: matching failed: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
      const size_t start = ov[0], end = ov[1];
      if (start == end && last_match_end && *last_match_end == end) {
        // an empty match where the previous one ended: step over one character
        if (pos >= s.size()) return;
        size_t next = pos;
        utf8::next(s, next);
        pos = next;
        continue;
      }
      pos = end;
      last_match_end = end;
      f(start, end);
    }
  }

 private:
  std::shared_ptr<pcre2_code> code_;
  bool jit_ = false;
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
