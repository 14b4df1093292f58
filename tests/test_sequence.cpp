// Sequences the caller owns (model/sequence.hpp): chunked extension, batches of sequences,
// checkpoint / rollback / truncate, snapshot / restore, and bad input refused with nothing
// changed, each bit for bit against the reference's sequential semantics (prefill + one decode
// step per token) on every golden fixture.
#include <doctest/doctest.h>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>
#include "ds41/ds41.hpp"
#include "ds41/testing/golden.hpp"

namespace test_sequence {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using Seq = Model<HostBackend>::Sequence;

namespace {

/// Every golden fixture of tiny dimensions: the public tiny ones and golden/extra/. Those at the
/// released per-layer shapes (dim 5120: ds41_mid, extra/rel_*) take minutes a run: CTest runs
/// ds41_mid through `ds41-golden --chunks 3,1,4 --rewind` instead (and extra/rel_* once, plain).
const std::vector<std::string>& fixtures() {
  static const std::vector<std::string> list = [] {
    std::vector<std::string> out{DS41_GOLDEN_DIR "/ds41_tiny_golden.json",
                                 DS41_GOLDEN_DIR "/ds41_tiny_fp8_golden.json"};
    std::vector<std::string> extra;
    // the speculative tests extend a sequence up to 3 rows past the golden's last token: goldens
    // whose max_seq_len leaves no such room (tie_r1_ih1_p60: 60 + 10 of 72) are left to ds41-golden
    for (const auto& e : std::filesystem::directory_iterator(DS41_GOLDEN_DIR "/extra")) {
      if (e.path().extension() != ".json") continue;
      const golden::Golden g = golden::load_fixture(e.path().string());  // its steps are not needed here
      const long used = static_cast<long>(g.prompt_tokens.size() + g.decode_tokens.size());
      if (g.config.dim <= 2048 && g.config.max_seq_len >= used + 3) extra.push_back(e.path().string());
    }
    std::sort(extra.begin(), extra.end());
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }();
  return list;
}

struct Fixture {
  golden::Golden g;
  WeightSet w;
  explicit Fixture(const std::string& path) : g(golden::load(path)), w(golden::regenerate_weights(g)) {}
};

/// The reference's sequential semantics: the prompt as one prefill, then one decode step per token.
std::vector<std::vector<float>> sequential(Model<HostBackend>& m, const std::vector<int32_t>& prompt,
                                           const std::vector<int32_t>& rest) {
  std::vector<std::vector<float>> out;
  Seq s = m.make_sequence();
  out.push_back(m.extend(s, prompt).logits);
  for (int32_t t : rest) out.push_back(m.extend(s, {t}).logits);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Every capture of a step, by name (integer captures as floats).
struct RecordingSink : CaptureSink {
  std::map<std::string, std::pair<std::vector<long>, std::vector<float>>> got;
  void put(const std::string& name, const std::vector<long>& shape, CapType, const std::vector<float>* f32,
           const std::vector<int32_t>* i32) override {
    std::vector<float> v = f32 ? *f32 : std::vector<float>(i32->begin(), i32->end());
    got[name] = {shape, std::move(v)};
  }
};

bool same_captures(const RecordingSink& a, const RecordingSink& b, std::string& first_diff) {
  if (a.got.size() != b.got.size()) return first_diff = "capture count", false;
  for (const auto& [name, v] : a.got) {
    auto it = b.got.find(name);
    if (it == b.got.end() || it->second.first != v.first || !same_bits(it->second.second, v.second))
      return first_diff = name, false;
  }
  return true;
}

}  // namespace

TEST_CASE("chunked extension gives every row, every capture, the bits of token-by-token decode, on every golden fixture") {
  // A chunk runs as batched decode steps of consecutive rows where ChunkPlan allows; captures
  // (index scores among them) show a cache row a batched run wrote too late or too early even
  // where the top-k, and so the logits, would not
  for (const std::string& path : fixtures()) {
    CAPTURE(path);
    Fixture f(path);
    Model<HostBackend> m(f.g.config, f.w);
    std::vector<RecordingSink> ref(f.g.decode_tokens.size());
    std::vector<std::vector<float>> ref_logits;
    {
      Seq s = m.make_sequence();
      m.extend(s, f.g.prompt_tokens);
      for (size_t i = 0; i < f.g.decode_tokens.size(); ++i)
        ref_logits.push_back(m.extend(s, {f.g.decode_tokens[i]}, &ref[i]).logits);
    }
    for (const std::vector<int>& sizes : {std::vector<int>{2}, {3, 1, 4}, {100}}) {
      CAPTURE(sizes[0]);
      Seq s = m.make_sequence();
      m.extend(s, f.g.prompt_tokens);
      size_t i = 0, k = 0;
      while (i < f.g.decode_tokens.size()) {
        const size_t n = std::min<size_t>(sizes[k++ % sizes.size()], f.g.decode_tokens.size() - i);
        std::vector<int32_t> chunk(f.g.decode_tokens.begin() + i, f.g.decode_tokens.begin() + i + n);
        std::vector<RecordingSink> sinks(n);
        const auto rows = m.extend_rows(s, chunk, [&sinks](long row) -> CaptureSink* { return &sinks.at(row); });
        REQUIRE(rows.size() == n);
        for (size_t j = 0; j < n; ++j) {
          CAPTURE(i + j);
          CHECK(same_bits(rows[j].logits, ref_logits[i + j]));
          std::string diff;
          CHECK_MESSAGE(same_captures(sinks[j], ref[i + j], diff), "first capture that differs: ", diff);
        }
        i += n;
      }
      CHECK(s.length() == static_cast<long>(f.g.prompt_tokens.size() + f.g.decode_tokens.size()));
    }
  }
}

TEST_CASE("ChunkPlan cuts a chunk where a layer-major run would read a cache row out of order") {
  // One kv/index source read by every other layer (the V4.1 benchmark's layout): nothing crosses
  // rows, so a chunk is one run (up to the cap).
  ModelConfig one;
  one.n_layers = 4;
  one.max_seq_len = 4096;
  one.compress_ratios = {4, 4, 4, 4};
  one.kv_source_layers = {0};
  one.index_source_layers = {0};
  const ChunkPlan single(one);
  CHECK(single.split(300, 64, {0, 0}, 256) == std::vector<long>{64});
  CHECK(single.split(300, 64, {0, 0}, 16) == std::vector<long>{16, 16, 16, 16});

  // dec40's layout (ratios 0, 4, 4, 8, 8; kv and index sources 1 and 3): layer 1 scores the keys
  // published last, which after a position 7 mod 8 are layer 3's, written on that row; in a
  // layer-major run layer 3 would not have written them yet, so the run ends with that row.
  const golden::Golden dec40 = golden::load(DS41_GOLDEN_DIR "/extra/dec40.json");
  const ChunkPlan stale(dec40.config);
  CHECK(stale.split(9, 40, {3, 3}, 256) == std::vector<long>{7, 8, 8, 8, 8, 1});
  CHECK(stale.split(16, 8, {3, 3}, 256) == std::vector<long>{8});

  // A larger-ratio kv source (layer 1, ratio 8) read by a ratio-4 index source (layer 2): its top-k
  // covers (pos + 1) / 4 rows of a cache that holds (pos + 1) / 8, so a row layer 1 writes on a
  // later row of the run would be read early; runs end before each such row.
  ModelConfig wide = one;
  wide.n_layers = 3;
  wide.max_seq_len = 64;
  wide.compress_ratios = {4, 8, 4};
  wide.kv_source_layers = {0, 1};
  wide.index_source_layers = {0, 2};
  const ChunkPlan plan(wide);
  CHECK(plan.split(16, 24, {1, 0}, 256) == std::vector<long>{7, 8, 8, 1});
}

TEST_CASE("a top-k naming compressed rows past a layer's KV is refused, as the reference's gather fails") {
  // cons_r8r4 with its ratios swapped: layer 2 (ratio 8) reads the top-k of layer 1's indexer
  // (ratio 4), which names positions up to (pos + 1) / 4, past the (pos + 1) / 8 rows layer 2's KV
  // holds. The reference's torch.gather fails (index out of range); ds41 must say so, not read
  // past its buffer (it did: AddressSanitizer, heap-buffer-overflow in the host sparse attention).
  golden::Golden g = golden::load(DS41_GOLDEN_DIR "/extra/cons_r8r4.json");
  g.config.compress_ratios = {0, 4, 8};
  const WeightSet w = golden::regenerate_weights(g);
  Model<HostBackend> m(g.config, w);
  Seq s = m.make_sequence();
  std::string what;
  try {
    m.extend(s, g.prompt_tokens);
    for (int32_t t : g.decode_tokens) m.extend(s, {t});
  } catch (const Error& e) {
    what = e.what();
  }
  CHECK(what.find("layer 1's indexer, ratio 4") != std::string::npos);
  CHECK(what.find("index out of range") != std::string::npos);
}

TEST_CASE("a batch of sequences at different lengths gives each row the bits it gives alone") {
  for (const std::string& path : fixtures()) {
    CAPTURE(path);
    Fixture f(path);
    Model<HostBackend> m(f.g.config, f.w);
    const long V = f.g.config.vocab_size;
    // three sequences: the golden's, one with a shorter shifted prompt, one joining a step later
    std::vector<std::vector<int32_t>> prompts{f.g.prompt_tokens, {}, {}};
    for (size_t j = 0; j + 2 < f.g.prompt_tokens.size(); ++j)
      prompts[1].push_back(static_cast<int32_t>((f.g.prompt_tokens[j] + 5) % V));
    if (prompts[1].empty()) prompts[1] = {static_cast<int32_t>((f.g.prompt_tokens[0] + 5) % V)};
    prompts[2] = {static_cast<int32_t>((f.g.prompt_tokens[0] + 9) % V)};
    std::vector<std::vector<int32_t>> rest(3);
    for (int32_t t : f.g.decode_tokens)
      for (int q = 0; q < 3; ++q) rest[q].push_back(static_cast<int32_t>((t + 3 * q) % V));
    std::vector<std::vector<std::vector<float>>> alone;
    for (int q = 0; q < 3; ++q) alone.push_back(sequential(m, prompts[q], rest[q]));

    std::vector<Seq> seqs;
    for (int q = 0; q < 3; ++q) seqs.push_back(m.make_sequence());
    std::vector<size_t> fed(3, 0);  // decode tokens fed so far
    for (size_t step = 0; step <= f.g.decode_tokens.size() + 1; ++step) {
      std::vector<Model<HostBackend>::Segment> batch;
      std::vector<int> who;
      for (int q = 0; q < 3; ++q) {
        if (q == 2 && step == 0) continue;  // joins one step late
        Model<HostBackend>::Segment g;
        g.seq = &seqs[q];
        g.all_logits = true;
        if (seqs[q].length() == 0) g.tokens = prompts[q];
        else
          for (size_t j = 0; j < static_cast<size_t>(1 + q) && fed[q] < rest[q].size(); ++j) g.tokens.push_back(rest[q][fed[q]++]);
        if (g.tokens.empty()) continue;
        batch.push_back(std::move(g));
        who.push_back(q);
      }
      if (batch.empty()) break;
      const auto out = m.step(batch);
      REQUIRE(out.size() == batch.size());
      for (size_t b = 0; b < batch.size(); ++b) {
        const int q = who[b];
        const bool prompt = seqs[q].length() == static_cast<long>(batch[b].tokens.size());
        if (prompt) {
          CHECK(same_bits(out[b].back().logits, alone[q][0]));
        } else {
          const size_t first = fed[q] - batch[b].tokens.size();
          for (size_t j = 0; j < out[b].size(); ++j) CHECK(same_bits(out[b][j].logits, alone[q][1 + first + j]));
        }
      }
    }
  }
}

TEST_CASE("a wide batch gives every row, every capture, the bits of its sequence alone") {
  // 9 rows: torch's flat-position exp paths (the hc sigmoids over [T, hc], the router's over
  // [T, E], the engram gate's, SwiGLU's over [n, I]) take the vector path for the first 16
  // elements of a tensor, so a batch computed as one [9, ...] tensor would differ from each
  // sequence's one-token step; every row must be its own tensor. The fixtures: both tiny ones
  // (hc 4, engram), expert widths that are not a multiple of 16 (top1: 24, w_d1000: 72; where a
  // [n, I] SwiGLU and n [1, I] ones differ) and router widths likewise (33 sigmoid, 17 sqrt-softplus)
  for (const char* name : {"ds41_tiny_golden", "ds41_tiny_fp8_golden", "extra/top1", "extra/w_d1000",
                           "extra/r_sig_e33_k12", "extra/r_sqrt_e17_k9"}) {
    const std::string path = std::string(DS41_GOLDEN_DIR "/") + name + ".json";
    CAPTURE(path);
    Fixture f(path);
    Model<HostBackend> m(f.g.config, f.w);
    const long V = f.g.config.vocab_size;
    constexpr int kSeqs = 9;
    std::vector<std::vector<int32_t>> prompts(kSeqs), rest(kSeqs);
    for (int q = 0; q < kSeqs; ++q) {
      const size_t len = std::max<size_t>(1, f.g.prompt_tokens.size() - static_cast<size_t>(q) % 4);
      for (size_t j = 0; j < len; ++j) prompts[q].push_back(static_cast<int32_t>((f.g.prompt_tokens[j] + 7 * q) % V));
      for (int32_t t : f.g.decode_tokens) rest[q].push_back(static_cast<int32_t>((t + 11 * q) % V));
    }
    // alone: each sequence's captures of each decode step
    std::vector<std::vector<RecordingSink>> alone(kSeqs);
    for (int q = 0; q < kSeqs; ++q) {
      Seq s = m.make_sequence();
      m.extend(s, prompts[q]);
      for (int32_t t : rest[q]) {
        alone[q].emplace_back();
        m.extend(s, {t}, &alone[q].back());
      }
    }
    std::vector<Seq> seqs;
    for (int q = 0; q < kSeqs; ++q) {
      seqs.push_back(m.make_sequence());
      m.extend(seqs[q], prompts[q]);
    }
    for (size_t i = 0; i < f.g.decode_tokens.size(); ++i) {
      std::vector<RecordingSink> sinks(kSeqs);
      std::vector<Model<HostBackend>::Segment> batch(kSeqs);
      for (int q = 0; q < kSeqs; ++q) {
        batch[q].seq = &seqs[q];
        batch[q].tokens = {rest[q][i]};
        batch[q].sinks = [&sinks, q](long) -> CaptureSink* { return &sinks[q]; };
      }
      m.step(batch);
      for (int q = 0; q < kSeqs; ++q) {
        CAPTURE(i);
        CAPTURE(q);
        std::string diff;
        CHECK_MESSAGE(same_captures(sinks[q], alone[q][i], diff), "first capture that differs: ", diff);
      }
    }
  }
}

TEST_CASE("rollback after a speculative step gives the bits of never having decoded it") {
  for (const std::string& path : fixtures()) {
    CAPTURE(path);
    Fixture f(path);
    Model<HostBackend> m(f.g.config, f.w);
    const auto ref = sequential(m, f.g.prompt_tokens, f.g.decode_tokens);
    Seq s = m.make_sequence();
    m.extend(s, f.g.prompt_tokens);
    for (size_t i = 0; i < f.g.decode_tokens.size(); ++i) {
      // a draft of 3 tokens (more than the window of some fixtures wraps, and a compressor group
      // completes inside it on ratio-2 layers), verified and rejected
      s.checkpoint();
      const auto draft = m.extend_rows(s, {f.g.decode_tokens[i], 1, 2, 3});
      CHECK(same_bits(draft[0].logits, ref[i + 1]));
      s.rollback();
      CHECK_FALSE(s.has_checkpoint());
      CHECK(same_bits(m.extend(s, {f.g.decode_tokens[i]}).logits, ref[i + 1]));
    }
  }
}

TEST_CASE("truncate goes back to any length since the checkpoint and refuses what the state cannot hold") {
  Fixture f(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  Model<HostBackend> m(f.g.config, f.w);
  const auto& d = f.g.decode_tokens;
  const auto ref = sequential(m, f.g.prompt_tokens, d);
  const long P = static_cast<long>(f.g.prompt_tokens.size());
  for (long keep = 0; keep <= 4; ++keep) {
    CAPTURE(keep);
    Seq s = m.make_sequence();
    m.extend(s, f.g.prompt_tokens);
    s.checkpoint();
    std::vector<int32_t> spec(d.begin(), d.begin() + keep);
    for (int32_t t : {7, 8, 9, 10, 11, 12, 13, 14, 15}) spec.push_back(t);  // 9 rejected: more than the window of 8
    m.extend(s, spec);
    s.truncate(P + keep);
    CHECK(s.length() == P + keep);
    s.commit();
    for (size_t i = static_cast<size_t>(keep); i < d.size(); ++i) CHECK(same_bits(m.extend(s, {d[i]}).logits, ref[i + 1]));
  }
  Seq s = m.make_sequence();
  m.extend(s, f.g.prompt_tokens);
  m.extend(s, {d[0], d[1], d[2]});
  CHECK_THROWS_WITH_AS(s.truncate(P + 1), doctest::Contains("no checkpoint is open"), Error);
  s.checkpoint();
  m.extend(s, {d[3]});
  CHECK_THROWS_WITH_AS(s.truncate(P + 2), doctest::Contains("before the open checkpoint"), Error);
  CHECK_THROWS_WITH_AS(s.truncate(P + 10), doctest::Contains("outside"), Error);
  CHECK(s.length() == P + 4);  // refused calls change nothing
  s.truncate(0);               // an empty sequence is always reachable
  CHECK(s.length() == 0);
  CHECK_FALSE(s.has_checkpoint());
  CHECK(same_bits(m.extend(s, f.g.prompt_tokens).logits, ref[0]));
  // a checkpoint before the prompt: the prompt is one step, so no length inside it is a step start
  Seq t = m.make_sequence();
  t.checkpoint();
  m.extend(t, f.g.prompt_tokens);
  CHECK_THROWS_WITH_AS(t.truncate(3), doctest::Contains("inside a step"), Error);
  CHECK(t.length() == P);
  t.rollback();
  CHECK(t.length() == 0);
  CHECK(same_bits(m.extend(t, f.g.prompt_tokens).logits, ref[0]));
}

TEST_CASE("snapshot and restore continue with the bits of an uninterrupted sequence") {
  for (const std::string& path : fixtures()) {
    CAPTURE(path);
    Fixture f(path);
    Model<HostBackend> m(f.g.config, f.w);
    const auto ref = sequential(m, f.g.prompt_tokens, f.g.decode_tokens);
    for (size_t at = 0; at <= f.g.decode_tokens.size(); at += 2) {
      Seq s = m.make_sequence();
      m.extend(s, f.g.prompt_tokens);
      for (size_t i = 0; i < at; ++i) m.extend(s, {f.g.decode_tokens[i]});
      const std::vector<uint8_t> bytes = m.snapshot(s);
      s = Seq();  // the original is gone
      Seq r = m.restore(bytes);
      CHECK(r.length() == static_cast<long>(f.g.prompt_tokens.size() + at));
      for (size_t i = at; i < f.g.decode_tokens.size(); ++i)
        CHECK(same_bits(m.extend(r, {f.g.decode_tokens[i]}).logits, ref[i + 1]));
    }
  }
}

TEST_CASE("bad input is refused with a clear error and no sequence changes") {
  Fixture f(DS41_GOLDEN_DIR "/ds41_tiny_golden.json");
  Model<HostBackend> m(f.g.config, f.w);
  Model<HostBackend> other(f.g.config, f.w);
  Seq a = m.make_sequence(), b = m.make_sequence();
  m.extend(a, f.g.prompt_tokens);
  const auto before = m.snapshot(a);
  // the same sequence twice in one batch: refused before any work
  std::vector<Model<HostBackend>::Segment> batch(2);
  batch[0].seq = &a;
  batch[0].tokens = {1};
  batch[1].seq = &a;
  batch[1].tokens = {2};
  CHECK_THROWS_WITH_AS(m.step(batch), doctest::Contains("same sequence"), Error);
  // a later segment past max_seq_len, or with a token out of range: the earlier ones do not run
  batch[1].seq = &b;
  batch[1].tokens.assign(static_cast<size_t>(f.g.config.max_seq_len) + 1, 1);
  CHECK_THROWS_WITH_AS(m.step(batch), doctest::Contains("max_seq_len"), Error);
  batch[1].tokens = {static_cast<int32_t>(f.g.config.vocab_size)};
  CHECK_THROWS_WITH_AS(m.step(batch), doctest::Contains("out of range"), Error);
  CHECK(m.snapshot(a) == before);
  CHECK(b.length() == 0);
  // a sequence of another model, a default-constructed one
  CHECK_THROWS_WITH_AS(other.extend(a, {1}), doctest::Contains("not made by this model"), Error);
  Seq none;
  CHECK_THROWS_WITH_AS(m.extend(none, {1}), doctest::Contains("not made by this model"), Error);
  // rewind calls in the wrong state
  CHECK_THROWS_WITH_AS(a.rollback(), doctest::Contains("no open checkpoint"), Error);
  CHECK_THROWS_WITH_AS(a.commit(), doctest::Contains("no open checkpoint"), Error);
  a.checkpoint();
  CHECK_THROWS_WITH_AS(a.checkpoint(), doctest::Contains("still open"), Error);
  a.commit();
  CHECK(m.snapshot(a) == before);
  // snapshots: another configuration, truncated, trailing bytes, not a snapshot
  ModelConfig c2 = f.g.config;
  c2.max_seq_len += 1;
  Model<HostBackend> longer(c2, f.w);
  CHECK_THROWS_WITH_AS(longer.restore(before), doctest::Contains("another configuration"), Error);
  for (size_t cut : {size_t{0}, size_t{7}, size_t{40}, before.size() / 2, before.size() - 1}) {
    std::vector<uint8_t> part(before.begin(), before.begin() + static_cast<long>(cut));
    CHECK_THROWS_AS(m.restore(part), Error);
  }
  std::vector<uint8_t> longer_bytes = before;
  longer_bytes.push_back(0);
  CHECK_THROWS_WITH_AS(m.restore(longer_bytes), doctest::Contains("left over"), Error);
  std::vector<uint8_t> junk(before.size(), 0x41);
  CHECK_THROWS_WITH_AS(m.restore(junk), doctest::Contains("bad magic"), Error);
}

}  // namespace test_sequence
