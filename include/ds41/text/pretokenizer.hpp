// ds41/text/pretokenizer.hpp — tokenizer.json's pre_tokenizer: null, ByteLevel, Split, or a
// Sequence of them, with HF tokenizers' semantics (pre_tokenizers/split.rs, byte_level.rs,
// tokenizer/normalizer.rs NormalizedString::split, tokenizer/pattern.rs):
// - a pattern splits a piece into (range, is_match) runs covering it; `invert` flips is_match;
// - behavior Removed drops matches, Isolated keeps every run as its own piece, MergedWithPrevious /
//   MergedWithNext glue a match onto the run before / after it, Contiguous merges neighbouring runs
//   of the same kind;
// - empty pieces are dropped;
// - ByteLevel prepends a space to each piece that does not start with one (add_prefix_space),
//   splits it with GPT-2's regex (use_regex), then writes its bytes in the byte-level alphabet.
#pragma once
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>
#include "byte_level.hpp"
#include "regex.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  PreTokenizer() = default;  // none: the whole piece goes to the model

  /// From tokenizer.json's "pre_tokenizer" value; `what` names the file in errors.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& what) {
    PreTokenizer p;
    if (!j.is_null()) p.add(j, what + ": pre_tokenizer");
    return p;
  }

  /// Splits each piece in turn by every step.
  std::vector<std::string> apply(std::string piece) const {
    std::vector<std::string> pieces;
    if (piece.empty()) return pieces;
    pieces.push_back(std::move(piece));
    for (const Step& s : steps_) {
      std::vector<std::string> next;
      for (const std::string& p : pieces) {
        if (s.byte_level) split_byte_level(s, p, next);
        else split(s.regex, s.behavior, s.invert, p, next);
      }
      pieces = std::move(next);
    }
    return pieces;
  }

 private:
  struct Step {
    bool byte_level = false;
    Regex regex;  // Split's pattern, or GPT-2's for ByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;
  };

  static bool bool_field(const nlohmann::json& j, const char* key, bool dflt, const std::string& what) {
    if (!j.contains(key) || j[key].is_null()) return dflt;
    DS41_CHECK(j[key].is_boolean(), what, ": \"", key, "\" must be true or false");
    return j[key].get<bool>();
  }

  void add(const nlohmann::json& j, const std::string& what) {
    DS41_CHECK(j.is_object() && j.contains("type") && j["type"].is_string(), what, ": expected an object with a \"type\"");
    const std::string type = j["type"].get<std::string>();
    if (type == "Sequence") {
      DS41_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), what, ": Sequence needs a \"pretokenizers\" array");
      for (size_t i = 0; i < j["pretokenizers"].size(); ++i) add(j["pretokenizers"][i], what + "[" + std::to_string(i) + "]");
    } else if (type == "Split") {
      Step s;
      DS41_CHECK(j.contains("pattern") && j["pattern"].is_object() && j["pattern"].size() == 1, what,
                 ": Split needs a \"pattern\" {\"Regex\": ...} or {\"String\": ...}");
      const auto& pat = j["pattern"];
      const bool literal = pat.contains("String");
      DS41_CHECK((literal || pat.contains("Regex")) && pat.begin().value().is_string(), what,
                 ": Split pattern must be {\"Regex\": string} or {\"String\": string}");
      s.regex = Regex(pat.begin().value().get<std::string>(), literal, what);
      DS41_CHECK(j.contains("behavior") && j["behavior"].is_string(), what, ": Split needs a \"behavior\"");
      const std::string b = j["behavior"].get<std::string>();
      if (b == "Removed") s.behavior = SplitBehavior::kRemoved;
      else if (b == "Isolated") s.behavior = SplitBehavior::kIsolated;
      else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::kMergedWithPrevious;
      else if (b == "MergedWithNext") s.behavior = SplitBehavior::kMergedWithNext;
      else if (b == "Contiguous") s.behavior = SplitBehavior::kContiguous;
      else fail(what, ": unknown Split behavior \"", b, "\"");
      s.invert = bool_field(j, "invert", false, what);
      steps_.push_back(std::move(s));
    } else if (type == "ByteLevel") {
      Step s;
      s.byte_level = true;
      s.add_prefix_space = bool_field(j, "add_prefix_space", true, what);
      if (bool_field(j, "use_regex", true, what)) s.regex = Regex(kGpt2Pattern, false, what + " (GPT-2 regex)");
      steps_.push_back(std::move(s));
    } else {
      fail(what, ": pre-tokenizer type \"", type, "\" is not supported (Sequence, Split, ByteLevel are)");
    }
  }

  static void split(const Regex& re, SplitBehavior behavior, bool invert, const std::string& s, std::vector<std::string>& out) {
    // (start, end, is_match) runs covering s, as pattern.rs's find_matches
    struct Run {
      size_t a, b;
      bool m;
    };
    std::vector<Run> runs;
    size_t prev = 0;
    re.find_all(s, [&](size_t a, size_t b) {
      if (prev != a) runs.push_back({prev, a, false});
      runs.push_back({a, b, true});
      prev = b;
    });
    if (prev != s.size()) runs.push_back({prev, s.size(), false});
    if (invert)
      for (Run& r : runs) r.m = !r.m;
    std::vector<std::pair<size_t, size_t>> keep;
    bool previous_match = false;
    switch (behavior) {
      case SplitBehavior::kIsolated:
        for (const Run& r : runs) keep.emplace_back(r.a, r.b);
        break;
      case SplitBehavior::kRemoved:
        for (const Run& r : runs)
          if (!r.m) keep.emplace_back(r.a, r.b);
        break;
      case SplitBehavior::kContiguous:
        for (const Run& r : runs) {
          if (r.m == previous_match && !keep.empty()) keep.back().second = r.b;
          else keep.emplace_back(r.a, r.b);
          previous_match = r.m;
        }
        break;
      case SplitBehavior::kMergedWithPrevious:
        for (const Run& r : runs) {
          if (r.m && !previous_match && !keep.empty()) keep.back().second = r.b;
          else keep.emplace_back(r.a, r.b);
          previous_match = r.m;
        }
        break;
      case SplitBehavior::kMergedWithNext:
        for (size_t k = runs.size(); k-- > 0;) {
          const Run& r = runs[k];
          if (r.m && !previous_match && !keep.empty()) keep.back().first = r.a;
          else keep.emplace_back(r.a, r.b);
          previous_match = r.m;
        }
        std::reverse(keep.begin(), keep.end());
        break;
    }
    for (const auto& [a, b] : keep)
      if (b > a) out.push_back(s.substr(a, b - a));
  }

  static void split_byte_level(const Step& s, const std::string& piece, std::vector<std::string>& out) {
    std::string text = piece;
    if (s.add_prefix_space && (text.empty() || text[0] != ' ')) text.insert(text.begin(), ' ');
    std::vector<std::string> parts;
    if (s.regex.empty()) parts.push_back(text);
    else split(s.regex, SplitBehavior::kIsolated, false, text, parts);
    for (const std::string& p : parts)
      if (!p.empty()) out.push_back(byte_level::encode(p));
  }

  std::vector<Step> steps_;
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
