// ds41/model/speculative.hpp — speculative decoding with DSpark's draft head (or any drafter):
// draft, verify [anchor, d1..dk] in one step with every row's logits, accept, rewind exactly.
//
//   draft     Model::draft at the sequence's end (the anchor is the token the target chose for
//             the next position); cut to draft_len, and at the first position whose confidence
//             sigmoid(c) is below a threshold where one is set (fastllm's rule)
//   verify    checkpoint, extend by [anchor, d1..dk] (one batched step for a batch of sequences,
//             every row's logits), accept, truncate to the kept length, commit. The kept rows are
//             the ones plain decoding gives (ds41's extend is exact per position), and the draft
//             stages' rings are written by the target step itself, so a rejected draft leaves no
//             trace: the state is the bytes plain decoding reaches.
//   accept    greedy (temperature 0): while d_i equals the target's argmax, then the target's
//             token (the bonus). Sampled: lossless rejection sampling — accept d_i with
//             probability min(1, p(d_i)/q(d_i)), on the first rejection draw from
//             normalise(max(p - q, 0)); all accepted: draw the bonus from the last row's p. p and
//             q are the target's and the draft's distributions under the same sampler options
//             (temperature, top-k, top-p); the draft head samples its tokens from q then.
// DSPARK.md (shared/reference) describes what the serving engines do; the reference has no loop.
#pragma once
#include <chrono>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>
#include "model.hpp"
#include "../text/sampler.hpp"

#include "../core/fp_exact_begin.hpp"
namespace ds41 {

struct SpeculativeOptions {
  int draft_len = 0;  ///< draft tokens verified per round, at most the block size; 0: the block size
  /// Cut the draft before the first position whose sigmoid(confidence) is below this (0.5 is
  /// fastllm's default); negative: no cut.
  double confidence = -1;
  text::SamplerOptions sampling;  ///< temperature 0: greedy acceptance
};

/// What a round appended to a sequence.
struct SpecRound {
  std::vector<int32_t> tokens;     ///< appended: the anchor, then the accepted draft tokens
  std::vector<StepResult> logits;  ///< the target's logits at each appended position (plain decoding's)
  int drafted = 0;                 ///< draft tokens verified
  int accepted = 0;                ///< of which accepted
  int32_t next = -1;               ///< the token the target chose after them: the next anchor
};

/// What a Speculator did so far, and where its time went.
struct SpecStats {
  long rounds = 0, drafted = 0, accepted = 0;  // per sequence and round: accepted + 1 tokens appended
  double draft_s = 0;   // the draft head
  double verify_s = 0;  // the target's verify steps
  double rewind_s = 0;  // checkpoint, truncate to the accepted length, commit
  double tokens_per_round() const { return rounds ? static_cast<double>(accepted + rounds) / rounds : 0; }
};

/// Acceptance of drafted tokens against the target: one object per decoding stream (it holds the
/// random stream of sampled acceptance).
class DraftAcceptor {
 public:
  explicit DraftAcceptor(const text::SamplerOptions& o) : sampler_(o), rng_(o.seed ^ 0x5bd1e995d5a1ULL) {}
  bool greedy() const { return sampler_.options().temperature == 0.0; }
  text::Sampler& sampler() { return sampler_; }

  /// One drafted token d against the target's logits `p_logits` and the draft's `q_logits` at
  /// the same position: accepted, or the token drawn in its place.
  std::pair<bool, int32_t> judge(int32_t d, std::span<const float> p_logits, std::span<const float> q_logits) {
    if (greedy()) {
      const int32_t t = text::Sampler::argmax(p_logits);
      return {t == d, t};
    }
    return judge(d, sampler_.distribution(p_logits), sampler_.distribution(q_logits));
  }
  /// The same on distributions given as (token, probability) lists in id order.
  using Dist = std::vector<std::pair<int32_t, double>>;
  std::pair<bool, int32_t> judge(int32_t d, const Dist& p, const Dist& q) {
    const double pd = prob(p, d), qd = prob(q, d);
    if (qd > 0 && rng_.uniform() * qd < pd) return {true, d};  // u < p(d)/q(d), without the division
    // the residual max(p - q, 0), normalised; where it vanishes (p ≤ q everywhere, so p = q up to
    // rounding) p itself
    Dist r;
    double z = 0;
    for (const auto& [t, pt] : p) {
      const double w = pt - prob(q, t);
      if (w > 0) r.emplace_back(t, w), z += w;
    }
    return {false, draw(z > 0 ? r : p)};
  }
  /// The target's own choice from its logits (the bonus token; the token after a prompt).
  int32_t choose(std::span<const float> p_logits) {
    return greedy() ? text::Sampler::argmax(p_logits) : draw(sampler_.distribution(p_logits));
  }
  /// A token from a distribution (weights need not sum to 1).
  int32_t draw(const Dist& d) {
    DS41_CHECK(!d.empty(), "speculative: a draw from an empty distribution");
    double total = 0;
    for (const auto& e : d) total += e.second;
    return d[text::weighted_index(d.size(), [&](size_t i) { return d[i].second; }, rng_.uniform() * total)].first;
  }

 private:
  static double prob(const Dist& d, int32_t t) {
    auto it = std::lower_bound(d.begin(), d.end(), t, [](const auto& e, int32_t v) { return e.first < v; });
    return it != d.end() && it->first == t ? it->second : 0.0;
  }
  text::Sampler sampler_;
  text::SplitMix64 rng_;
};

/// Speculative decoding on a model with a draft head, for one sequence or a batch of them.
template <class ModelT>
class Speculator {
 public:
  using Sequence = typename ModelT::Sequence;
  using Segment = typename ModelT::Segment;

  Speculator(ModelT& model, SpeculativeOptions opt) : model_(model), opt_(opt), acceptor_(opt.sampling) {
    const int B = model.draft_head().block_size();
    DS41_CHECK(opt.draft_len >= 0 && opt.draft_len <= B, "speculative: draft_len ", opt.draft_len,
               " outside [0, the block size ", B, "] (0: the block size)");
    draft_len_ = opt.draft_len ? opt.draft_len : B;
  }
  DraftAcceptor& acceptor() { return acceptor_; }
  const SpecStats& stats() const { return stats_; }

  /// The draft at the end of `s` for `anchor`, cut by the options and by the room left in the
  /// sequence (the verify step holds the anchor and the drafts). Its tokens past the anchor are
  /// the ones to verify.
  DraftResult draft(const Sequence& s, int32_t anchor) {
    DraftPick pick;
    if (!acceptor_.greedy()) pick = [this](std::span<const float> row) { return acceptor_.sampler().sample(row); };
    const auto t0 = Clock::now();
    DraftResult d = model_.draft(s, anchor, nullptr, pick);
    stats_.draft_s += seconds(t0);
    long k = draft_len_;
    if (opt_.confidence >= 0)
      for (long i = 0; i < k; ++i)
        if (!(sigmoid(d.confidence[i]) >= opt_.confidence)) {
          k = i;
          break;
        }
    const long room = model_.config().max_seq_len - s.length() - 1;  // after the anchor
    k = std::max(0L, std::min(k, room));
    d.tokens.resize(k + 1);
    return d;
  }

  /// One round on each (sequence, anchor): a draft each, one batched verify step, each accepted
  /// as far as it goes (ragged). Each sequence then holds its anchor and accepted drafts; the
  /// round's `next` is the next anchor. Sequences with an open checkpoint keep it (the round
  /// truncates inside it).
  std::vector<SpecRound> round(const std::vector<std::pair<Sequence*, int32_t>>& batch) {
    std::vector<DraftResult> drafts;
    for (const auto& [s, a] : batch) drafts.push_back(draft(*s, a));
    return verify(batch, drafts);
  }
  SpecRound round(Sequence& s, int32_t anchor) { return round({{&s, anchor}}).at(0); }

  /// Verify given drafts (any drafter's: tokens [anchor, d1..dk]; logits [k, vocab] needed for
  /// sampled acceptance only) in one batched step, accept, rewind.
  std::vector<SpecRound> verify(const std::vector<std::pair<Sequence*, int32_t>>& batch,
                                const std::vector<DraftResult>& drafts) {
    DS41_CHECK(drafts.size() == batch.size(), "speculative: ", drafts.size(), " drafts for ", batch.size(), " sequences");
    std::vector<Segment> seg(batch.size());
    std::vector<bool> own(batch.size());
    std::vector<long> len(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      Sequence& s = *batch[i].first;
      const DraftResult& d = drafts[i];
      DS41_CHECK(!d.tokens.empty() && d.tokens[0] == batch[i].second, "speculative: draft ", i,
                 " does not start with its sequence's anchor");
      DS41_CHECK(acceptor_.greedy() || d.logits.size() >= (d.tokens.size() - 1) * model_.config().vocab_size,
                 "speculative: sampled acceptance needs the draft's logits");
      seg[i].seq = &s;
      seg[i].tokens = d.tokens;
      seg[i].all_logits = true;
      len[i] = s.length();
      own[i] = !s.has_checkpoint();
    }
    auto t0 = Clock::now();
    for (size_t i = 0; i < batch.size(); ++i)
      if (own[i]) batch[i].first->checkpoint();
    stats_.rewind_s += seconds(t0);
    std::vector<std::vector<StepResult>> rows;
    try {
      t0 = Clock::now();
      rows = model_.step(seg);
      stats_.verify_s += seconds(t0);
    } catch (...) {
      for (size_t i = 0; i < batch.size(); ++i)
        if (own[i] && batch[i].first->has_checkpoint()) batch[i].first->rollback();
      throw;
    }
    const long V = model_.config().vocab_size;
    std::vector<SpecRound> out(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      const DraftResult& d = drafts[i];
      SpecRound& r = out[i];
      const int k = static_cast<int>(d.tokens.size()) - 1;
      r.drafted = k;
      int j = 0;
      int32_t next = -1;
      for (; j < k; ++j) {
        const std::span<const float> p(rows[i][j].logits);
        std::span<const float> q;
        if (!acceptor_.greedy()) q = std::span<const float>(d.logits.data() + static_cast<size_t>(j) * V, V);
        const auto [ok, t] = acceptor_.judge(d.tokens[j + 1], p, q);
        if (!ok) {
          next = t;
          break;
        }
      }
      if (j == k) next = acceptor_.choose(rows[i][k].logits);
      r.accepted = j;
      r.next = next;
      r.tokens.assign(d.tokens.begin(), d.tokens.begin() + j + 1);
      for (int t = 0; t <= j; ++t) r.logits.push_back(std::move(rows[i][t]));
      Sequence& s = *batch[i].first;
      t0 = Clock::now();
      s.truncate(len[i] + j + 1);
      if (own[i]) s.commit();
      stats_.rewind_s += seconds(t0);
      ++stats_.rounds;
      stats_.drafted += k;
      stats_.accepted += j;
    }
    return out;
  }

 private:
  /// 1/(1+e^-c) with the sampler's platform-independent exp (the cut is a discrete decision).
  static double sigmoid(float c) {
    const double x = c;
    if (x >= 0) return 1.0 / (1.0 + text::deterministic_exp(-x));
    const double e = text::deterministic_exp(x);
    return e / (1.0 + e);
  }

  using Clock = std::chrono::steady_clock;
  static double seconds(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  ModelT& model_;
  SpeculativeOptions opt_;
  SpecStats stats_;
  DraftAcceptor acceptor_;
  int draft_len_ = 0;
};

}  // namespace ds41
#include "../core/fp_exact_end.hpp"
