// Host sparse attention (attention_math.hpp's per-head function with its side-by-side sums, and
// host/attention.hpp's multi-head one): every output bit-identical to the reference's order,
// written one sum at a time.
#include <doctest/doctest.h>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>
#include "ds41/backend/host/attention.hpp"
#include "ds41/backend/host/buffer.hpp"
#include "ds41/core/attention_math.hpp"
#include "ds41/core/simd_avx2.hpp"
#include "same_bits.hpp"

namespace test_host_attention {  // its names apart from its unity group's other files (tests/CMakeLists.txt)

using namespace ds41;
using ds41::testing::same_bits;

namespace {

/// The scratch sparse_attn_heads_host takes, filled with NaN: no result may depend on what a
/// previous call left there.
HostBuffer<float> nan_scratch(int D, int H) {
  HostBuffer<float> s(attn_heads_scratch_floats(D, H));
  std::fill(s.data(), s.data() + s.size(), NAN);
  return s;
}

}  // namespace

namespace {

/// sparse_attn_head written as the reference orders it, one sum at a time (the oracle for the
/// host's side-by-side loops).
void sparse_attn_head_one_at_a_time(const float* q, const float* kv, long kv_stride, const int* idx, int n, int D,
                                    float sink, float scale, float* out) {
  for (int d = 0; d < D; ++d) out[d] = 0.0f;
  float m = -1e30f, den = 0.0f, p[kAttnBlock];
  for (int b0 = 0; b0 < n; b0 += kAttnBlock) {
    const int bn = std::min(kAttnBlock, n - b0);
    float bmax = -INFINITY;
    for (int t = 0; t < bn; ++t) {
      const int r = idx[b0 + t];
      if (r < 0) {
        p[t] = -INFINITY;
        continue;
      }
      float dot = 0.0f;
      for (int d = 0; d < D; ++d) dot += q[d] * kv[static_cast<long>(r) * kv_stride + d];
      p[t] = dot * scale;
      bmax = std::fmax(bmax, p[t]);
    }
    const float new_m = std::fmax(m, bmax), alpha = exp_sleef_u10(m - new_m);
    for (int t = 0; t < bn; ++t) p[t] = idx[b0 + t] < 0 ? 0.0f : exp_sleef_u10(p[t] - new_m);
    den = den * alpha + torch_order_sum(bn, [&](long t) { return p[t]; });
    for (int d = 0; d < D; ++d) {
      float blk = 0.0f;
      for (int t = 0; t < bn; ++t)
        if (idx[b0 + t] >= 0) blk += bf16_round(p[t]) * kv[static_cast<long>(idx[b0 + t]) * kv_stride + d];
      out[d] = out[d] * alpha + blk;
    }
    m = new_m;
  }
  den = den + exp_sleef_u10(sink - m);
  for (int d = 0; d < D; ++d) out[d] = bf16_round(out[d] / den);
}

}  // namespace

namespace {

/// Outputs of sparse_attn_heads_host (H heads of q, rows D apart) whose bits differ from the
/// one-at-a-time oracle's for the same head.
long heads_differing(const std::vector<float>& q, const std::vector<float>& kv, long stride, const std::vector<int>& idx,
                     int D, int H, const std::vector<float>& sink, float scale) {
  const int n = static_cast<int>(idx.size());
  std::vector<float> fast(static_cast<size_t>(H) * D), ref(D);
  sparse_attn_heads_host(q.data(), kv.data(), stride, idx.data(), n, D, H, sink.data(), scale, fast.data(),
                         nan_scratch(D, H).data());
  long bad = 0;
  for (int h = 0; h < H; ++h) {
    sparse_attn_head_one_at_a_time(q.data() + static_cast<size_t>(h) * D, kv.data(), stride, idx.data(), n, D, sink[h],
                                   scale, ref.data());
    for (int d = 0; d < D; ++d) bad += !same_bits(fast[static_cast<size_t>(h) * D + d], ref[d]);
  }
  return bad;
}

}  // namespace

TEST_CASE("sparse attention: the host's side-by-side sums give the one-at-a-time bits") {
  std::mt19937 rng(59);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  for (int D : {1, 7, 32, 40, 100, 108, 512})  // 32-wide output groups, then 8-wide, then single
    for (int n : {1, 5, 8, 9, 16, 17, 64, 65, 200}) {  // score groups of 16 rows, 8, and part-filled
      const int rows = 150;
      std::vector<float> q(D), kv(static_cast<size_t>(rows) * (D + 3));
      for (auto& v : q) v = uni(rng);
      for (auto& v : kv) v = bf16_round(uni(rng));
      std::vector<int> idx(n);
      for (auto& i : idx) i = static_cast<int>(rng() % (rows + rows / 8)) - rows / 8;  // some -1-like masks
      for (auto& i : idx) i = i < 0 ? -1 : i;
      std::vector<float> fast(D), ref(D);
      sparse_attn_head(q.data(), kv.data(), D + 3, idx.data(), n, D, 0.25f, 0.1f, fast.data());
      sparse_attn_head_one_at_a_time(q.data(), kv.data(), D + 3, idx.data(), n, D, 0.25f, 0.1f, ref.data());
      CAPTURE(D);
      CAPTURE(n);
      long bad = 0;
      for (int d = 0; d < D; ++d) bad += !same_bits(fast[d], ref[d]);
      CHECK(bad == 0);
    }
}

#if defined(__AVX2__) && defined(__FMA__)
TEST_CASE("avx2::dot_rows_in_order: 8 or 16 dot products, each in d order (attention scores are bf16-blurred downstream)") {
  std::mt19937 rng(67);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  for (int D : {1, 7, 8, 9, 100, 512}) {
    std::vector<float> q(D), rows(16 * static_cast<size_t>(D + 5));
    for (auto& v : q) v = uni(rng);
    for (auto& v : rows) v = uni(rng);
    const float* k[16];
    for (int j = 0; j < 16; ++j) k[j] = rows.data() + static_cast<size_t>(j) * (D + 5);
    float dot8[8], dot16[16];
    avx2::dot_rows_in_order<1>(q.data(), k, D, dot8);
    avx2::dot_rows_in_order<2>(q.data(), k, D, dot16);
    CAPTURE(D);
    for (int j = 0; j < 16; ++j) {
      float ref = 0.0f;
      for (int d = 0; d < D; ++d) ref += q[d] * k[j][d];
      CAPTURE(j);
      if (j < 8) CHECK(same_bits(dot8[j], ref));
      CHECK(same_bits(dot16[j], ref));
    }
  }
}
#endif

TEST_CASE("sparse attention, several heads at once: each head's bits are the one-at-a-time ones") {
  std::mt19937 rng(71);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  // heads: pairs, then a single one (AVX-512: groups of 4, then single ones); D: 64-d score passes
  // whole and part-filled, 32-wide value slices whole and part-filled (pairs of them and a last
  // one), the transposes' 8-d tail; n: blocks of 64 whole and not (16-key vectors 1-4).
  // q bf16 numbers as in the model (AVX-512: the fused score sums), or not (multiply, then add).
  for (bool q_bf16 : {false, true})
  for (int H : {1, 2, 3, 5, 16, 33})
    for (int D : {1, 7, 32, 40, 100, 108, 512})
      for (int n : {1, 9, 17, 33, 49, 64, 65, 200}) {
        const int rows = 150;
        const long stride = D + 3;
        std::vector<float> q(static_cast<size_t>(H) * D), kv(static_cast<size_t>(rows) * stride), sink(H);
        for (auto& v : q) v = q_bf16 ? bf16_round(uni(rng)) : uni(rng);
        for (auto& v : kv) v = bf16_round(uni(rng));
        for (auto& v : sink) v = uni(rng);
        std::vector<int> idx(n);
        for (auto& i : idx) i = static_cast<int>(rng() % (rows + rows / 4)) - rows / 4;  // ~1 in 5 masked
        for (auto& i : idx) i = i < 0 ? -1 : i;
        if (n >= 64)
          for (int t = 0; t < 64; ++t) idx[t] = -1;  // a whole block masked: it changes nothing
        CAPTURE(q_bf16);
        CAPTURE(H);
        CAPTURE(D);
        CAPTURE(n);
        CHECK(heads_differing(q, kv, stride, idx, D, H, sink, 0.3f) == 0);
      }
}

TEST_CASE("sparse attention, several heads at once: large scores, underflowing probabilities, all masked") {
  // Scores far apart make exp underflow to 0 (p = 0 · v adds -0 for negative v) and later blocks
  // raise the running max (alpha < 1); an all-masked list leaves the sink alone: out is 0.
  const int H = 5, D = 72, rows = 40, n = 130;
  std::mt19937 rng(73);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::vector<float> q(H * D), kv(rows * D), sink(H, 0.5f);
  for (int i = 0; i < H * D; ++i) q[i] = uni(rng) * (1 + i % 7) * 4.0f;
  for (int i = 0; i < rows * D; ++i) kv[i] = bf16_round(uni(rng) * (1 + (i / D) % 5) * 3.0f);
  std::vector<int> idx(n);
  for (int t = 0; t < n; ++t) idx[t] = (t * 17) % rows;
  CHECK(heads_differing(q, kv, D, idx, D, H, sink, 1.0f) == 0);
  std::vector<float> fast(H * D);
  std::fill(idx.begin(), idx.end(), -1);
  sparse_attn_heads_host(q.data(), kv.data(), D, idx.data(), n, D, H, sink.data(), 1.0f, fast.data(),
                         nan_scratch(D, H).data());
  for (float v : fast) CHECK(v == 0.0f);
}


#if defined(DS41_HOST_AVX512)
TEST_CASE("host_exact: products of bf16 numbers are exact unless one falls below 2^-126 or overflows") {
  using host_exact::Bf16Range;
  const auto range = [](std::vector<float> v) {
    Bf16Range r;
    host_exact::add_values(r, v.data(), static_cast<long>(v.size()));
    return r;
  };
  const Bf16Range unit = range({1.0f, -0.5f, 0.0f, 0.25f});
  CHECK(unit.bf16);
  CHECK(unit.lo() == 0.25f);
  CHECK(unit.hi() == 1.0f);
  CHECK(host_exact::products_exact(unit, unit));
  CHECK(host_exact::products_exact(range({0.0f, -0.0f}), range({1e30f})) == false);  // 1e30 is not a bf16 number
  CHECK(host_exact::products_exact(range({0.0f, -0.0f}), range({0x1p100f})));        // every product zero
  // the edges: smallest product 2^-126 is exact, 2^-127 is not; largest below 2^128 is, 2^128 is not
  CHECK(host_exact::products_exact(range({0x1p-63f, 1.0f}), range({0x1p-63f})));
  CHECK_FALSE(host_exact::products_exact(range({0x1p-64f, 1.0f}), range({0x1p-63f})));
  CHECK(host_exact::products_exact(range({0x1.fep63f}), range({0x1p64f})));
  CHECK_FALSE(host_exact::products_exact(range({0x1p64f}), range({0x1p64f})));
  CHECK_FALSE(range({1.0f, INFINITY}).bf16);
  CHECK_FALSE(range({NAN}).bf16);
  CHECK_FALSE(range({1.0f + 0x1p-20f}).bf16);
  // the masked tail: 17 values, the 17th not a bf16 number
  std::vector<float> v(17, 1.0f);
  v[16] = 1.0f + 0x1p-20f;
  CHECK_FALSE(range(v).bf16);
  v.pop_back();
  CHECK(range(v).bf16);
}

TEST_CASE("sparse attention, several heads at once: products near 2^-126 (multiply, then add) give the one-at-a-time bits") {
  // q and the keys bf16 numbers whose smallest products fall below 2^-126 (rounded as subnormals:
  // a fused multiply-add would not round them), and the same with every product exact
  const int H = 6, D = 64, rows = 80, n = 100;
  std::mt19937 rng(79);
  std::uniform_real_distribution<float> half_to_one(0.5f, 1.0f);
  const auto uni = [&](std::mt19937& g) { return g() % 2 ? half_to_one(g) : -half_to_one(g); };  // |x| in [0.5, 1]
  for (float tiny : {0x1p-70f, 0x1p-60f}) {
    std::vector<float> q(H * D), kv(rows * D), sink(H, 0.5f);
    for (int i = 0; i < H * D; ++i) q[i] = bf16_round(uni(rng) * (i % 5 == 0 ? tiny : 1.0f));
    for (int i = 0; i < rows * D; ++i) kv[i] = bf16_round(uni(rng) * (i % 7 == 0 ? tiny : 1.0f) * 8.0f);
    host_exact::Bf16Range qr, kr;
    host_exact::add_values(qr, q.data(), H * D);
    host_exact::add_values(kr, kv.data(), rows * D);
    CAPTURE(tiny);
    CHECK(host_exact::products_exact(qr, kr) == (tiny > 0x1p-63f));
    std::vector<int> idx(n);
    for (int t = 0; t < n; ++t) idx[t] = (t * 13) % rows;
    CHECK(heads_differing(q, kv, D, idx, D, H, sink, 1.0f) == 0);
  }
}
#endif

}  // namespace test_host_attention
