// ds41/text/added_tokens.hpp — tokenizer.json's added_tokens and how encode() splits them out of
// the text before anything else (HF tokenizers tokenizer/added_vocabulary.rs):
// - two sets: tokens with normalized=false are found in the raw text first; tokens with
//   normalized=true are then found in each remaining piece after the normalizer has run;
// - each set is searched leftmost-longest, non-overlapping (daachorse's LeftmostLongest): the
//   match starting first wins, the longest of those; the search resumes after it;
// - single_word: the match is skipped (and the search still resumes after it) when a word
//   character touches it on either side; lstrip / rstrip: the token also takes the whitespace
//   before / after it.
// Ids follow HF's add_tokens: a token already in the BPE vocab keeps that id, a new one gets the
// next id after the largest so far (the "id" field of the file is not what HF uses).
#pragma once
#include <utf8proc.h>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>
#include "utf8.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

/// One piece of the text: either an added token's id or text still to be tokenized.
struct Piece {
  std::string text;
  int32_t id = -1;  // >= 0: an added token
};

namespace added_detail {
/// Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, join
/// controls. utf8proc has no Alphabetic property: letters and Nl, plus the Other_Alphabetic symbols
/// that are not marks (circled and squared Latin letters).
inline bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D || (c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) ||
      (c >= 0x1F150 && c <= 0x1F169) || (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME: case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
  }
}
/// Unicode White_Space (Rust's char::is_whitespace and regex \s).
inline bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
}  // namespace added_detail

/// A byte trie over a set of added tokens with leftmost-longest search.
class AddedTokenSet {
 public:
  void add(const std::string& content, size_t token_index) {
    size_t node = 0;
    for (char ch : content) {
      const auto b = static_cast<uint8_t>(ch);
      int next = child(node, b);
      if (next < 0) {
        next = static_cast<int>(nodes_.size());
        nodes_[node].edges.emplace_back(b, next);
        nodes_.emplace_back();
      }
      node = static_cast<size_t>(next);
    }
    nodes_[node].token = static_cast<long>(token_index);
  }
  bool empty() const { return nodes_.size() == 1; }

  /// The longest token starting at s[i]: (token index, end) or token index -1.
  std::pair<long, size_t> longest_at(std::string_view s, size_t i) const {
    long best = -1;
    size_t best_end = i, node = 0;
    for (size_t k = i; k < s.size(); ++k) {
      const int next = child(node, static_cast<uint8_t>(s[k]));
      if (next < 0) break;
      node = static_cast<size_t>(next);
      if (nodes_[node].token >= 0) best = nodes_[node].token, best_end = k + 1;
    }
    return {best, best_end};
  }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int>> edges;
    long token = -1;
  };
  int child(size_t node, uint8_t b) const {
    for (const auto& [e, n] : nodes_[node].edges)
      if (e == b) return n;
    return -1;
  }
  std::vector<Node> nodes_ = std::vector<Node>(1);
};

class AddedVocabulary {
 public:
  /// Tokens must already carry their ids; `normalized` ones are searched after normalization.
  explicit AddedVocabulary(std::vector<AddedToken> tokens = {}) : tokens_(std::move(tokens)) {
    for (size_t k = 0; k < tokens_.size(); ++k) (tokens_[k].normalized ? normalized_ : raw_).add(tokens_[k].content, k);
  }
  const std::vector<AddedToken>& tokens() const { return tokens_; }

  /// Splits `text` by the non-normalized tokens (pass normalized=false) or the normalized ones.
  void split(const std::string& text, bool normalized, std::vector<Piece>& out) const {
    const AddedTokenSet& set = normalized ? normalized_ : raw_;
    if (set.empty()) {
      if (!text.empty()) out.push_back({text, -1});
      return;
    }
    std::string_view s = text;
    size_t start_offset = 0, i = 0;
    while (i < s.size()) {
      const auto [k, end] = set.longest_at(s, i);
      if (k < 0) {
        ++i;
        continue;
      }
      const AddedToken& t = tokens_[static_cast<size_t>(k)];
      size_t start = i, stop = end;
      i = end;  // the search resumes after this match, even when single_word skips it
      if (t.single_word) {
        const bool start_space = start == 0 || !added_detail::is_word_char(utf8::last(s, start));
        size_t j = stop;
        const bool stop_space = stop == s.size() || !added_detail::is_word_char(utf8::next(s, j));
        if (!start_space || !stop_space) continue;
      }
      if (t.lstrip) {
        size_t a = start;
        while (a > 0) {
          size_t b = a - 1;
          while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
          size_t tmp = b;
          if (!added_detail::is_space(utf8::next(s, tmp))) break;
          a = b;
        }
        start = std::max(a, start_offset);
      }
      if (t.rstrip) {
        while (stop < s.size()) {
          size_t tmp = stop;
          if (!added_detail::is_space(utf8::next(s, tmp))) break;
          stop = tmp;
        }
      }
      if (start_offset < start) out.push_back({std::string(s.substr(start_offset, start - start_offset)), -1});
      out.push_back({std::string(s.substr(start, stop - start)), t.id});
      start_offset = stop;
    }
    if (start_offset < s.size()) out.push_back({std::string(s.substr(start_offset)), -1});
  }

 private:
  std::vector<AddedToken> tokens_;
  AddedTokenSet raw_, normalized_;
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
