// ds41/text/bpe.hpp — the BPE model of a tokenizer.json (HF tokenizers models/bpe/model.rs and
// word.rs): a word is split into characters, each looked up in the vocab (a character with no
// entry is dropped when there is no unk_token, as HF does), then the adjacent pair with the lowest
// merge rank is merged, ties going to the leftmost, until no pair has a merge. Results are cached
// per word (words under 256 bytes, a bounded number), guarded by a mutex so encode() stays const
// and thread-safe.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <queue>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>
#include "../core/error.hpp"
#include "utf8.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41::text {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class Bpe {
 public:
  struct Options {
    std::optional<std::string> unk_token;
    bool fuse_unk = false;
    bool ignore_merges = false;
  };

  Bpe() = default;
  /// `merges` in rank order; `what` names the source in errors.
  Bpe(TokenMap vocab, const std::vector<std::pair<std::string, std::string>>& merges, Options opt, const std::string& what)
      : vocab_(std::move(vocab)), opt_(std::move(opt)) {
    int32_t max_id = -1;
    for (const auto& [tok, id] : vocab_) {
      DS41_CHECK(id >= 0, what, ": vocab token \"", tok, "\" has negative id ", id);
      max_id = std::max(max_id, id);
    }
    id_to_token_.assign(static_cast<size_t>(max_id + 1), std::string());
    has_id_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [tok, id] : vocab_) {
      DS41_CHECK(!has_id_[id], what, ": vocab ids are not unique: ", id, " is both \"", id_to_token_[id], "\" and \"", tok, "\"");
      id_to_token_[id] = tok;
      has_id_[id] = true;
    }
    if (opt_.unk_token) {
      auto it = vocab_.find(*opt_.unk_token);
      DS41_CHECK(it != vocab_.end(), what, ": unk_token \"", *opt_.unk_token, "\" is not in the vocab");
      unk_id_ = it->second;
    }
    merges_.reserve(merges.size() * 2);
    merge_list_ = merges;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      auto ia = vocab_.find(a), ib = vocab_.find(b), ic = vocab_.find(a + b);
      DS41_CHECK(ia != vocab_.end(), what, ": merge ", rank, " (\"", a, "\" \"", b, "\") names \"", a, "\", not in the vocab");
      DS41_CHECK(ib != vocab_.end(), what, ": merge ", rank, " (\"", a, "\" \"", b, "\") names \"", b, "\", not in the vocab");
      DS41_CHECK(ic != vocab_.end(), what, ": merge ", rank, " (\"", a, "\" \"", b, "\") makes \"", a + b, "\", not in the vocab");
      merges_[key(ia->second, ib->second)] = {static_cast<uint32_t>(rank), ic->second};  // a repeated pair: the later rank, as HF
    }
  }

  const TokenMap& vocab() const { return vocab_; }
  long max_id() const { return static_cast<long>(id_to_token_.size()) - 1; }
  const std::string* token(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < has_id_.size() && has_id_[id] ? &id_to_token_[id] : nullptr;
  }
  std::optional<int32_t> id(std::string_view tok) const {
    auto it = vocab_.find(tok);
    return it == vocab_.end() ? std::nullopt : std::optional<int32_t>(it->second);
  }
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merge_list_; }
  const Options& options() const { return opt_; }

  /// Appends the ids of one pre-tokenized piece (valid UTF-8).
  void tokenize(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (opt_.ignore_merges) {
      if (auto it = vocab_.find(word); it != vocab_.end()) {
        out.push_back(it->second);
        return;
      }
    }
    const bool cacheable = word.size() < kMaxCachedWord;
    if (cacheable) {
      std::shared_lock lock(cache_->mutex);
      if (auto it = cache_->words.find(word); it != cache_->words.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    std::vector<int32_t> ids = merge_word(word);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
      std::unique_lock lock(cache_->mutex);
      if (cache_->words.size() < kMaxCacheEntries) cache_->words.emplace(std::string(word), std::move(ids));
    }
  }

 private:
  static constexpr size_t kMaxCachedWord = 256;
  static constexpr size_t kMaxCacheEntries = 1 << 16;

  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  struct Symbol {
    int32_t c;
    long prev, next;
    size_t len;
  };
  struct Merge {
    size_t pos;
    uint32_t rank;
    int32_t new_id;
    // the queue pops the lowest rank first, then the lowest position (word.rs's Ord)
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };

  std::vector<int32_t> merge_word(std::string_view w) const {
    std::vector<Symbol> sy;
    sy.reserve(w.size());
    auto add = [&](int32_t c, size_t len) {
      const long n = static_cast<long>(sy.size());
      if (!sy.empty()) sy.back().next = n;
      sy.push_back({c, n - 1, -1, len});
    };
    std::optional<std::pair<int32_t, size_t>> unk;  // pending unk symbol (id, bytes)
    size_t i = 0;
    while (i < w.size()) {
      const size_t start = i;
      utf8::next(w, i);
      const std::string_view ch = w.substr(start, i - start);
      if (auto it = vocab_.find(ch); it != vocab_.end()) {
        if (unk) add(unk->first, unk->second), unk.reset();
        add(it->second, ch.size());
      } else if (unk_id_) {
        if (unk && opt_.fuse_unk) {
          unk->second += ch.size();
        } else {
          if (unk) add(unk->first, unk->second);
          unk = std::make_pair(*unk_id_, ch.size());
        }
      }
    }
    if (unk) add(unk->first, unk->second);

    std::priority_queue<Merge> queue;
    auto lookup = [&](int32_t a, int32_t b) -> const std::pair<uint32_t, int32_t>* {
      auto it = merges_.find(key(a, b));
      return it == merges_.end() ? nullptr : &it->second;
    };
    for (size_t k = 0; k + 1 < sy.size(); ++k)
      if (auto m = lookup(sy[k].c, sy[k + 1].c)) queue.push({k, m->first, m->second});
    while (!queue.empty()) {
      const Merge top = queue.top();
      queue.pop();
      Symbol& cur = sy[top.pos];
      if (cur.len == 0 || cur.next == -1) continue;
      const size_t next_pos = static_cast<size_t>(cur.next);
      const Symbol right = sy[next_pos];
      auto m = lookup(cur.c, right.c);
      if (!m || m->second != top.new_id) continue;  // stale: a neighbour has changed since it was queued
      cur.c = top.new_id;
      cur.len += right.len;
      cur.next = right.next;
      sy[next_pos].len = 0;
      if (right.next > -1 && static_cast<size_t>(right.next) < sy.size()) sy[right.next].prev = static_cast<long>(top.pos);
      if (cur.prev >= 0)
        if (auto pm = lookup(sy[cur.prev].c, cur.c)) queue.push({static_cast<size_t>(cur.prev), pm->first, pm->second});
      if (cur.next >= 0 && static_cast<size_t>(cur.next) < sy.size())
        if (auto nm = lookup(cur.c, sy[cur.next].c)) queue.push({top.pos, nm->first, nm->second});
    }
    std::vector<int32_t> ids;
    for (const Symbol& s : sy)
      if (s.len != 0) ids.push_back(s.c);
    return ids;
  }

  TokenMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_id_;
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges_;  // (left, right) → (rank, merged id)
  std::vector<std::pair<std::string, std::string>> merge_list_;
  Options opt_;
  std::optional<int32_t> unk_id_;
  // shared by copies of this model (their words merge the same way)
  struct Cache {
    std::shared_mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  std::shared_ptr<Cache> cache_ = std::make_shared<Cache>();
};

}  // namespace ds41::text
#include "../core/fp_exact_end.hpp"
