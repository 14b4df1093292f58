// ds41/text/py_json.hpp — Python's json.dumps(value, ensure_ascii=False), str(value) and
// truthiness for JSON values, byte for byte.
//
// DeepSeek-V4.1's prompt encoder (encoding/encoding.py, docs/TEXT.md) writes tool schemas,
// response formats and non-string tool arguments with json.dumps(ensure_ascii=False), formats
// other fields with str.format (str() of the value) and tests fields with Python truthiness.
// nlohmann's dump() differs from json.dumps in separators (',' vs ', ', ':' vs ': '), float
// formatting (17 significant digits vs repr's shortest round-trip, "1e-05" style exponents),
// non-finite numbers (null vs NaN/Infinity) and escapes, so the encoder uses these instead.
//
// Key order: Python dicts keep insertion order. Use nlohmann::ordered_json to keep it; a
// nlohmann::json (std::map) has already sorted its keys, and its dump then matches Python only for
// dicts that were sorted to begin with.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <nlohmann/json.hpp>
#include "../core/error.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

/// Python's repr(float) (= str(float)) for a finite double: the shortest digits that round-trip,
/// fixed notation when the decimal exponent is in [-4, 16), else d.ddde±XX ("1e-05", "1e+16",
/// "0.0001", "100.0", "-0.0"). Non-finite: "inf", "-inf", "nan", as str() prints them.
inline std::string py_float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  // to_chars without a precision gives the shortest round-trip digits (the same digit string as
  // Python's dtoa mode 0); only the layout differs, so re-lay it out the way float_repr does
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view s(buf, static_cast<size_t>(res.ptr - buf));  // "-d.ddde-XX"
  std::string out;
  if (s.front() == '-') {
    out += '-';
    s.remove_prefix(1);
  }
  size_t e = s.find('e');
  std::string digits;
  for (char c : s.substr(0, e))
    if (c != '.') digits += c;
  int exp10 = 0;
  std::from_chars(s.data() + e + 1 + (s[e + 1] == '+'), s.data() + s.size(), exp10);
  const int decpt = exp10 + 1;  // value = 0.DIGITS * 10^decpt
  const int n = static_cast<int>(digits.size());
  if (decpt <= -4 || decpt > 16) {  // Python's float_repr_style 'short' switch points
    out += digits[0];
    if (n > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    return out + eb;
  }
  if (decpt <= 0) return out + "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  if (decpt >= n) return out + digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
  return out + digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
}

/// A JSON string literal as json.dumps(ensure_ascii=False) writes it: '"' and '\\' escaped, \n \r
/// \t \b \f by name, other code points below U+0020 as \u00xx (lower-case hex), everything else
/// (DEL, non-ASCII, U+2028) as is. Bytes are copied unchanged: a std::string that is not UTF-8
/// has no Python counterpart.
inline void py_json_quote(std::string& out, std::string_view s) {
  out += '"';
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

/// "an object", "a string", ... for messages.
template <class J>
std::string a_type_name(const J& v) {
  const std::string t = v.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

namespace py_json_detail {
template <class J>
void dumps(std::string& out, const J& v) {
  using T = typename J::value_t;
  switch (v.type()) {
    case T::null: out += "null"; return;
    case T::boolean: out += v.template get<bool>() ? "true" : "false"; return;
    case T::number_integer: out += std::to_string(v.template get<int64_t>()); return;
    case T::number_unsigned: out += std::to_string(v.template get<uint64_t>()); return;
    case T::number_float: {
      const double d = v.template get<double>();
      // json.dumps' allow_nan=True spellings (float.__repr__ otherwise)
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d < 0 ? "-Infinity" : "Infinity";
      else out += py_float_repr(d);
      return;
    }
    case T::string: py_json_quote(out, v.template get_ref<const typename J::string_t&>()); return;
    case T::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        dumps(out, e);
      }
      out += ']';
      return;
    }
    case T::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        py_json_quote(out, it.key());
        out += ": ";
        dumps(out, it.value());
      }
      out += '}';
      return;
    }
    default: fail("py_dumps: ", a_type_name(v), " value has no Python json counterpart");
  }
}
}  // namespace py_json_detail

/// json.dumps(v, ensure_ascii=False) with its default separators (", ", ": ").
template <class J>
std::string py_dumps(const J& v) {
  std::string out;
  py_json_detail::dumps(out, v);
  return out;
}

/// bool(v) in Python for the value json.loads would give: None, False, 0, 0.0, "", [], {} are
/// false (NaN is true).
template <class J>
bool py_truthy(const J& v) {
  switch (v.type()) {
    case J::value_t::null: return false;
    case J::value_t::boolean: return v.template get<bool>();
    case J::value_t::number_integer: return v.template get<int64_t>() != 0;
    case J::value_t::number_unsigned: return v.template get<uint64_t>() != 0;
    case J::value_t::number_float: return v.template get<double>() != 0.0;  // NaN != 0
    case J::value_t::string: return !v.template get_ref<const typename J::string_t&>().empty();
    case J::value_t::array:
    case J::value_t::object: return !v.empty();
    default: return true;
  }
}

/// str(v) in Python for a scalar JSON value, as str.format and f-strings insert it: the string
/// itself, "None", "True"/"False", the integer, repr(float). A list or dict would print as its
/// Python repr (single-quoted keys, Python string escapes), which is not reproduced: Error, with
/// `what` naming the field.
template <class J>
std::string py_str(const J& v, std::string_view what) {
  switch (v.type()) {
    case J::value_t::null: return "None";
    case J::value_t::boolean: return v.template get<bool>() ? "True" : "False";
    case J::value_t::number_integer: return std::to_string(v.template get<int64_t>());
    case J::value_t::number_unsigned: return std::to_string(v.template get<uint64_t>());
    case J::value_t::number_float: return py_float_repr(v.template get<double>());
    case J::value_t::string: return v.template get<std::string>();
    default:
      fail(what, ": ", a_type_name(v), " where the encoder formats a string (Python would insert its repr, ",
           py_dumps(v).substr(0, 80), "...; pass a string)");
  }
}

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
