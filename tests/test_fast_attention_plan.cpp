// The fast attention and index-score kernels' plans (backend/cuda/fast_attention_plan.hpp), on the
// host: every (row, head) and index slot, every score, covered exactly once within the limits at
// DeepSeek-V4.1-Flash and tiny-golden shapes; and the kernels' order, replayed from the same
// DS41_HD functions (fast_attention_emulation.hpp), within the stated tolerances of the exact
// operations, masked slots, all-masked rows and -inf sinks included. The kernels themselves run
// in test_golden_cuda (device only).
#include <doctest/doctest.h>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>
#include "ds41/backend/cuda/fast_attention_plan.hpp"
#include "ds41/core/attention_math.hpp"
#include "ds41/core/compress_math.hpp"
#include "fast_attention_emulation.hpp"

namespace test_fast_attention_plan {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using namespace ds41::fast_attn;

namespace {

const DeviceLimits kH200{132, 227 * 1024, 228 * 1024};
const DeviceLimits kSmallGpu{20, 99 * 1024, 100 * 1024};
const DeviceLimits kFewSms{16, 227 * 1024, 228 * 1024};  // an H200's tiles, a wave of 16 blocks  // a consumer part: 128 KiB tiles do not fit
const DeviceLimits kTinySmem{4, 24 * 1024, 64 * 1024};    // 32-key tiles at D = 128
const DeviceLimits kTiny16{4, 16 * 1024, 64 * 1024};      // 16-key tiles at D = 128

struct AttnShape {
  long T;
  int H, D, ncols;
};
// V4.1-Flash (64 heads x 512, window 128, top-k 512): decode at a 2k context (ncols 128 + 512),
// a ratio-128 layer's 16 compressed rows, a prefill chunk; the tiny golden (4 heads x 64, window 8,
// top-k 4) decode and prefill; and awkward ones (one slot, odd D, uneven head groups, large D).
const AttnShape kAttnShapes[] = {{1, 64, 512, 640},  {4, 64, 512, 640}, {16, 64, 512, 640}, {1, 64, 512, 144},
                                 {2, 64, 512, 4096}, {256, 64, 512, 640}, {1, 4, 64, 12},   {64, 4, 64, 12},
                                 {3, 4, 64, 1},      {2, 12, 7, 130},   {1, 9, 1000, 65},   {1, 1, 3000, 200}};

void check_attention_plan(const AttnShape& s, const DeviceLimits& lim) {
  CAPTURE(s.T);
  CAPTURE(s.H);
  CAPTURE(s.D);
  CAPTURE(s.ncols);
  const SparseAttnPlan p = plan_sparse_attention(s.T, s.H, s.D, s.ncols, lim);
  if (!p.tiled) {  // only where no 16-key tile fits
    const int groups = (s.H + kMaxHeadsPerBlock - 1) / kMaxHeadsPerBlock, hb = (s.H + groups - 1) / groups;
    CHECK(sparse_attn_shared_bytes(hb, s.D, 16) > lim.smem_per_block);
    return;
  }
  CHECK(p.shared_bytes <= lim.smem_per_block);
  CHECK(p.shared_bytes == sparse_attn_shared_bytes(p.heads_per_block, s.D, p.tile_keys));
  CHECK(p.heads_per_block >= 1);
  CHECK(p.heads_per_block <= kMaxHeadsPerBlock);
  CHECK((p.tile_keys == 16 || p.tile_keys == 32 || p.tile_keys == 64));
  CHECK(p.splits >= 1);
  CHECK(p.splits <= kMaxSplits);
  CHECK(p.threads == kThreads);
  CHECK(p.blocks == s.T * p.head_groups * p.splits);
  CHECK(p.blocks <= 0x7fffffffL);
  // every (row, head, slot) exactly once: per (row, head) the blocks' slot ranges abut from 0 to ncols
  std::vector<int> next(static_cast<size_t>(s.T) * s.H, 0);  // the next slot each (row, head) expects
  long bad = 0;
  for (long b = 0; b < p.blocks; ++b) {
    const long t = p.row_of(b);
    const int g = p.group_of(b), sp = p.split_of(b);
    const int lo = p.first_tile(sp) * p.tile_keys, hi = std::min(p.end_tile(sp) * p.tile_keys, s.ncols);
    if (t < 0 || t >= s.T || p.heads_in(g, s.H) < 1 || lo >= hi) {
      ++bad;
      continue;
    }
    for (int h = p.first_head(g); h < p.first_head(g) + p.heads_in(g, s.H); ++h) {
      int& n = next[t * s.H + h];
      if (n != lo) ++bad;  // blocks run split-major within a (row, group): ranges arrive in order
      n = hi;
    }
  }
  for (int n : next) bad += n != s.ncols;
  CHECK(bad == 0);
}

struct IndexShape {
  long T;
  int H, Di;
  long nk;
};
// V4.1 (32 index heads x 128): decode at a 2k context (nk 2048/4), 16k context, a prefill; the
// tiny golden (2 x 32); awkward ones.
const IndexShape kIndexShapes[] = {{1, 32, 128, 512}, {4, 32, 128, 512}, {16, 32, 128, 512}, {1, 32, 128, 4096},
                                   {1024, 32, 128, 256}, {1, 2, 32, 5},  {16, 2, 32, 8},     {3, 5, 33, 17},
                                   {2, 64, 512, 100}};

void check_index_plan(const IndexShape& s, const DeviceLimits& lim) {
  CAPTURE(s.T);
  CAPTURE(s.H);
  CAPTURE(s.Di);
  CAPTURE(s.nk);
  const IndexScoresPlan p = plan_index_scores(s.T, s.H, s.Di, s.nk, false, lim);
  CHECK_FALSE(plan_index_scores(s.T, s.H, s.Di, s.nk, true, lim).tiled);  // small bmm: the exact kernel
  if (!p.tiled) {
    CHECK(index_scores_shared_bytes(1, 16, s.H, s.Di) > lim.smem_per_block);
    return;
  }
  CHECK(p.shared_bytes <= lim.smem_per_block);
  CHECK(p.shared_bytes == index_scores_shared_bytes(p.rows_per_block, p.keys_per_block, s.H, s.Di));
  CHECK(p.keys_per_block % 4 == 0);
  CHECK(p.stride % 32 == 4);
  CHECK(p.stride >= padded_dim(s.Di));
  CHECK(p.blocks == p.row_blocks * p.key_blocks);
  std::vector<int> seen(static_cast<size_t>(s.T * s.nk), 0);
  for (long b = 0; b < p.blocks; ++b) {
    const long t0 = p.row_block_of(b) * p.rows_per_block, k0 = p.key_block_of(b) * p.keys_per_block;
    for (long t = t0; t < std::min(s.T, t0 + p.rows_per_block); ++t)
      for (long j = k0; j < std::min(s.nk, k0 + p.keys_per_block); ++j) ++seen[t * s.nk + j];
  }
  long bad = 0;
  for (int c : seen) bad += c != 1;
  CHECK(bad == 0);
}

/// Random attention inputs: q and kv rows bf16 values (as the model's are), about a fifth of the
/// slots masked, row `all_masked_row` (if in range) entirely masked, head 1's sink -inf.
struct AttnCase {
  long T;
  int H, D, ncols, rows;
  std::vector<float> q, kv, sink;
  std::vector<int32_t> idx;
  float scale;
};
AttnCase random_attention(long T, int H, int D, int ncols, long all_masked_row, float spread, std::mt19937& rng) {
  AttnCase c{T, H, D, ncols, std::max(ncols, 8), {}, {}, {}, {}, spread / std::sqrt(static_cast<float>(D))};
  std::normal_distribution<float> nd(0.0f, 1.0f);
  c.q.resize(static_cast<size_t>(T) * H * D);
  c.kv.resize(static_cast<size_t>(c.rows) * D);
  for (auto& v : c.q) v = bf16_round(nd(rng));
  for (auto& v : c.kv) v = bf16_round(nd(rng));
  c.sink.resize(H);
  for (int h = 0; h < H; ++h) c.sink[h] = h == 1 ? -INFINITY : nd(rng);
  c.idx.resize(static_cast<size_t>(T) * ncols);
  for (long t = 0; t < T; ++t)
    for (int j = 0; j < ncols; ++j)
      c.idx[t * ncols + j] = (t == all_masked_row || rng() % 5 == 0) ? -1 : static_cast<int32_t>(rng() % c.rows);
  return c;
}

/// The emulated fast result against sparse_attn_head per (row, head); returns elements compared
/// and counts those outside the tolerance / bit-identical.
long compare_attention(const AttnCase& c, const SparseAttnPlan& p, long& bad, long& same, double* worst = nullptr) {
  std::vector<float> fast(c.q.size()), exact(c.D);
  std::vector<double> weighted(c.D);
  testing::emulate_fast_sparse_attention(c.q.data(), c.kv.data(), c.D, c.idx.data(), c.ncols, c.T, c.H, c.sink.data(), c.scale, p,
                                fast.data());
  bad = same = 0;
  for (long t = 0; t < c.T; ++t)
    for (int h = 0; h < c.H; ++h) {
      const long e = t * c.H + h;
      sparse_attn_head(c.q.data() + e * c.D, c.kv.data(), c.D, c.idx.data() + t * c.ncols, c.ncols, c.D, c.sink[h], c.scale,
                       exact.data());
      testing::sparse_attention_tolerance(c.q.data(), c.kv.data(), c.D, c.idx.data(), c.ncols, h, c.H, t, c.sink.data(),
                                          c.scale, weighted.data());
      for (int d = 0; d < c.D; ++d) {
        const float f = fast[e * c.D + d], x = exact[d];
        bad += !testing::within_attention_tolerance(f, x, weighted[d]);
        same += (f == x) || (std::isnan(f) && std::isnan(x));
        if (worst && f == f && x == x && weighted[d] > 0)  // |difference| / the 2^-7·Σ w|v| term
          *worst = std::max(*worst, std::fabs(static_cast<double>(f) - x) / std::ldexp(weighted[d], -7));
      }
    }
  return c.T * c.H * c.D;
}

}  // namespace

TEST_CASE("fast sparse attention plan: every (row, head) and index slot once, within the limits") {
  for (const DeviceLimits& lim : {kH200, kSmallGpu, kTinySmem, kTiny16})
    for (const AttnShape& s : kAttnShapes) check_attention_plan(s, lim);
  CHECK(plan_sparse_attention(2, 4, 128, 150, kTinySmem).tile_keys == 32);
  CHECK(plan_sparse_attention(2, 4, 128, 150, kTiny16).tile_keys == 16);
  // the decisions at V4.1 decode shapes on an H200: 8 heads a block (the KV tile read once for 8),
  // the reference's 64-key block as the tile (165 KiB: one block an SM), splits filling one wave
  const SparseAttnPlan p1 = plan_sparse_attention(1, 64, 512, 640, kH200);
  const SparseAttnPlan p4 = plan_sparse_attention(4, 64, 512, 640, kH200);
  const SparseAttnPlan p16 = plan_sparse_attention(16, 64, 512, 640, kH200);
  CHECK(p1.heads_per_block == 8);
  CHECK(p1.tile_keys == 64);
  CHECK(p1.splits == 10);
  CHECK(p1.blocks == 80);
  CHECK(p4.splits == 4);
  CHECK(p4.blocks == 128);
  CHECK(p16.splits == 1);
  CHECK(p16.blocks == 128);
  MESSAGE("V4.1 decode, H200: T=1 " << p1.blocks << " blocks (" << p1.splits << " splits of " << p1.tiles_per_split
                                    << " tiles), T=4 " << p4.blocks << " (" << p4.splits << " x " << p4.tiles_per_split
                                    << "), T=16 " << p16.blocks << " (" << p16.splits << "), " << p1.shared_bytes
                                    << " shared bytes a block");
  // no D that fits nothing is tiled; a D no 16-key tile fits falls back (the exact kernel)
  CHECK_FALSE(plan_sparse_attention(1, 8, 20000, 64, kH200).tiled);
  CHECK_FALSE(plan_sparse_attention(1, 8, 64, 0, kH200).tiled);
}

TEST_CASE("fast index scores plan: every score once, within the limits") {
  for (const DeviceLimits& lim : {kH200, kSmallGpu, kTinySmem})
    for (const IndexShape& s : kIndexShapes) check_index_plan(s, lim);
  for (long T : {1L, 4L, 16L}) {
    const IndexScoresPlan p = plan_index_scores(T, 32, 128, 512, false, kH200);
    MESSAGE("V4.1 index scores, H200, T=" << T << " nk=512: " << p.rows_per_block << " rows x " << p.keys_per_block
                                          << " keys a block, " << p.blocks << " blocks, " << p.shared_bytes
                                          << " shared bytes");
  }
}

TEST_CASE("fast sparse attention, emulated: within the tolerance of the exact operation") {
  std::mt19937 rng(2024);
  struct Run {
    AttnShape s;
    DeviceLimits lim;
    float spread;
  };
  const Run runs[] = {
      {{1, 64, 512, 640}, kH200, 1.0f},   // V4.1 decode, 10 splits
      {{4, 64, 512, 640}, kH200, 4.0f},   // 4 splits, peaky softmax
      {{2, 64, 512, 640}, kFewSms, 1.0f}, // one split (T=16's plan on an H200): the reference's blocks, other sums
      {{1, 64, 512, 144}, kH200, 1.0f},   // ratio-128 layer: window + 16 compressed rows
      {{3, 4, 64, 12}, kH200, 1.0f},      // tiny golden decode
      {{9, 4, 64, 12}, kTinySmem, 8.0f},  // tiny, very peaky
      {{2, 12, 7, 130}, kTinySmem, 2.0f}, // odd D, uneven head groups, 16/32-key tiles, splits
      {{2, 9, 100, 200}, kSmallGpu, 1.0f},
      {{2, 4, 128, 150}, kTinySmem, 2.0f}, // 32-key tiles
      {{2, 4, 128, 150}, kTiny16, 2.0f},   // 16-key tiles
  };
  for (const Run& r : runs) {
    CAPTURE(r.s.T);
    CAPTURE(r.s.H);
    CAPTURE(r.s.D);
    CAPTURE(r.s.ncols);
    const SparseAttnPlan p = plan_sparse_attention(r.s.T, r.s.H, r.s.D, r.s.ncols, r.lim);
    REQUIRE(p.tiled);
    CAPTURE(p.splits);
    CAPTURE(p.tile_keys);
    const AttnCase c = random_attention(r.s.T, r.s.H, r.s.D, r.s.ncols, r.s.T > 1 ? 1 : -1, r.spread, rng);
    long bad = 0, same = 0;
    double worst = 0.0;
    const long n = compare_attention(c, p, bad, same, &worst);
    CHECK(bad == 0);
    MESSAGE("T=" << r.s.T << " H=" << r.s.H << " D=" << r.s.D << " ncols=" << r.s.ncols << " splits=" << p.splits
                 << " tile=" << p.tile_keys << ": " << same << " of " << n
                 << " outputs bit-identical to the exact ones; largest difference " << worst << " x 2^-7 Σ w|v|");
  }
}

TEST_CASE("fast sparse attention, emulated: all-masked rows and -inf sinks give the exact operation's values") {
  // row 0 all masked: 0 where the sink is finite (den = exp(sink + 1e30) = inf), NaN where it is
  // -inf (0/0), as the exact operation; split plans merge such rows' empty states the same way
  std::mt19937 rng(5);
  for (const DeviceLimits& lim : {kH200, kTinySmem}) {
    AttnCase c = random_attention(2, 4, 64, 200, 0, 1.0f, rng);
    const SparseAttnPlan p = plan_sparse_attention(c.T, c.H, c.D, c.ncols, lim);
    REQUIRE(p.tiled);
    std::vector<float> fast(c.q.size());
    testing::emulate_fast_sparse_attention(c.q.data(), c.kv.data(), c.D, c.idx.data(), c.ncols, c.T, c.H, c.sink.data(),
                                           c.scale, p, fast.data());
    for (int h = 0; h < c.H; ++h) {
      CAPTURE(h);
      CHECK((h == 1 ? std::isnan(fast[h * c.D]) : fast[h * c.D] == 0.0f));
    }
    long bad = 0, same = 0;
    compare_attention(c, p, bad, same);
    CHECK(bad == 0);
  }
}

TEST_CASE("fast index scores, emulated: within the tolerance of the exact operation") {
  std::mt19937 rng(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  // bf16 inputs (the model's q and keys are fp4 round trips: fewer bits still): every product is
  // exact in float32, so a fused multiply-add rounds as multiply-then-add does and the fast scores
  // are the exact ones' bits; full float32 inputs make the products inexact
  for (bool f32_inputs : {false, true})
  for (const IndexShape& s : {IndexShape{1, 32, 128, 512}, IndexShape{16, 32, 128, 512}, IndexShape{3, 2, 32, 9},
                              IndexShape{2, 5, 33, 17}}) {
    CAPTURE(f32_inputs);
    CAPTURE(s.T);
    CAPTURE(s.H);
    CAPTURE(s.Di);
    CAPTURE(s.nk);
    // the model's: fp4-round-tripped q and keys (bf16 values here), bf16 head weights
    std::vector<float> q(static_cast<size_t>(s.T) * s.H * s.Di), w(static_cast<size_t>(s.T) * s.H),
        k(static_cast<size_t>(s.nk) * s.Di), fast(static_cast<size_t>(s.T * s.nk));
    const auto value = [&](float x) { return f32_inputs ? x : bf16_round(x); };
    for (auto& v : q) v = value(nd(rng));
    for (auto& v : k) v = value(nd(rng));
    for (auto& v : w) v = bf16_round(nd(rng) * 0.1f);
    testing::emulate_fast_index_scores(q.data(), w.data(), k.data(), s.T, s.H, s.Di, s.nk, fast.data());
    long bad = 0, same = 0;
    for (long t = 0; t < s.T; ++t)
      for (long j = 0; j < s.nk; ++j) {
        const float x = index_score_entry(q.data() + t * s.H * s.Di, w.data() + t * s.H, k.data() + j * s.Di, s.H, s.Di);
        const float f = fast[t * s.nk + j];
        bad += !testing::within_index_tolerance(f, x, q.data() + t * s.H * s.Di, w.data() + t * s.H, k.data() + j * s.Di,
                                                s.H, s.Di);
        same += f == x;
      }
    CHECK(bad == 0);
    if (!f32_inputs) CHECK(same == s.T * s.nk);
    MESSAGE(std::string(f32_inputs ? "f32" : "bf16") << " inputs, T=" << s.T << " H=" << s.H << " Di=" << s.Di << " nk=" << s.nk << ": " << same << " of " << s.T * s.nk
                 << " scores bit-identical to the exact ones");
  }
}

TEST_CASE("fast attention arithmetic: merging split states equals one state over the whole list") {
  // two halves' states merged (softmax_merge) against one running state over both: same max, and
  // the denominators within float32 rounding of each other
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int rep = 0; rep < 100; ++rep) {
    float s[16];
    for (float& v : s) v = nd(rng);
    SoftmaxState whole, a, b;
    const auto feed = [&](SoftmaxState& st, int lo, int hi) {
      float mx = -INFINITY;
      for (int i = lo; i < hi; ++i) mx = std::fmax(mx, s[i]);
      const float alpha = softmax_advance(st, mx);
      float sum = 0.0f;
      for (int i = lo; i < hi; ++i) sum += softmax_prob(s[i], st);
      softmax_accumulate(st, alpha, sum);
    };
    feed(whole, 0, 8);
    feed(whole, 8, 16);
    feed(a, 0, 8);
    feed(b, 8, 16);
    float fa, fb;
    const SoftmaxState m = softmax_merge(a, b, fa, fb);
    CHECK(m.m == whole.m);
    CHECK(std::fabs(m.den - whole.den) <= 1e-5f * whole.den);
    // an empty state (an all-masked split) is the identity
    float f0, f1;
    const SoftmaxState e = softmax_merge(SoftmaxState{}, a, f0, f1);
    CHECK(e.m == a.m);
    CHECK(e.den == a.den);
  }
}

}  // namespace test_fast_attention_plan
