// DSpark's draft head and speculative decoding (model/dspark.hpp, model/speculative.hpp), on every
// DSpark golden's model (golden/ds41_tiny_dspark_golden.json, golden/extra/dspark/):
//  * greedy speculation gives exactly plain greedy decoding: the same tokens, and the logits of
//    every position bit-identical, one sequence and a batch of sequences with ragged accepts;
//  * a draft is a pure function of the sequence (it writes nothing), and a verify round leaves the
//    sequence's bytes (snapshot) equal to plain decoding's at the same length, whatever was rejected;
//  * forced acceptance (drafts that are right k of B times) keeps the same bits;
//  * rejection sampling is lossless: the emitted tokens follow the target's distribution, and the
//    acceptance rate is the overlap Σ min(p, q).
#include <doctest/doctest.h>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/model/speculative.hpp"
#include "ds41/testing/golden.hpp"

namespace test_dspark {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using ModelH = Model<HostBackend>;
using Seq = ModelH::Sequence;

namespace {

std::vector<std::string> dspark_goldens() {
  std::vector<std::string> out{DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json"};
  std::vector<std::string> extra;
  for (const auto& e : std::filesystem::directory_iterator(DS41_GOLDEN_DIR "/extra/dspark"))
    if (e.path().extension() == ".json") extra.push_back(e.path().string());
  std::sort(extra.begin(), extra.end());
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

struct Fixture {
  golden::Golden g;
  WeightSet w;
  std::unique_ptr<ModelH> model;
  explicit Fixture(const std::string& path) : g(golden::load(path)), w(golden::regenerate_weights(g)) {
    model = std::make_unique<ModelH>(g.config, w);
  }
};

/// Plain greedy decoding: the prompt, then n tokens each the argmax of the previous position.
/// Returns the tokens appended after the prompt and the logits at every position from the
/// prompt's last on (logits[i]: after token i of the continuation, logits[0]: the prompt's).
struct Plain {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Plain plain_greedy(ModelH& m, const std::vector<int32_t>& prompt, long n) {
  Plain p;
  Seq s = m.make_sequence();
  StepResult r = m.extend(s, prompt);
  p.logits.push_back(r.logits);
  for (long i = 0; i < n; ++i) {
    p.tokens.push_back(r.argmax);
    r = m.extend(s, {r.argmax});
    p.logits.push_back(r.logits);
  }
  return p;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

std::vector<int32_t> shifted(const std::vector<int32_t>& v, int by, long V, size_t len) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < std::min(len, v.size()); ++i) out.push_back(static_cast<int32_t>((v[i] + by) % V));
  return out;
}

}  // namespace

TEST_CASE("greedy speculation gives plain greedy decoding, token for token and logit for logit") {
  for (const std::string& path : dspark_goldens()) {
    Fixture f(path);
    ModelH& m = *f.model;
    REQUIRE(m.has_draft_head());
    const std::vector<int32_t>& prompt = f.g.prompt_tokens;
    const long n = std::min<long>(16, f.g.config.max_seq_len - static_cast<long>(prompt.size()) - 1);
    const Plain plain = plain_greedy(m, prompt, n);
    for (int draft_len : {0, 1, 2}) {
      CAPTURE(path);
      CAPTURE(draft_len);
      Speculator<ModelH> spec(m, {draft_len, -1, {}});
      Seq s = m.make_sequence();
      int32_t anchor = m.extend(s, prompt).argmax;
      Seq ref = m.make_sequence();  // plain decoding of what the rounds appended, token by token
      m.extend(ref, prompt);
      std::vector<int32_t> got;
      while (static_cast<long>(got.size()) < n) {
        const SpecRound round = spec.round(s, anchor);
        REQUIRE(round.tokens.size() == round.logits.size());
        REQUIRE(round.tokens.size() == static_cast<size_t>(round.accepted + 1));
        CHECK(round.accepted <= round.drafted);
        for (size_t i = 0; i < round.tokens.size(); ++i) {
          m.extend(ref, {round.tokens[i]});
          if (static_cast<long>(got.size()) >= n) continue;
          got.push_back(round.tokens[i]);
          CHECK(same_bits(round.logits[i].logits, plain.logits[got.size()]));
        }
        // the sequence's bytes are plain decoding's at this length: rejected drafts left nothing
        CHECK(m.snapshot(s) == m.snapshot(ref));
        anchor = round.next;
      }
      CHECK(std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + static_cast<long>(got.size())) == got);
    }
  }
}

TEST_CASE("a draft writes nothing: two drafts from one state are identical, the state's bytes unchanged") {
  Fixture f(DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json");
  ModelH& m = *f.model;
  Seq s = m.make_sequence();
  const StepResult r = m.extend(s, f.g.prompt_tokens);
  const std::vector<uint8_t> before = m.snapshot(s);
  const DraftResult a = m.draft(s, r.argmax), b = m.draft(s, r.argmax);
  CHECK(a.tokens == b.tokens);
  CHECK(same_bits(a.logits, b.logits));
  CHECK(same_bits(a.confidence, b.confidence));
  CHECK(m.snapshot(s) == before);
  CHECK(a.tokens.size() == static_cast<size_t>(f.g.config.dspark_block_size + 1));
  CHECK(a.start == s.length());
  // a restored sequence drafts the same bits
  Seq t = m.restore(before);
  const DraftResult c = m.draft(t, r.argmax);
  CHECK(c.tokens == a.tokens);
  CHECK(same_bits(c.logits, a.logits));
}

TEST_CASE("forced acceptance: drafts right k of B times are accepted exactly k, with plain decoding's bits") {
  Fixture f(DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json");
  ModelH& m = *f.model;
  const int B = f.g.config.dspark_block_size;
  const Plain plain = plain_greedy(m, f.g.prompt_tokens, 24);
  Speculator<ModelH> spec(m, {});
  Seq s = m.make_sequence();
  int32_t anchor = m.extend(s, f.g.prompt_tokens).argmax;
  size_t at = 0;  // plain.tokens[at] is the anchor
  const long V = f.g.config.vocab_size;
  for (int k : {3, 0, B, 1, 2}) {
    CAPTURE(k);
    REQUIRE(at + B + 1 < plain.tokens.size());
    DraftResult d;
    d.tokens.push_back(anchor);
    for (int i = 1; i <= B; ++i) {
      const int32_t right = plain.tokens[at + i];
      d.tokens.push_back(i <= k ? right : static_cast<int32_t>((right + 1) % V));
    }
    const SpecRound r = spec.verify({{&s, anchor}}, {d}).at(0);
    CHECK(r.accepted == k);
    CHECK(r.drafted == B);
    REQUIRE(r.tokens.size() == static_cast<size_t>(k + 1));
    for (int i = 0; i <= k; ++i) {
      CHECK(r.tokens[i] == plain.tokens[at + i]);
      CHECK(same_bits(r.logits[i].logits, plain.logits[at + i + 1]));
    }
    CHECK(r.next == plain.tokens[at + k + 1]);
    at += k + 1;
    anchor = r.next;
    CHECK(s.length() == static_cast<long>(f.g.prompt_tokens.size() + at));
    CHECK_FALSE(s.has_checkpoint());
  }
}

TEST_CASE("a batch of sequences speculating at once: each gives its own plain greedy decoding") {
  for (const std::string& path : dspark_goldens()) {
    CAPTURE(path);
    Fixture f(path);
    ModelH& m = *f.model;
    const long V = f.g.config.vocab_size;
    const int K = 3;
    std::vector<std::vector<int32_t>> prompts;
    for (int k = 0; k < K; ++k) prompts.push_back(shifted(f.g.prompt_tokens, k, V, f.g.prompt_tokens.size() - k));
    const long n = std::min<long>(12, f.g.config.max_seq_len - static_cast<long>(f.g.prompt_tokens.size()) - 1);
    std::vector<Plain> plain;
    for (const auto& p : prompts) plain.push_back(plain_greedy(m, p, n));
    // forced drafts mixed with the head's own: sequence 1 drafts the right tokens for two positions,
    // so the accept lengths differ within the batch
    Speculator<ModelH> spec(m, {});
    std::vector<Seq> seqs;
    std::vector<int32_t> anchors;
    for (const auto& p : prompts) {
      seqs.push_back(m.make_sequence());
      anchors.push_back(m.extend(seqs.back(), p).argmax);
    }
    std::vector<std::vector<int32_t>> got(K);
    for (int round = 0; round < 4; ++round) {
      std::vector<std::pair<Seq*, int32_t>> batch;
      std::vector<DraftResult> drafts;
      for (int k = 0; k < K; ++k) {
        if (seqs[k].length() + 4 >= f.g.config.max_seq_len) continue;
        batch.push_back({&seqs[k], anchors[k]});
        DraftResult d = spec.draft(seqs[k], anchors[k]);
        if (k == 1) {
          const size_t at = got[k].size();
          for (size_t i = 1; i < d.tokens.size(); ++i)
            if (i <= 2 && at + i < plain[k].tokens.size()) d.tokens[i] = plain[k].tokens[at + i];
        }
        drafts.push_back(std::move(d));
      }
      if (batch.empty()) break;
      const std::vector<SpecRound> rs = spec.verify(batch, drafts);
      size_t b = 0;
      for (int k = 0; k < K; ++k) {
        if (b >= batch.size() || batch[b].first != &seqs[k]) continue;
        const SpecRound& r = rs[b++];
        if (k == 1 && drafts[b - 1].tokens.size() > 2) CHECK(r.accepted >= 2);
        for (size_t i = 0; i < r.tokens.size(); ++i) {
          const size_t at = got[k].size();
          if (static_cast<long>(at) >= n) break;
          CHECK(r.tokens[i] == plain[k].tokens[at]);
          CHECK(same_bits(r.logits[i].logits, plain[k].logits[at + 1]));
          got[k].push_back(r.tokens[i]);
        }
        anchors[k] = r.next;
      }
    }
    for (int k = 0; k < K; ++k) CHECK(got[k].size() >= 4);  // a round appends at least its anchor
    CHECK(got[1].size() >= 8);                               // and two forced drafts on sequence 1
  }
}

TEST_CASE("rejection sampling is lossless: emitted tokens follow p, acceptance is the overlap") {
  // p and q over 5 tokens, d ~ q, then the acceptor's verdict: the emitted token (d when accepted,
  // else the replacement) must be distributed as p, and P(accept) = Σ min(p, q)
  const DraftAcceptor::Dist p{{0, 0.40}, {1, 0.25}, {2, 0.20}, {3, 0.10}, {4, 0.05}};
  const DraftAcceptor::Dist q{{0, 0.10}, {1, 0.40}, {2, 0.20}, {3, 0.25}, {4, 0.05}};
  double overlap = 0;
  for (size_t i = 0; i < p.size(); ++i) overlap += std::min(p[i].second, q[i].second);
  text::SamplerOptions o;
  o.temperature = 1;
  o.seed = 12345;
  DraftAcceptor acc(o);
  const long N = 200000;
  std::vector<long> count(5, 0);
  long accepted = 0;
  for (long i = 0; i < N; ++i) {
    const int32_t d = acc.draw(q);
    const auto [ok, t] = acc.judge(d, p, q);
    accepted += ok;
    ++count.at(t);
  }
  // chi-square with 4 degrees of freedom: 18.47 is its 0.999 quantile (a correct acceptor fails
  // one run in a thousand; the seed is fixed, so the test is deterministic)
  double chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i].second * N;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  CHECK(chi2 < 18.47);
  // acceptance: a binomial proportion, 5 standard errors
  const double rate = static_cast<double>(accepted) / N, se = std::sqrt(overlap * (1 - overlap) / N);
  CHECK(std::fabs(rate - overlap) < 5 * se);
  // a one-hot draft (greedy drafting under sampled acceptance): accepted with probability p(d),
  // and the output still follows p
  const DraftAcceptor::Dist one{{1, 1.0}};
  std::fill(count.begin(), count.end(), 0);
  accepted = 0;
  for (long i = 0; i < N; ++i) {
    const auto [ok, t] = acc.judge(1, p, one);
    accepted += ok;
    ++count.at(t);
  }
  chi2 = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i].second * N;
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  CHECK(chi2 < 18.47);
  CHECK(std::fabs(static_cast<double>(accepted) / N - 0.25) < 5 * std::sqrt(0.25 * 0.75 / N));
  // a wrong acceptor (always accepting) would fail the same test: its output follows q
  double chi2_q = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double e = p[i].second * N, got = q[i].second * N;
    chi2_q += (got - e) * (got - e) / e;
  }
  CHECK(chi2_q > 18.47);
}

TEST_CASE("sampled speculation on the model: the same tokens as the same seed's rounds, sequences stay exact") {
  Fixture f(DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json");
  ModelH& m = *f.model;
  SpeculativeOptions o;
  o.sampling.temperature = 0.8;
  o.sampling.seed = 7;
  auto run = [&] {
    Speculator<ModelH> spec(m, o);
    Seq s = m.make_sequence();
    int32_t anchor = spec.acceptor().choose(m.extend(s, f.g.prompt_tokens).logits);
    std::vector<int32_t> out;
    for (int i = 0; i < 5; ++i) {
      const SpecRound r = spec.round(s, anchor);
      out.insert(out.end(), r.tokens.begin(), r.tokens.end());
      anchor = r.next;
    }
    // the sequence holds exactly the prompt and the emitted tokens: replaying them plainly gives its bytes
    Seq ref = m.make_sequence();
    m.extend(ref, f.g.prompt_tokens);
    for (int32_t t : out) m.extend(ref, {t});
    CHECK(m.snapshot(ref) == m.snapshot(s));
    return out;
  };
  CHECK(run() == run());
}

TEST_CASE("speculation refuses what it cannot do, with the reason") {
  Fixture f(DS41_GOLDEN_DIR "/ds41_tiny_dspark_golden.json");
  ModelH& m = *f.model;
  CHECK_THROWS_WITH_AS(Speculator<ModelH>(m, {f.g.config.dspark_block_size + 1, -1, {}}),
                       doctest::Contains("draft_len"), Error);
  Seq empty = m.make_sequence();
  CHECK_THROWS_WITH_AS(m.draft(empty, 1), doctest::Contains("empty"), Error);
  Seq s = m.make_sequence();
  m.extend(s, f.g.prompt_tokens);
  CHECK_THROWS_WITH_AS(m.draft(s, static_cast<int32_t>(f.g.config.vocab_size)), doctest::Contains("out of range"), Error);
  // a model whose weights lack the draft head serves the backbone and says why it cannot draft
  WeightSet no_head;
  for (const auto& [name, t] : f.w.all())
    if (name.rfind("mtp.", 0) != 0) no_head.put(name, t);
  ModelH plain(f.g.config, no_head);
  CHECK_FALSE(plain.has_draft_head());
  Seq p = plain.make_sequence();
  plain.extend(p, f.g.prompt_tokens);
  CHECK_THROWS_WITH_AS(plain.draft(p, 1), doctest::Contains("no mtp.* tensors"), Error);
  // its snapshots do not load into a model with the head (and the reverse)
  CHECK_THROWS_WITH_AS(m.restore(plain.snapshot(p)), doctest::Contains("DSpark"), Error);
  CHECK_THROWS_AS(plain.restore(m.snapshot(s)), Error);
  // the end of the sequence: the draft is cut to the room left, the round still exact
  Speculator<ModelH> spec(m, {});
  Seq full = m.make_sequence();
  std::vector<int32_t> toks(static_cast<size_t>(f.g.config.max_seq_len - 2), 1);
  m.extend(full, toks);
  const DraftResult d = spec.draft(full, 2);
  CHECK(d.tokens.size() == 2);  // the anchor and one draft: positions max-2, max-1
  const SpecRound r = spec.round(full, 2);
  CHECK(full.length() <= f.g.config.max_seq_len);
  CHECK(r.tokens.size() >= 1);
}

}  // namespace test_dspark
